package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/core/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// testConfig is a serve configuration on loopback ports picked by the
// kernel, with the rules in a temporary file.
func testConfig(t *testing.T, rules ...string) *serveConfig {
	t.Helper()
	cfg, fs := newServeFlags(io.Discard)
	if err := parseFlags(fs, nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	cfg.rules = t.TempDir()
	for i, r := range rules {
		if err := os.WriteFile(filepath.Join(cfg.rules, fmt.Sprintf("%d.yaml", i)), []byte(r), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg.grpcAddr, cfg.httpAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.watch = false
	cfg.shutdownTimeout = 5 * time.Second
	cfg.memoryClock = hourStartClock()
	return cfg
}

// hourStartClock runs at real speed from the start of an hour, so that a
// test deciding within its first second never sees a fixed window of a
// second, a minute or an hour end under it, whenever it runs.
func hourStartClock() ratelimit.Clock {
	start := time.Now()
	base := start.Truncate(time.Hour).Add(time.Hour).UnixNano()
	return ratelimit.ClockFunc(func() int64 { return base + int64(time.Since(start)) })
}

// startServer starts sluice serve in process and stops it at cleanup.
func startServer(t *testing.T, cfg *serveConfig) *server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	srv, err := newServer(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv
}

// rlsClient dials srv's gRPC listener with the go-control-plane stubs.
func rlsClient(t *testing.T, srv *server) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(srv.grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// rd builds an RLS descriptor from key, value pairs.
func rd(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func rlsReq(domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// codes returns the overall code and each status's code.
func codesOf(resp *rlsv3.RateLimitResponse) []rlsv3.RateLimitResponse_Code {
	out := []rlsv3.RateLimitResponse_Code{resp.GetOverallCode()}
	for _, s := range resp.GetStatuses() {
		out = append(out, s.GetCode())
	}
	return out
}

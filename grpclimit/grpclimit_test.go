package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/faultstore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func newLimiter(t *testing.T, l sluice.Limit, st ratelimit.Store) *sluice.Limiter {
	t.Helper()
	if st == nil {
		mem, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mem.Close() })
		st = mem
	}
	lim, err := sluice.New(sluice.Rule{Name: "rpc", Algorithm: gcra.New(), Limit: l}, sluice.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// serve starts a real gRPC server on loopback with the health service
// (a unary Check and a streaming Watch) behind the interceptors, and
// returns a client connection to it with clientOpts.
func serve(t *testing.T, d grpclimit.Decider, opts []grpclimit.Option, clientOpts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(d, opts...)),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(d, opts...)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, clientOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func details(t *testing.T, err error) (codes.Code, *errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a status", err)
	}
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return st.Code(), ri, qf
}

func TestUnaryResourceExhausted(t *testing.T) {
	c := serve(t, grpclimit.ByLimiter(newLimiter(t, sluice.PerMinute(2), nil), grpclimit.PeerAddress(64)), nil)
	ctx := t.Context()
	for i := range 2 {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	code, ri, qf := details(t, err)
	if code != codes.ResourceExhausted {
		t.Fatalf("code %s, want ResourceExhausted", code)
	}
	if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 || ri.GetRetryDelay().AsDuration() > 30*time.Second {
		t.Errorf("RetryInfo %v, want a delay in (0, 30 s]", ri)
	}
	if qf == nil || len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetSubject() != "policy:rpc" {
		t.Errorf("QuotaFailure %v", qf)
	}
}

func TestStreamResourceExhausted(t *testing.T) {
	c := serve(t, grpclimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), nil), grpclimit.Method()), nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	if code, ri, _ := details(t, err); code != codes.ResourceExhausted || ri == nil {
		t.Errorf("second stream: code %s, RetryInfo %v", code, ri)
	}
}

func TestFailClosedIsUnavailable(t *testing.T) {
	c := serve(t, grpclimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), faultstore.Down()), grpclimit.PeerAddress(64)), nil)
	_, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if code, ri, _ := details(t, err); code != codes.Unavailable || ri == nil || ri.GetRetryDelay().AsDuration() != time.Second {
		t.Errorf("code %s, RetryInfo %v; want Unavailable with a 1 s RetryInfo", code, ri)
	}
}

func TestNeverPassingCostHasNoRetryInfo(t *testing.T) {
	c := serve(t, grpclimit.ByLimiter(newLimiter(t, sluice.PerMinute(2), nil), grpclimit.PeerAddress(64)),
		[]grpclimit.Option{grpclimit.WithCost(func(context.Context, string) int64 { return 3 })},
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.Backoff{})))
	_, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{})
	code, ri, qf := details(t, err)
	if code != codes.ResourceExhausted || ri != nil || qf == nil {
		t.Errorf("code %s, RetryInfo %v, QuotaFailure %v; want ResourceExhausted, none, one", code, ri, qf)
	}
}

func TestMissingMetadataKey(t *testing.T) {
	c := serve(t, grpclimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), nil), grpclimit.Metadata("x-api-key")), nil)
	if _, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("without the key: %v, want InvalidArgument", err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k1")
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("with the key: %v", err)
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second call with the key: %v, want ResourceExhausted", err)
	}
	other := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k2")
	if _, err := c.Check(other, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("another key: %v", err)
	}
}

func TestShadowModeNeverRefuses(t *testing.T) {
	c := serve(t, grpclimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), nil), grpclimit.PeerAddress(64)),
		[]grpclimit.Option{grpclimit.WithShadowMode()})
	for i := range 3 {
		if _, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d in shadow mode: %v", i, err)
		}
	}
}

// TestClientHonoursRetryInfo: the client interceptor retries a
// ResourceExhausted call after its RetryInfo, and it then passes.
func TestClientHonoursRetryInfo(t *testing.T) {
	var calls atomic.Int64
	var refusedAt, passedAt atomic.Int64
	lim := newLimiter(t, sluice.Limit{Count: 2, Period: time.Second, Burst: 1}, nil) // one unit per 500 ms
	d := grpclimit.ByLimiter(lim, grpclimit.PeerAddress(64))
	count := grpc.UnaryServerInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		resp, err := h(ctx, req)
		if err != nil {
			refusedAt.Store(time.Now().UnixNano())
		} else {
			passedAt.Store(time.Now().UnixNano())
		}
		return resp, err
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(count, grpclimit.UnaryServerInterceptor(d)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.Backoff{BaseDelay: time.Millisecond})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	if _, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("second call, with retries: %v", err)
	}
	if calls.Load() != 3 {
		t.Errorf("%d calls reached the server, want 3 (one refused, retried once)", calls.Load())
	}
	// The limiter admits again 500 ms after the first call; the retry
	// waited for the RetryInfo, so the server admitted it at once.
	if gap := time.Duration(passedAt.Load() - refusedAt.Load()); gap <= 0 {
		t.Errorf("retry passed %s after the refusal", gap)
	}
	t.Logf("second call took %s", time.Since(start))

	// A deadline the RetryInfo wait would pass: the refusal, at once.
	lim2 := newLimiter(t, sluice.PerHour(1), nil)
	c2 := serve(t, grpclimit.ByLimiter(lim2, grpclimit.PeerAddress(64)), nil,
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.Backoff{})))
	_, _ = c2.Check(t.Context(), &healthpb.HealthCheckRequest{})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := c2.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted || ctx.Err() != nil {
		t.Errorf("%v (context %v), want ResourceExhausted before the deadline", err, ctx.Err())
	}
}

// TestCompositeNamesEveryDenyingRule: per-method and global rules decided
// together; the global denial names its rule and takes nothing from the
// other.
func TestCompositeNamesEveryDenyingRule(t *testing.T) {
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	c, err := sluice.NewComposite([]sluice.Rule{
		{Name: "per-method", Algorithm: gcra.New(), Limit: sluice.PerMinute(5)},
		{Name: "global", Algorithm: gcra.New(), Limit: sluice.PerMinute(1)},
	}, sluice.WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	all := func(context.Context, string) (string, error) { return "all", nil }
	client := serve(t, grpclimit.ByComposite(c, grpclimit.Method(), all), nil)
	if _, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{})
	code, ri, qf := details(t, err)
	if code != codes.ResourceExhausted || ri == nil || len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetSubject() != "policy:global" {
		t.Fatalf("code %s, RetryInfo %v, QuotaFailure %v", code, ri, qf)
	}
	ds, err := c.Decide(t.Context(), 0, "/grpc.health.v1.Health/Check", "all")
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Remaining != 4 {
		t.Errorf("per-method has %d left after one admitted call and one refused, want 4", ds[0].Remaining)
	}
}

// TestStreamClientRetriesRefusedOpen: a server-streaming call refused
// when it opens is opened again after the RetryInfo, and then streams.
func TestStreamClientRetriesRefusedOpen(t *testing.T) {
	var opened atomic.Int64
	count := grpc.StreamServerInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		opened.Add(1)
		return h(srv, ss)
	})
	lim := newLimiter(t, sluice.Limit{Count: 2, Period: time.Second, Burst: 1}, nil) // one stream per 500 ms
	d := grpclimit.ByLimiter(lim, grpclimit.PeerAddress(64))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(count, grpclimit.StreamServerInterceptor(d)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(grpclimit.Backoff{BaseDelay: time.Millisecond})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 2 {
		w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if n := opened.Load(); n != 3 {
		t.Errorf("%d streams opened on the server, want 3 (the second refused once, then retried)", n)
	}
}

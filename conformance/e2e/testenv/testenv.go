package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Kinds of server the package provides, as reported in Server.Kind.
const (
	KindRedis        = "redis"
	KindRedisCluster = "redis-cluster"
	KindPostgres     = "postgres"
)

// Server is one running server shared by the tests of a binary. Its fields
// are read-only; Stop and Start must not be used while other tests use the
// server concurrently.
type Server struct {
	// Kind is KindRedis, KindRedisCluster or KindPostgres.
	Kind string
	// Source says how the server was found, for example
	// "testcontainers image sluice/redis:7" or "child process
	// /usr/bin/redis-server".
	Source string
	// Addrs are the host:port of each node: one for Redis and PostgreSQL,
	// every seed node for a cluster.
	Addrs []string
	// DSN is the PostgreSQL connection URL; empty for Redis.
	DSN string

	ctl controller // nil for servers from the environment
}

// controller stops, restarts and finally removes a server the package
// started.
type controller interface {
	stop(ctx context.Context) error
	start(ctx context.Context) error
	terminate() error
}

// Addr returns the first node's host:port.
func (s *Server) Addr() string { return s.Addrs[0] }

// CanStop reports whether Stop and Start work: true for servers the
// package started, false for servers given in the environment.
func (s *Server) CanStop() bool { return s.ctl != nil }

// Stop takes the server down, keeping its data directory and port. It
// fails t when the server cannot be stopped (see CanStop).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.ctl == nil {
		t.Fatalf("testenv: %s from %s cannot be stopped", s.Kind, s.Source)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.ctl.stop(ctx); err != nil {
		t.Fatalf("testenv: stop %s: %v", s.Kind, err)
	}
}

// Start brings a stopped server back on the same address and returns once
// it answers queries again.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.ctl == nil {
		t.Fatalf("testenv: %s from %s cannot be started", s.Kind, s.Source)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.ctl.start(ctx); err != nil {
		t.Fatalf("testenv: start %s: %v", s.Kind, err)
	}
}

// lazy starts one kind of server the first time a test asks for it.
type lazy struct {
	kind   string
	launch func(ctx context.Context) (*Server, error)
	once   sync.Once
	srv    *Server
	err    error
}

var (
	redisServer   = &lazy{kind: KindRedis, launch: launchRedis}
	clusterServer = &lazy{kind: KindRedisCluster, launch: launchRedisCluster}
	pgServer      = &lazy{kind: KindPostgres, launch: launchPostgres}
	all           = []*lazy{redisServer, clusterServer, pgServer}
)

// errNone marks "no way to provide this server here": a skip outside CI.
var errNone = errors.New("testenv: not available")

// Redis returns the binary's standalone Redis server, starting it on first
// use. Without one it skips t, or fails it when CI=true.
func Redis(t testing.TB) *Server { return redisServer.get(t) }

// RedisCluster returns the binary's Redis Cluster (one node holding every
// slot when the package starts it), starting it on first use. Without one
// it skips t, or fails it when CI=true.
func RedisCluster(t testing.TB) *Server { return clusterServer.get(t) }

// Postgres returns the binary's PostgreSQL server, starting it on first
// use. Without one it skips t, or fails it when CI=true.
func Postgres(t testing.TB) *Server { return pgServer.get(t) }

func (l *lazy) get(t testing.TB) *Server {
	t.Helper()
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		begin := time.Now()
		l.srv, l.err = l.launch(ctx)
		if l.err == nil {
			report(fmt.Sprintf("testenv: %s from %s at %s (ready in %s)", l.kind, l.srv.Source, strings.Join(l.srv.Addrs, ","), time.Since(begin).Round(time.Millisecond)))
		} else {
			report(fmt.Sprintf("testenv: %s unavailable: %v", l.kind, l.err))
		}
	})
	if l.err != nil {
		if errors.Is(l.err, errNone) && !inCI() {
			t.Skipf("testenv: no %s: %v (set CI=true to make this a failure)", l.kind, l.err)
		}
		t.Fatalf("testenv: %s: %v", l.kind, l.err)
	}
	t.Logf("testenv: using %s from %s at %s", l.kind, l.srv.Source, strings.Join(l.srv.Addrs, ","))
	return l.srv
}

// inCI reports whether the tests run in CI, where a missing server fails.
func inCI() bool { return os.Getenv("CI") == "true" }

// report logs a line to stderr and appends it to the file named by
// SLUICE_TESTENV_REPORT, if any.
func report(line string) {
	fmt.Fprintln(os.Stderr, line)
	if path := os.Getenv("SLUICE_TESTENV_REPORT"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testenv: report: %v\n", err)
			return
		}
		fmt.Fprintln(f, line)
		_ = f.Close()
	}
}

// Main sets the testcontainers defaults this machine kind needs, runs the
// tests and then stops every server the package started. It returns the
// exit code for os.Exit.
func Main(m *testing.M) int {
	setContainerDefaults()
	code := m.Run()
	if err := Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Shutdown stops and removes every server the package started. Main calls
// it; call it yourself only when not using Main.
func Shutdown() error {
	var errs []error
	for _, l := range all {
		if l.srv != nil && l.srv.ctl != nil {
			if err := l.srv.ctl.terminate(); err != nil {
				errs = append(errs, fmt.Errorf("testenv: remove %s: %w", l.kind, err))
			}
		}
	}
	return errors.Join(errs...)
}

// setContainerDefaults defaults the testcontainers settings that let it
// work without a registry (no Ryuk image) and inside a VM that looks like
// a container (host detection).
func setContainerDefaults() {
	for k, v := range map[string]string{
		"TESTCONTAINERS_RYUK_DISABLED": "true",
		"TESTCONTAINERS_HOST_OVERRIDE": "localhost",
	} {
		if _, ok := os.LookupEnv(k); !ok {
			_ = os.Setenv(k, v)
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// retry calls fn until it succeeds or ctx ends, returning the last error.
func retry(ctx context.Context, fn func(ctx context.Context) error) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := fn(attempt)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// envOr returns the environment variable k, or def when it is empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

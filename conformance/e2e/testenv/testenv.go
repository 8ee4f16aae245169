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

// Server is one running server. Its fields are read-only. A shared server
// (from Redis, RedisCluster or Postgres) serves every test of the binary
// and is never stopped; a private server (from NewRedis, NewRedisCluster
// or NewPostgres) belongs to one test, which alone may stop and restart
// it.
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

	ctl   controller // nil for servers from the environment
	owner string     // name of the test owning a private server; "" if shared
}

// controller stops, restarts and finally removes a server the package
// started. Once stop or start returns, the controller has no goroutine
// running on the server's behalf, so a goroutine-leak check that brackets
// a restart sees none of its own.
type controller interface {
	stop(ctx context.Context) error
	start(ctx context.Context) error
	terminate() error
}

// Addr returns the first node's host:port.
func (s *Server) Addr() string { return s.Addrs[0] }

// CanStop reports whether Stop and Start work: true for a private server,
// false for a shared one.
func (s *Server) CanStop() bool { return s.ctl != nil && s.owner != "" }

// Stop takes a private server down, keeping its data directory and port.
// Once it returns no goroutine of the package waits on the server. It
// fails t when the server is shared (see CanStop) or when t is neither
// the owning test nor one of its subtests, and it must not be called while
// other subtests of the owner use the server.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.checkOwner(t, "stopped")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.ctl.stop(ctx); err != nil {
		t.Fatalf("testenv: stop %s: %v", s.Kind, err)
	}
}

// Start brings a stopped private server back on the same address and
// returns once it answers queries again, with no goroutine of the package
// left running. It fails t like Stop.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.checkOwner(t, "started")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.ctl.start(ctx); err != nil {
		t.Fatalf("testenv: start %s: %v", s.Kind, err)
	}
}

// checkOwner fails t unless s is private to t or to an ancestor of t, so
// that stopping a server can never disturb a test that did not ask for it.
func (s *Server) checkOwner(t testing.TB, what string) {
	t.Helper()
	if err := s.ownerErr(t.Name(), what); err != nil {
		t.Fatal(err)
	}
}

// ownerErr says why the test named name may not have s stopped or
// started (what), or returns nil when it may.
func (s *Server) ownerErr(name, what string) error {
	if !s.CanStop() {
		return fmt.Errorf("testenv: %s from %s is shared and cannot be %s: use a private server (NewRedis, NewRedisCluster, NewPostgres)", s.Kind, s.Source, what)
	}
	if name != s.owner && !strings.HasPrefix(name, s.owner+"/") {
		return fmt.Errorf("testenv: %s belongs to %s and cannot be %s by %s", s.Kind, s.owner, what, name)
	}
	return nil
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
func Redis(t testing.TB) *Server {
	t.Helper()
	return redisServer.get(t)
}

// RedisCluster returns the binary's Redis Cluster (one node holding every
// slot when the package starts it), starting it on first use. Without one
// it skips t, or fails it when CI=true.
func RedisCluster(t testing.TB) *Server {
	t.Helper()
	return clusterServer.get(t)
}

// Postgres returns the binary's PostgreSQL server, starting it on first
// use. Without one it skips t, or fails it when CI=true.
func Postgres(t testing.TB) *Server {
	t.Helper()
	return pgServer.get(t)
}

func (l *lazy) get(t testing.TB) *Server {
	t.Helper()
	l.once.Do(func() { l.srv, l.err = launch(l.kind, "", l.launch) })
	if l.err != nil {
		failOrSkip(t, l.kind, l.err)
	}
	t.Logf("testenv: using %s from %s at %s", l.kind, l.srv.Source, strings.Join(l.srv.Addrs, ","))
	return l.srv
}

// NewRedis starts a standalone Redis server for t alone, in a container
// or as a child process (never from SLUICE_REDIS_ADDR, which cannot be
// stopped), and removes it when t ends. t and its subtests may Stop and
// Start it. Without a way to start one it skips t, or fails it when
// CI=true.
func NewRedis(t testing.TB) *Server {
	t.Helper()
	return private(t, KindRedis, func(ctx context.Context) (*Server, error) {
		return firstOf(ctx, KindRedis, redisContainer, redisProcess)
	})
}

// NewRedisCluster starts a one-node Redis Cluster holding every slot for t
// alone, like NewRedis.
func NewRedisCluster(t testing.TB) *Server {
	t.Helper()
	return private(t, KindRedisCluster, func(ctx context.Context) (*Server, error) {
		return firstOf(ctx, KindRedisCluster, clusterContainer, clusterProcess)
	})
}

// NewPostgres starts a PostgreSQL server for t alone, like NewRedis
// (never from SLUICE_POSTGRES_DSN).
func NewPostgres(t testing.TB) *Server {
	t.Helper()
	return private(t, KindPostgres, func(ctx context.Context) (*Server, error) {
		return firstOf(ctx, KindPostgres, postgresContainer, postgresProcess)
	})
}

// private starts a server owned by t and removes it when t ends.
func private(t testing.TB, kind string, start func(ctx context.Context) (*Server, error)) *Server {
	t.Helper()
	srv, err := launch(kind, t.Name(), start)
	if err != nil {
		failOrSkip(t, kind, err)
	}
	srv.owner = t.Name()
	t.Cleanup(func() {
		if err := srv.ctl.terminate(); err != nil {
			t.Errorf("testenv: remove %s of %s: %v", kind, srv.owner, err)
		}
	})
	t.Logf("testenv: using a private %s from %s at %s", kind, srv.Source, strings.Join(srv.Addrs, ","))
	return srv
}

// launch starts a server with start and reports the outcome; owner names
// the test of a private server, "" for a shared one.
func launch(kind, owner string, start func(ctx context.Context) (*Server, error)) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	begin := time.Now()
	srv, err := start(ctx)
	what := kind
	if owner != "" {
		what = fmt.Sprintf("%s (private to %s)", kind, owner)
	}
	if err != nil {
		report(fmt.Sprintf("testenv: %s unavailable: %v", what, err))
		return nil, err
	}
	report(fmt.Sprintf("testenv: %s from %s at %s (ready in %s)", what, srv.Source, strings.Join(srv.Addrs, ","), time.Since(begin).Round(time.Millisecond)))
	return srv, nil
}

// failOrSkip ends t for a server that could not be had: a skip when there
// is no way to start one outside CI, a failure otherwise.
func failOrSkip(t testing.TB, kind string, err error) {
	t.Helper()
	if errors.Is(err, errNone) && !inCI() {
		t.Skipf("testenv: no %s: %v (set CI=true to make this a failure)", kind, err)
	}
	t.Fatalf("testenv: %s: %v", kind, err)
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
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

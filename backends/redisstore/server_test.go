package redisstore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain silences go-redis's logger: the fault tests make it report
// every refused dial.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// server is a redis-server child process on a loopback port, stopped when
// the test ends.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// needRedis returns the redis-server binary, skipping the test when it is
// missing (failing when CI=true, so CI cannot pass by skipping).
func needRedis(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found on PATH and CI=true: %v", err)
		}
		t.Skipf("redis-server not found on PATH (install the redis-server package): %v", err)
	}
	return bin
}

// startServer starts redis-server on a free loopback port with extra
// arguments, and waits until it answers PING. The port is free when
// chosen but another process may take it before redis-server binds it, so
// a server that does not come up is retried on a new port, three times.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	needRedis(t)
	var err error
	for range 3 {
		var l net.Listener
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		s := &server{t: t, port: port, dir: t.TempDir()}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", s.dir,
			"--loglevel", "warning", "--logfile", filepath.Join(s.dir, "redis.log"),
		}, extra...)
		if err = s.tryStart(); err == nil {
			t.Cleanup(s.kill)
			return s
		}
		s.kill()
	}
	t.Fatalf("redis-server did not start: %v", err)
	return nil
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start starts the server again on its port (after kill) and waits until
// it answers.
func (s *server) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatal(err)
	}
}

// tryStart starts the process and polls PING every 5 ms for at most 5 s.
func (s *server) tryStart() error {
	s.cmd = exec.Command("redis-server", s.args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	var err error
	for range 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s not ready: %w", s.addr(), err)
}

// kill ends the process with SIGKILL and waits for it.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// signal sends sig (SIGSTOP, SIGCONT) to the process.
func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v: %v", sig, err)
	}
}

// newClient returns a client configured as the store requires, closed
// when the test ends.
func newClient(t testing.TB, addr string, tweak ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	}
	for _, f := range tweak {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// randomPrefix returns a key prefix unique to one test.
func randomPrefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("t%x:", b)
}

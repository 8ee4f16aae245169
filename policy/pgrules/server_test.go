package pgrules

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgBinDir is where Debian's postgresql-15 package installs its binaries.
const pgBinDir = "/usr/lib/postgresql/15/bin"

// pgServer is a throwaway PostgreSQL started as a child process: its own
// data directory under os.TempDir, 127.0.0.1 on a random port, the unix
// socket in the same directory, fsync off. As root it runs as the
// "postgres" user, since initdb refuses root.
type pgServer struct {
	dir  string // temporary directory: data/, the socket and the log
	port int
	cred *syscall.Credential // nil when not root
	cmd  *exec.Cmd           // the running postmaster, nil once it was waited for
}

// Shared state of the test binary, set by TestMain.
var (
	testServer *pgServer // nil when an external DSN is used or none is available
	testDSN    string    // empty when no server is available
	skipReason string    // why integration tests skip, when testDSN is empty
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	switch dsn := os.Getenv("SLUICE_POSTGRES_DSN"); {
	case dsn != "":
		testDSN = dsn
		fmt.Fprintln(os.Stderr, "pgrules tests: using PostgreSQL at $SLUICE_POSTGRES_DSN")
	default:
		srv, err := startPG()
		if err != nil {
			skipReason = "no PostgreSQL: " + err.Error()
			if os.Getenv("CI") == "true" {
				fmt.Fprintln(os.Stderr, "pgrules tests: CI=true and "+skipReason)
				return 1
			}
			fmt.Fprintln(os.Stderr, "pgrules tests: integration tests skip: "+skipReason)
			break
		}
		defer srv.remove()
		testServer, testDSN = srv, srv.dsn()
		fmt.Fprintf(os.Stderr, "pgrules tests: child process %s/postgres on port %d\n", pgBinDir, srv.port)
	}
	return m.Run()
}

// needPG skips t when no server is available (TestMain already failed the
// binary when CI=true) and returns the DSN.
func needPG(t testing.TB) string {
	t.Helper()
	if testDSN == "" {
		t.Skip(skipReason)
	}
	return testDSN
}

// needOwnServer skips t unless the tests started the server themselves
// (tests that stop or kill it).
func needOwnServer(t testing.TB) {
	t.Helper()
	needPG(t)
	if binaryMissing() {
		t.Skip("needs the PostgreSQL binaries in " + pgBinDir)
	}
}

func binaryMissing() bool {
	_, err := os.Stat(filepath.Join(pgBinDir, "initdb"))
	return err != nil
}

// startPG creates a cluster in a new temporary directory and starts it.
func startPG() (*pgServer, error) {
	if binaryMissing() {
		return nil, fmt.Errorf("%s/initdb not found (Debian package postgresql-15)", pgBinDir)
	}
	dir, err := os.MkdirTemp("", "pgrules-test-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			s.remove()
			return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			s.remove()
			return nil, err
		}
	}
	initdb := s.command("initdb", "-D", s.dataDir(), "-U", "postgres", "--auth=trust", "--no-sync",
		"-E", "UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		s.remove()
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := s.start(); err != nil {
		s.remove()
		return nil, err
	}
	return s, nil
}

func (s *pgServer) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *pgServer) dsn() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", s.port)
}

func (s *pgServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(pgBinDir, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// start runs postgres on s.port (a free one is picked the first time) and
// waits until it accepts queries.
func (s *pgServer) start() error {
	if s.port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.cmd = s.command("postgres", "-D", s.dataDir(), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200",
		"-c", "shared_buffers=32MB")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		pool, err := pgxpool.New(ctx, s.dsn())
		if err == nil {
			err = pool.Ping(ctx)
			pool.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			s.kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("postgres not ready after 30s: %w; log:\n%s", err, log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopImmediate stops the server like a crash: pg_ctl stop -m immediate
// (no checkpoint; UNLOGGED tables are reset at the next start).
func (s *pgServer) stopImmediate() error {
	out, err := s.command("pg_ctl", "stop", "-D", s.dataDir(), "-m", "immediate", "-w").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w: %s", err, out)
	}
	s.wait()
	return nil
}

// kill stops the server fast (SIGINT, SIGKILL after 10s) and waits for
// it. It starts no goroutine that outlives it, so the suite's leak checks
// stay meaningful.
func (s *pgServer) kill() {
	if s.cmd == nil {
		return
	}
	// An error means the process is already gone; wait reaps it either way.
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	s.wait()
}

// wait reaps the postmaster, killing it if it has not exited within 10s.
func (s *pgServer) wait() {
	if s.cmd == nil {
		return
	}
	timer := time.AfterFunc(10*time.Second, func() { _ = s.cmd.Process.Kill() })
	_ = s.cmd.Wait() // the exit status of a stopped server says nothing useful
	timer.Stop()
	s.cmd = nil
}

// remove stops the server and deletes its directory.
func (s *pgServer) remove() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}

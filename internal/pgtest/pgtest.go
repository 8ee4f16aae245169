// Package pgtest starts throwaway PostgreSQL servers for tests: a child
// process with its own data directory under os.TempDir, listening on
// 127.0.0.1 on a random port, fsync off. It uses only the standard library
// and the server's own programs (initdb, postgres, pg_isready, createdb),
// so any module of the repository may use it in its tests.
//
// A test binary that needs one shared server calls Main from TestMain and
// DSN from its tests; a test that stops or crashes a server takes its own
// from New.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// binDirs are searched for the server's programs after PATH: Debian's
// postgresql-NN packages install them there.
var binDirs = []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"}

// ErrNoBinaries reports that initdb was found neither on PATH nor in the
// usual Debian directories.
var ErrNoBinaries = errors.New("pgtest: PostgreSQL binaries not found")

// BinDir returns the directory holding initdb and postgres.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// A link on PATH (/usr/local/bin/initdb, say) stands for the
		// directory holding the other programs too.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	for _, d := range binDirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: initdb not on PATH nor in %v (Debian package postgresql-15)", ErrNoBinaries, binDirs)
}

// DefaultSettings are the server settings used when Config.Settings is
// nil: speed over durability, and room for many pools.
var DefaultSettings = []string{"fsync=off", "max_connections=200", "shared_buffers=32MB"}

// Config says how to initialise a server. The zero value is a trusting
// server with the superuser "postgres" and the database "postgres".
type Config struct {
	// User is the superuser's name; default "postgres".
	User string
	// Password, when set, is the superuser's password and TCP connections
	// must give it (scram-sha-256); otherwise every connection is trusted.
	Password string
	// Database is created after the first start unless it is "postgres";
	// default "postgres".
	Database string
	// Locale is initdb's --locale; default "C".
	Locale string
	// Settings are name=value server settings; nil means DefaultSettings.
	Settings []string
}

// Server is a PostgreSQL child process. No goroutine waits for it: Stop,
// Crash and Remove reap it synchronously, so that stopping and restarting
// leaves no goroutine behind for a leak check to report. Its methods are
// not safe for concurrent use.
type Server struct {
	cfg  Config
	bin  string // directory of the server's programs
	dir  string // temporary directory: data/, the socket and the log
	port int
	cred *syscall.Credential // nil when not root
	cmd  *exec.Cmd           // the running postmaster, nil while stopped
}

// Start creates a cluster in a new temporary directory, starts it on a
// free loopback port and returns once it accepts connections. As root it
// runs the server as the "postgres" user, since initdb refuses root.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.User == "" {
		cfg.User = "postgres"
	}
	if cfg.Database == "" {
		cfg.Database = "postgres"
	}
	if cfg.Locale == "" {
		cfg.Locale = "C"
	}
	if cfg.Settings == nil {
		cfg.Settings = DefaultSettings
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, bin: bin, dir: dir}
	if err := s.create(ctx); err != nil {
		_ = s.Remove()
		return nil, err
	}
	return s, nil
}

// create runs initdb, starts the server and creates the database.
func (s *Server) create(ctx context.Context) error {
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(s.dir, int(uid), int(gid)); err != nil {
			return err
		}
	}
	args := []string{"-D", s.dataDir(), "-U", s.cfg.User, "--no-sync", "-E", "UTF8", "--locale=" + s.cfg.Locale}
	if s.cfg.Password == "" {
		args = append(args, "--auth=trust")
	} else {
		pwfile := filepath.Join(s.dir, "pw")
		if err := os.WriteFile(pwfile, []byte(s.cfg.Password+"\n"), 0o600); err != nil {
			return err
		}
		if s.cred != nil {
			if err := os.Chown(pwfile, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return err
			}
		}
		args = append(args, "--pwfile", pwfile, "--auth-local=trust", "--auth-host=scram-sha-256")
	}
	if out, err := s.command("initdb", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	if s.cfg.Database != "postgres" {
		// Over the unix socket, which trusts the superuser.
		out, err := s.command("createdb", "-h", s.dir, "-p", strconv.Itoa(s.port), "-U", s.cfg.User, s.cfg.Database).CombinedOutput()
		if err != nil {
			return fmt.Errorf("createdb: %w: %s", err, out)
		}
	}
	return nil
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Bin returns the directory of the server's programs.
func (s *Server) Bin() string { return s.bin }

// DSN returns a keyword/value connection string for the server's database.
func (s *Server) DSN() string {
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", s.port, s.cfg.User, s.cfg.Database)
	if s.cfg.Password != "" {
		dsn += " password=" + s.cfg.Password
	}
	return dsn
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL="+s.cfg.Locale)
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// readyWithin bounds how long Start waits for the server to accept
// connections (crash recovery included) when ctx allows longer.
const readyWithin = time.Minute

// Start runs the server (again, after Stop or Crash) on its port, picking
// a free one the first time, and returns once it accepts connections.
func (s *Server) Start(ctx context.Context) error {
	if s.cmd != nil {
		return errors.New("pgtest: server already running")
	}
	if s.port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"-D", s.dataDir(), "-p", strconv.Itoa(s.port), "-k", s.dir, "-c", "listen_addresses=127.0.0.1"}
	for _, kv := range s.cfg.Settings {
		args = append(args, "-c", kv)
	}
	cmd := s.command("postgres", args...)
	// An *os.File is handed to the child as is (no copying goroutine), and
	// the child keeps its own descriptor, so ours closes at once.
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return err
	}
	s.cmd = cmd
	ctx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	for {
		// pg_isready exits 0 once the server accepts connections.
		err := s.command("pg_isready", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", s.cfg.User, "-d", "postgres").Run()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			s.stop(syscall.SIGQUIT)
			log, _ := os.ReadFile(s.logPath())
			return fmt.Errorf("postgres not ready: %w (pg_isready: %w); log:\n%s", ctx.Err(), err, tail(log))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts the server down fast (SIGINT: no waiting for clients) and
// reaps it.
func (s *Server) Stop() { s.stop(syscall.SIGINT) }

// Crash stops the server like a crash (SIGQUIT, what pg_ctl stop -m
// immediate sends: no checkpoint, so the next Start runs recovery and
// UNLOGGED tables come back empty) and reaps it.
func (s *Server) Crash() { s.stop(syscall.SIGQUIT) }

// stop sends sig and waits for the postmaster, killing it if it has not
// exited within 10s.
func (s *Server) stop(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	// An error means the process is already gone; Wait reaps it either way.
	cmd := s.cmd
	_ = cmd.Process.Signal(sig)
	timer := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait() // the exit status of a signalled server says nothing useful
	timer.Stop()
	s.cmd = nil
}

// Remove stops the server and deletes its directory.
func (s *Server) Remove() error {
	s.Stop()
	return os.RemoveAll(s.dir)
}

// tail returns the last lines of a log, enough to say why a server failed.
func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

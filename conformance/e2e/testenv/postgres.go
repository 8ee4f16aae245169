package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// Credentials of the PostgreSQL servers the package starts.
const (
	pgUser     = "sluice"
	pgPassword = "sluice"
	pgDatabase = "sluice"
)

// pgServerArgs trade durability for speed: test data need not survive a
// crash of the machine.
var pgServerArgs = []string{"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200"}

// launchPostgres finds or starts the PostgreSQL server.
func launchPostgres(ctx context.Context) (*Server, error) {
	if dsn := os.Getenv("SLUICE_POSTGRES_DSN"); dsn != "" {
		if err := pingPostgres(ctx, dsn); err != nil {
			return nil, fmt.Errorf("SLUICE_POSTGRES_DSN does not answer: %w", err)
		}
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
		return &Server{Kind: KindPostgres, Source: "env SLUICE_POSTGRES_DSN", Addrs: []string{addr}, DSN: dsn}, nil
	}
	return firstOf(ctx, KindPostgres, postgresContainer, postgresProcess)
}

// pingPostgres connects to dsn and runs SELECT 1.
func pingPostgres(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return err
	}
	if one != 1 {
		return fmt.Errorf("SELECT 1 returned %d", one)
	}
	return nil
}

// postgresContainer runs PostgreSQL from SLUICE_POSTGRES_IMAGE (default
// postgres:15).
func postgresContainer(ctx context.Context) (*Server, error) {
	image := imageFor("SLUICE_POSTGRES_IMAGE", "postgres:15")
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	ctr, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithDatabase(pgDatabase),
		tcpostgres.WithUsername(pgUser),
		tcpostgres.WithPassword(pgPassword),
		testcontainers.WithEnv(map[string]string{"POSTGRES_INITDB_ARGS": "--no-sync"}),
		testcontainers.WithCmd(append([]string{"postgres"}, pgServerArgs...)...),
		tcpostgres.BasicWaitStrategies(),
		bindLoopback("5432/tcp", port),
	)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return nil, err
	}
	dsn := pgDSN(port)
	ctl := &containerCtl{ctr: ctr, ready: func(ctx context.Context) error { return pingPostgres(ctx, dsn) }}
	if err := retry(ctx, ctl.ready); err != nil {
		_ = ctl.terminate()
		return nil, err
	}
	return &Server{Kind: KindPostgres, Source: "testcontainers image " + image, Addrs: []string{"127.0.0.1:" + strconv.Itoa(port)}, DSN: dsn, ctl: ctl}, nil
}

// pgDSN is the URL of a server the package started on port.
func pgDSN(port int) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", pgUser, pgPassword, port, pgDatabase)
}

// pgBinDirs are searched for initdb and postgres after PATH.
var pgBinDirs = []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"}

// findPgBin returns the directory holding initdb and postgres.
func findPgBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	for _, d := range pgBinDirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: initdb not found on PATH or in %v", errNone, pgBinDirs)
}

// pgProc is a postgres child process with its own data directory on a
// fixed loopback port. As root it runs as the "postgres" user, because
// initdb and postgres refuse to run as root.
type pgProc struct {
	bin, dir string
	port     int
	cred     *syscall.Credential
	proc     *child // nil while stopped
}

// postgresProcess initialises a cluster and starts postgres as a child.
func postgresProcess(ctx context.Context) (*Server, error) {
	bin, err := findPgBin()
	if err != nil {
		return nil, err
	}
	p := &pgProc{bin: bin}
	if p.dir, err = os.MkdirTemp("", "sluice-pg-"); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(p.dir)
			return nil, fmt.Errorf("%w: running as root and no postgres user to run the server as: %w", errNone, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(p.dir, uid, gid); err != nil {
			_ = os.RemoveAll(p.dir)
			return nil, err
		}
	}
	pwfile := filepath.Join(p.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(pgPassword+"\n"), 0o600); err != nil {
		_ = os.RemoveAll(p.dir)
		return nil, err
	}
	if p.cred != nil {
		_ = os.Chown(pwfile, int(p.cred.Uid), int(p.cred.Gid))
	}
	initdb := p.command("initdb", "-N", "-D", p.data(), "-U", pgUser, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8")
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(p.dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, tailText(out))
	}
	if p.port, err = freePort(); err != nil {
		_ = os.RemoveAll(p.dir)
		return nil, err
	}
	if err := p.start(ctx); err != nil {
		_ = p.terminate()
		return nil, err
	}
	// The cluster has only the postgres database; create ours.
	admin := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", pgUser, pgPassword, p.port)
	conn, err := pgx.Connect(ctx, admin)
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgDatabase)
		_ = conn.Close(context.Background())
	}
	if err != nil {
		_ = p.terminate()
		return nil, fmt.Errorf("create database: %w", err)
	}
	return &Server{Kind: KindPostgres, Source: "child process " + filepath.Join(bin, "postgres"), Addrs: []string{"127.0.0.1:" + strconv.Itoa(p.port)}, DSN: pgDSN(p.port), ctl: p}, nil
}

func (p *pgProc) data() string { return filepath.Join(p.dir, "data") }

func (p *pgProc) command(name string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(p.bin, name), args...)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	c.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	return c
}

func (p *pgProc) start(ctx context.Context) error {
	args := append([]string{"-D", p.data(), "-p", strconv.Itoa(p.port), "-k", p.dir, "-c", "listen_addresses=127.0.0.1"}, pgServerArgs...)
	logPath := filepath.Join(p.dir, "server.log")
	proc, err := startChild(p.command("postgres", args...), logPath)
	if err != nil {
		return err
	}
	p.proc = proc
	admin := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", pgUser, pgPassword, p.port)
	return retry(ctx, func(ctx context.Context) error {
		if proc.exited() {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited: %s", tailText(log))
		}
		return pingPostgres(ctx, admin)
	})
}

// stop shuts the server down at once (SIGQUIT), as a crash would, killing
// it after 10 seconds; the next start runs crash recovery. It returns once
// the server has been reaped.
func (p *pgProc) stop(ctx context.Context) error {
	if p.proc == nil {
		return nil
	}
	err := p.proc.stop(ctx, syscall.SIGQUIT, 10*time.Second)
	p.proc = nil
	return err
}

func (p *pgProc) terminate() error {
	err := p.stop(context.Background())
	return errors.Join(err, os.RemoveAll(p.dir))
}

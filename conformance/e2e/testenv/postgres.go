package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// Credentials of the PostgreSQL servers the package starts.
const (
	pgUser     = "sluice"
	pgPassword = "sluice"
	pgDatabase = "sluice"
)

// pgSettings trade durability for speed: test data need not survive a
// crash of the machine.
var pgSettings = []string{"fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=200"}

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
		testcontainers.WithCmd(containerCmd()...),
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

// containerCmd is the container's command: postgres with pgSettings.
func containerCmd() []string {
	cmd := []string{"postgres"}
	for _, kv := range pgSettings {
		cmd = append(cmd, "-c", kv)
	}
	return cmd
}

// pgDSN is the URL of a server the package started on port.
func pgDSN(port int) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", pgUser, pgPassword, port, pgDatabase)
}

// pgProc is a PostgreSQL child process (internal/pgtest) with its own data
// directory on a fixed loopback port.
type pgProc struct{ srv *pgtest.Server }

// postgresProcess initialises a cluster with our user, password and
// database and starts postgres as a child.
func postgresProcess(ctx context.Context) (*Server, error) {
	if _, err := pgtest.BinDir(); err != nil {
		return nil, fmt.Errorf("%w: %w", errNone, err)
	}
	srv, err := pgtest.Start(ctx, pgtest.Config{
		User: pgUser, Password: pgPassword, Database: pgDatabase,
		Locale: "C.UTF-8", Settings: pgSettings,
	})
	if err != nil {
		return nil, err
	}
	return &Server{Kind: KindPostgres, Source: "child process " + filepath.Join(srv.Bin(), "postgres"), Addrs: []string{srv.Addr()}, DSN: pgDSN(srv.Port()), ctl: pgProc{srv}}, nil
}

func (p pgProc) start(ctx context.Context) error { return p.srv.Start(ctx) }

// stop shuts the server down at once (SIGQUIT), as a crash would; the next
// start runs crash recovery. It returns once the server has been reaped.
func (p pgProc) stop(context.Context) error {
	p.srv.Crash()
	return nil
}

func (p pgProc) terminate() error { return p.srv.Remove() }

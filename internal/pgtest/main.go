package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// The test binary's shared server, set by Main.
var (
	shared     *Server // nil when $SLUICE_POSTGRES_DSN is used or none is available
	sharedDSN  string  // empty when no server is available
	skipReason string  // why tests needing a server skip, when sharedDSN is empty
)

// Main runs the tests of m against one PostgreSQL server: the one at
// $SLUICE_POSTGRES_DSN when set, else a server it starts and removes once
// the tests are done. When none can be had, the tests that need one skip,
// or the binary fails when CI=true. name prefixes what it prints. It
// returns the exit code for os.Exit.
func Main(m *testing.M, name string) int {
	if dsn := os.Getenv("SLUICE_POSTGRES_DSN"); dsn != "" {
		sharedDSN = dsn
		fmt.Fprintf(os.Stderr, "%s tests: using PostgreSQL at $SLUICE_POSTGRES_DSN\n", name)
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := Start(ctx, Config{})
	cancel()
	if err != nil {
		skipReason = "no PostgreSQL: " + err.Error()
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "%s tests: CI=true and %s\n", name, skipReason)
			return 1
		}
		fmt.Fprintf(os.Stderr, "%s tests: integration tests skip: %s\n", name, skipReason)
		return m.Run()
	}
	defer func() { _ = srv.Remove() }()
	shared, sharedDSN = srv, srv.DSN()
	fmt.Fprintf(os.Stderr, "%s tests: child process %s/postgres on port %d\n", name, srv.Bin(), srv.Port())
	return m.Run()
}

// DSN returns the connection string of the server Main provides, or skips
// t when there is none (Main already failed the binary when CI=true).
func DSN(t testing.TB) string {
	t.Helper()
	if sharedDSN == "" {
		t.Skip(skipReason)
	}
	return sharedDSN
}

// Shared returns the server Main started, or nil when the tests use
// $SLUICE_POSTGRES_DSN or have no server: only then may a test stop and
// restart the shared server.
func Shared() *Server { return shared }

// New starts a server for t alone, removed when t ends, for tests that
// stop or crash it. It skips t like DSN, and also when the server's
// programs are missing (with $SLUICE_POSTGRES_DSN set, they may be).
func New(t testing.TB) *Server {
	t.Helper()
	DSN(t)
	if _, err := BinDir(); errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	srv, err := Start(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Remove(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

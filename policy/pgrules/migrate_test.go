package pgrules

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
)

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t)) // migrated once
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- Migrate(t.Context(), f.pool, f.opts...) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	var tables, triggers int
	err := f.pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('RateLimitRule', 'RateLimitViolation')),
		(SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($2) AND NOT tgisinternal)`,
		f.schema, f.rules).Scan(&tables, &triggers)
	if err != nil {
		t.Fatal(err)
	}
	if tables != 2 || triggers != 2 {
		t.Fatalf("after 6 Migrate calls: %d tables, %d triggers on the rule table; want 2 and 2", tables, triggers)
	}

	// The touch trigger moves updated_at on every UPDATE.
	f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 5, "minute")
	f.exec(t, "UPDATE %s SET requests_per_unit = 6")
	var moved bool
	if err := f.pool.QueryRow(t.Context(), "SELECT updated_at > created_at FROM "+f.rules).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Fatal("updated_at did not move on UPDATE; the touch trigger did not run")
	}
}

func TestSchemaSQL(t *testing.T) {
	t.Parallel()
	sql, err := SchemaSQL(WithSchema("ops"), WithChannel("rules_changed"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`CREATE SCHEMA IF NOT EXISTS "ops";`,
		`CREATE TABLE IF NOT EXISTS "ops"."RateLimitRule" (`,
		`CREATE TABLE IF NOT EXISTS "ops"."RateLimitViolation" (`,
		`EXECUTE FUNCTION "ops"."sluice_rules_notify"('rules_changed');`,
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("SchemaSQL lacks %q:\n%s", want, sql)
		}
	}
	for _, bad := range []Option{WithSchema("a-b"), WithChannel(""), WithChannel("x'; DROP"), WithPollInterval(time.Millisecond), nil} {
		if _, err := SchemaSQL(bad); err == nil {
			t.Errorf("SchemaSQL with a bad option: no error")
		}
	}
}

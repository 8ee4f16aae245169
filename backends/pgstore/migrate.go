package pgstore

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/core/ratelimit"
)

//go:embed schema.sql
var schemaTemplate string

var schemaTmpl = template.Must(template.New("schema.sql").Parse(schemaTemplate))

// migrateLockKey is the transaction-scoped advisory lock that serializes
// concurrent Migrate calls (CREATE … IF NOT EXISTS alone can fail with a
// unique violation when two sessions race).
const migrateLockKey = "sluice/pgstore/migrate"

// SchemaSQL returns the SQL that Migrate runs for this store's options: the
// table (and schema, when WithSchema is set), every statement idempotent.
// Teams that run migrations with their own tool can take it from here.
func (s *Store) SchemaSQL() string {
	var b strings.Builder
	data := struct {
		Schema, Table string
		Unlogged      bool
	}{Table: s.table, Unlogged: s.cfg.unlogged}
	if s.cfg.schema != "" {
		data.Schema = pgx.Identifier{s.cfg.schema}.Sanitize()
	}
	// The template and its data are fixed, so Execute cannot fail on a
	// strings.Builder.
	_ = schemaTmpl.Execute(&b, data)
	return b.String()
}

// Migrate creates the store's table (and schema) if it does not exist, in
// one transaction serialized with other Migrate calls by an advisory lock.
// It is idempotent and safe to run from every process at start-up. It
// reports ratelimit.ErrInvalidOption when the table exists with a
// persistence (logged or UNLOGGED) other than the one configured; changing
// it is a table rewrite left to the operator
// (ALTER TABLE … SET LOGGED / SET UNLOGGED). Other errors wrap
// ratelimit.ErrClosed or ratelimit.ErrUnavailable. Without a ctx deadline
// it is bounded by the default timeout.
func (s *Store) Migrate(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %w", ratelimit.ErrClosed)
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	conn, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer s.release(ctx, conn)
	t, err := s.timeouts(ctx)
	if err != nil {
		return err
	}
	var persistence string
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.q.setTimeouts, t.lock, t.statement, t.idle); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", migrateLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.SchemaSQL()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1)", s.table).Scan(&persistence)
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w: %w", s.table, ratelimit.ErrUnavailable, err)
	}
	if want := map[bool]string{true: "u", false: "p"}[s.cfg.unlogged]; persistence != want {
		return fmt.Errorf("%w: pgstore: table %s exists with relpersistence %q, configured %q (unlogged=%t); "+
			"change it with ALTER TABLE … SET LOGGED or SET UNLOGGED", ratelimit.ErrInvalidOption, s.table, persistence, want, s.cfg.unlogged)
	}
	return nil
}

package pgrules

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
)

// Pool is what the package needs of a connection pool: a *pgxpool.Pool or
// a wrapper. Each call borrows one connection; Watch holds one for as long
// as it listens.
type Pool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

var _ Pool = (*pgxpool.Pool)(nil)

//go:embed schema.sql
var schemaTemplate string

var schemaTmpl = template.Must(template.New("schema.sql").Parse(schemaTemplate))

// migrateLockKey is the transaction-scoped advisory lock that serializes
// concurrent Migrate calls (CREATE … IF NOT EXISTS alone can fail with a
// unique violation when two sessions race).
const migrateLockKey = "sluice/policy/pgrules/migrate"

// SchemaSQL returns the SQL that Migrate runs for opts (only WithSchema and
// WithChannel matter): both tables, the index, the trigger functions and
// triggers, every statement idempotent. Teams that run migrations with
// their own tool can take it from here.
func SchemaSQL(opts ...Option) (string, error) {
	c, err := newConfig(opts)
	if err != nil {
		return "", err
	}
	return c.schemaSQL(), nil
}

func (c *config) schemaSQL() string {
	// Functions live in the tables' schema; index names are never
	// qualified (PostgreSQL puts an index in its table's schema).
	data := map[string]string{
		"Rules":               c.ident(RuleTable),
		"Violations":          c.ident(ViolationTable),
		"RulesActiveIndex":    pgx.Identifier{RuleTable + "_active"}.Sanitize(),
		"ViolationsTimeIndex": pgx.Identifier{ViolationTable + "_occurred_at"}.Sanitize(),
		"Touch":               c.ident("sluice_rules_touch"),
		"Notify":              c.ident("sluice_rules_notify"),
		"Channel":             "'" + c.channel + "'", // validIdent: no quote can occur
	}
	if c.schema != "" {
		data["Schema"] = pgx.Identifier{c.schema}.Sanitize()
	}
	var b strings.Builder
	// The template and its data are fixed, so Execute cannot fail on a
	// strings.Builder.
	_ = schemaTmpl.Execute(&b, data)
	return b.String()
}

// Migrate creates the rule and violation tables, their index, trigger
// functions and triggers where missing, in one transaction serialized with
// other Migrate calls by an advisory lock. It is idempotent and safe to run
// from every process at start-up; it also replaces the trigger functions,
// so upgrading the package upgrades them. Errors wrap sluice.ErrInvalid
// (bad options) or sluice.ErrUnavailable.
func Migrate(ctx context.Context, pool Pool, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	if pool == nil {
		return fmt.Errorf("%w: pgrules: nil pool", sluice.ErrInvalid)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgrules: migrate: %w: %w", sluice.ErrUnavailable, err)
	}
	defer conn.Release()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", migrateLockKey); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, c.schemaSQL())
		return err
	})
	if err != nil {
		return fmt.Errorf("pgrules: migrate: %w: %w", sluice.ErrUnavailable, err)
	}
	return nil
}

// withTimeout bounds ctx by the configured timeout unless it has an
// earlier deadline.
func (c *config) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

package pgrules

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/policy"
)

// fixture is one test's tables: a schema and a NOTIFY channel of its own
// on a shared server, so tests run in parallel; and a domain of its own.
// Its engines count in memory stores of their own, so rules never share
// buckets, not even named rules (whose identity is their name) of the
// same test run again by -count.
type fixture struct {
	pool   *pgxpool.Pool
	opts   []Option
	schema string
	domain string
	rules  string // the quoted, qualified rule table
}

func newFixture(t *testing.T, dsn string, opts ...Option) *fixture {
	t.Helper()
	suffix := randomSuffix()
	f := &fixture{schema: "pgrules_" + suffix, domain: "d_" + suffix}
	f.opts = append([]Option{WithSchema(f.schema), WithChannel("rules_" + suffix)}, opts...)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	f.pool = pool
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+f.schema+" CASCADE") // best effort on a throwaway server
		pool.Close()
	})
	if err := Migrate(t.Context(), pool, f.opts...); err != nil {
		t.Fatal(err)
	}
	c, _ := newConfig(f.opts)
	f.rules = c.ident(RuleTable)
	return f
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// insert adds a rule row with the given columns (domain defaults to the
// fixture's) and returns its id.
func (f *fixture) insert(t *testing.T, columns string, args ...any) int64 {
	t.Helper()
	if !strings.Contains(columns, "domain") {
		columns = "domain, " + columns
		args = append([]any{f.domain}, args...)
	}
	ph := make([]string, len(args))
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	var id int64
	err := f.pool.QueryRow(t.Context(), "INSERT INTO "+f.rules+" ("+columns+") VALUES ("+strings.Join(ph, ", ")+") RETURNING id",
		args...).Scan(&id)
	if err != nil {
		t.Fatalf("insert (%s): %v", columns, err)
	}
	return id
}

// exec runs sql on the fixture's rule table: "%s" in sql is its name.
func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(t.Context(), fmt.Sprintf(sql, f.rules), args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) source(t *testing.T, opts ...Option) *Source {
	t.Helper()
	src, err := NewSource(f.pool, append(append([]Option{}, f.opts...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// engine loads the table and returns an engine on the memory store.
func (f *fixture) engine(t *testing.T, src *Source, opts ...policy.Option) *policy.Engine {
	t.Helper()
	set, err := src.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// a store in opts comes later and replaces this one
	e, err := policy.New(set, append([]policy.Option{policy.WithStore(st)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) policy.Descriptor {
	d := make(policy.Descriptor, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		d = append(d, policy.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// admitted decides n single hits of d and counts the allowed ones.
func admitted(t *testing.T, e *policy.Engine, domain string, d policy.Descriptor, n int) int {
	t.Helper()
	ok := 0
	for range n {
		res, err := e.Decide(t.Context(), domain, []policy.Descriptor{d}, 1)
		if err != nil {
			t.Fatalf("Decide %v: %v", d, err)
		}
		if res.Allowed {
			ok++
		}
	}
	return ok
}

// limitInForce peeks at d and returns the limit in force for it.
func limitInForce(t *testing.T, e *policy.Engine, domain string, d policy.Descriptor) int64 {
	t.Helper()
	res, err := e.Decide(t.Context(), domain, []policy.Descriptor{d}, 0)
	if err != nil {
		t.Fatalf("Decide %v: %v", d, err)
	}
	return res.Statuses[0].Decision.Limit.Count
}

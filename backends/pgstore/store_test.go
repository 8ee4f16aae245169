package pgstore

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestNewRefusesBadOptions(t *testing.T) {
	pool := &pgxpool.Pool{} // never used: New does not touch the database
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"nil option", []Option{nil}},
		{"empty table", []Option{WithTable("")}},
		{"quote in table", []Option{WithTable(`a"b`)}},
		{"table starting with digit", []Option{WithTable("1abc")}},
		{"table too long", []Option{WithTable(strings.Repeat("a", 64))}},
		{"schema with dot", []Option{WithSchema("a.b")}},
		{"zero statement margin", []Option{WithTimeoutMargins(10*time.Millisecond, 0)}},
		{"lock margin below statement margin", []Option{WithTimeoutMargins(time.Millisecond, 2*time.Millisecond)}},
		{"default timeout within lock margin", []Option{WithDefaultTimeout(10 * time.Millisecond)}},
		{"zero sweep batch", []Option{WithSweepBatch(0)}},
		{"sub-millisecond max lock wait", []Option{WithMaxLockWait(time.Microsecond)}},
		{"negative max lock wait", []Option{WithMaxLockWait(-time.Second)}},
		{"negative sweep interval", []Option{WithSweeper(-time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(pool, tc.opts...)
			if !errors.Is(err, ratelimit.ErrInvalidOption) {
				t.Fatalf("New = %v, %v; want ErrInvalidOption", s, err)
			}
		})
	}
	if _, err := New(nil); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Fatalf("New(nil) = %v, want ErrInvalidOption", err)
	}
	if _, err := New((*pgxpool.Pool)(nil)); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Fatalf("New of a nil *pgxpool.Pool = %v, want ErrInvalidOption", err)
	}
	s, err := New(pool, WithSchema("Limits"), WithTable("rl_2"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Table(), `"Limits"."rl_2"`; got != want {
		t.Fatalf("Table() = %s, want %s", got, want)
	}
}

// TestDocShowsSchema keeps the SQL in the package documentation equal to
// what Migrate runs with the default options.
func TestDocShowsSchema(t *testing.T) {
	s, err := New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var indented strings.Builder
	for line := range strings.SplitSeq(strings.TrimSpace(s.SchemaSQL()), "\n") {
		indented.WriteString("//\t" + line + "\n")
	}
	if !strings.Contains(strings.ReplaceAll(string(doc), "//\t\n", "//\n"), indented.String()) {
		t.Fatalf("doc.go does not show the default schema; it should contain:\n%s", indented.String())
	}
	u, err := New(&pgxpool.Pool{}, WithUnlogged(), WithSchema("rl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS "rl";`, `CREATE UNLOGGED TABLE IF NOT EXISTS "rl"."sluice_ratelimit"`} {
		if !strings.Contains(u.SchemaSQL(), want) {
			t.Errorf("SchemaSQL with schema and unlogged lacks %q:\n%s", want, u.SchemaSQL())
		}
	}
}

func TestTimeoutsShorterThanDeadline(t *testing.T) {
	s, err := New(&pgxpool.Pool{}, WithTimeoutMargins(20*time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ms := func(v string) time.Duration {
		n, err := strconv.Atoi(strings.TrimSuffix(v, "ms"))
		if err != nil || !strings.HasSuffix(v, "ms") {
			t.Fatalf("timeout %q is not in whole milliseconds", v)
		}
		return time.Duration(n) * time.Millisecond
	}
	for _, left := range []time.Duration{5 * time.Millisecond, 22 * time.Millisecond, 100 * time.Millisecond, 5 * time.Second} {
		// The pure computation: a real deadline of a few ms could pass
		// before timeouts reads the clock on a loaded machine.
		to, err := s.timeoutsFor(left)
		if err != nil {
			t.Fatalf("left %s: %v", left, err)
		}
		lock, stmt, idle := ms(to.lock), ms(to.statement), ms(to.idle)
		// Margins shrink to half and a quarter of the time left.
		lockMargin, stmtMargin := min(20*time.Millisecond, left/2), min(10*time.Millisecond, left/4)
		if lock < time.Millisecond || lock > left-lockMargin || stmt > left-stmtMargin || lock > stmt {
			t.Errorf("left %s: lock_timeout %s, statement_timeout %s: want 1ms <= lock <= statement, each its margin before the deadline", left, lock, stmt)
		}
		if idle > left || idle < stmt {
			t.Errorf("left %s: idle_in_transaction_session_timeout %s, want between statement_timeout %s and the deadline", left, idle, stmt)
		}
	}
	if _, err := s.timeoutsFor(1900 * time.Microsecond); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("timeouts with less than 2ms left = %v, want ErrUnavailable", err)
	}
}

func TestExpiry(t *testing.T) {
	const maxNs = 1<<63 - 1
	for _, tc := range []struct {
		now  int64
		ttl  time.Duration
		want int64
	}{
		{1_000_000_000, time.Second, 2_000_000_000},
		{1_000_000_000, 1, 1_000_001_000},                // rounded up to the microsecond
		{1_000_000_001, time.Microsecond, 1_000_002_000}, // never early
		{maxNs - 10, time.Hour, maxNs - maxNs%1000},      // saturates
		{1_000, ratelimit.Never, maxNs - maxNs%1000},     // saturates
	} {
		if got := expiry(tc.now, tc.ttl).UnixNano(); got != tc.want || got < min(tc.now+int64(tc.ttl), maxNs-maxNs%1000) {
			t.Errorf("expiry(%d, %d) = %d, want %d", tc.now, tc.ttl, got, tc.want)
		}
	}
}

func TestClassifyWrite(t *testing.T) {
	pgErr := func(code string) error { return &pgconn.PgError{Code: code, Message: "test"} }
	for _, tc := range []struct {
		name     string
		err      error
		atCommit bool
		want     error
	}{
		{"server error before commit", pgErr(codeLockNotAvailable), false, ratelimit.ErrUnavailable},
		{"terminated before commit", pgErr("57P01"), false, ratelimit.ErrUnavailable},
		{"serialization failure on commit", pgErr(codeSerializationFailure), true, ratelimit.ErrUnavailable},
		{"deferred constraint on commit", pgErr("23505"), true, ratelimit.ErrUnavailable},
		{"completion unknown on commit", pgErr("40003"), true, ratelimit.ErrUnknownOutcome},
		{"terminated on commit", pgErr("57P01"), true, ratelimit.ErrUnknownOutcome},
		{"cancelled on commit", pgErr(codeQueryCanceled), true, ratelimit.ErrUnknownOutcome},
		{"lost connection", errors.New("read tcp: connection reset"), false, ratelimit.ErrUnknownOutcome},
		{"deadline while waiting for the reply", context.DeadlineExceeded, true, ratelimit.ErrUnknownOutcome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classifyWrite("test", tc.err, tc.atCommit)
			if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
				t.Fatalf("classifyWrite = %v, want it to wrap %v and the cause", got, tc.want)
			}
			if errors.Is(got, ratelimit.ErrUnavailable) == errors.Is(got, ratelimit.ErrUnknownOutcome) {
				t.Fatalf("classifyWrite = %v, want exactly one class", got)
			}
		})
	}
	if retryable(classifyWrite("test", pgErr(codeLockNotAvailable), false)) {
		t.Error("a lock timeout is retried; its deadline is spent")
	}
	if !retryable(classifyWrite("test", pgErr(codeDeadlockDetected), false)) {
		t.Error("a deadlock that rolled back is not retried")
	}
	if retryable(classifyWrite("test", pgErr(codeSerializationFailure), true)) == false {
		t.Error("a serialization failure on commit is not retried")
	}
}

func TestMigrateIdempotentConcurrentSafe(t *testing.T) {
	pool := newPool(t, nil)
	schema, table := randomName("s_"), randomName("t_")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := New(pool, WithSchema(schema), WithTable(table))
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			errs[i] = s.Migrate(t.Context())
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Migrate %d: %v", i, err)
		}
	}
	s := newStoreOn(t, pool, WithSchema(schema), WithTable(table)) // a fifth time
	if _, err := s.Apply(t.Context(), take("k", 1, 1)); err != nil {
		t.Fatal(err)
	}
	u, err := New(pool, WithSchema(schema), WithTable(table), WithUnlogged())
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Migrate(t.Context()); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Fatalf("Migrate UNLOGGED over a logged table = %v, want ErrInvalidOption", err)
	}
}

func TestApplyExactCounts(t *testing.T) {
	s, pool := newStore(t)
	keys := []string{"plain", "nul\x00byte", "\xff\xfeinvalid-utf8", "'; DROP TABLE x; --", "{tag}", "cr\r\nlf", strings.Repeat("k", ratelimit.MaxKeyLen)}
	for _, key := range keys {
		for i := range 7 {
			o, err := s.Apply(t.Context(), take(key, 5, 1))
			if err != nil {
				t.Fatalf("key %q, call %d: %v", key, i, err)
			}
			if wantAllowed, wantRemaining := i < 5, max(int64(4-i), 0); o.Allowed != wantAllowed || o.Remaining != wantRemaining {
				t.Fatalf("key %q, call %d: allowed %t remaining %d, want %t %d", key, i, o.Allowed, o.Remaining, wantAllowed, wantRemaining)
			}
			if !o.Allowed && (o.RetryAfter <= 0 || o.RetryAfter > time.Hour) {
				t.Fatalf("key %q, call %d: denied with RetryAfter %s, want within the hour window", key, i, o.RetryAfter)
			}
		}
		if n := rowCount(t, pool, s, key); n != 1 {
			t.Fatalf("key %q has %d rows, want 1", key, n)
		}
	}
	// The same key in another namespace is independent.
	c := take(keys[1], 5, 1)
	c.Namespace = "other\x00ns"
	if o, err := s.Apply(t.Context(), c); err != nil || o.Remaining != 4 {
		t.Fatalf("other namespace: %+v, %v; want remaining 4", o, err)
	}
	// Reset makes the key fully available and deletes its row.
	if err := s.Reset(t.Context(), "ns", keys[2]); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, s, keys[2], 5); got != 5 {
		t.Fatalf("after Reset, remaining %d, want 5", got)
	}
	if err := s.Reset(t.Context(), "ns", "never-seen"); err != nil {
		t.Fatalf("Reset of a key without state: %v", err)
	}
	// An expired row counts as absent, without waiting for the sweeper.
	if _, err := pool.Exec(t.Context(), "UPDATE "+s.Table()+" SET expires_at = clock_timestamp() - interval '1 second' WHERE key = $1", []byte(keys[0])); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, s, keys[0], 5); got != 5 {
		t.Fatalf("expired row: remaining %d, want 5", got)
	}
}

func TestApplyAllAllOrNothing(t *testing.T) {
	s, _ := newStore(t)
	a, b := randomName("a-"), randomName("b-")
	checks := []ratelimit.Check{take(a, 5, 1), take(b, 1, 1)}
	out := make([]ratelimit.Outcome, len(checks))
	if ok, err := s.ApplyAll(t.Context(), checks, out); err != nil || !ok {
		t.Fatalf("first composite: %t, %v; want allowed", ok, err)
	}
	if ok, err := s.ApplyAll(t.Context(), checks, out); err != nil || ok || !out[0].Allowed || out[1].Allowed {
		t.Fatalf("second composite: %t, %v, %+v; want denied by the second check only", ok, err, out)
	}
	if got := remaining(t, s, a, 5); got != 4 {
		t.Fatalf("denied composite consumed from its first key: remaining %d, want 4", got)
	}
	// The same key twice: the second check sees the first one's effect.
	c := take(randomName("same-"), 3, 2)
	if ok, err := s.ApplyAll(t.Context(), []ratelimit.Check{c, c}, out); err != nil || ok || !out[0].Allowed || out[1].Allowed {
		t.Fatalf("same key twice (2+2 of 3): %t, %v, %+v; want the second denied", ok, err, out)
	}
	if got := remaining(t, s, c.Key, 3); got != 3 {
		t.Fatalf("denied composite on one key consumed: remaining %d, want 3", got)
	}
	if _, err := s.ApplyAll(t.Context(), checks, out[:1]); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Fatalf("short out slice: %v, want ErrInvalidOption", err)
	}
}

func TestApplyRefusesBadInput(t *testing.T) {
	s, pool := newStore(t)
	long := strings.Repeat("x", ratelimit.MaxKeyLen+1)
	for _, tc := range []struct {
		name string
		c    ratelimit.Check
		want error
	}{
		{"empty key", take("", 5, 1), ratelimit.ErrInvalidKey},
		{"long key", take(long, 5, 1), ratelimit.ErrInvalidKey},
		{"negative cost", take("k", 5, -1), ratelimit.ErrInvalidCost},
		{"zero limit", ratelimit.Check{Key: "k", Algorithm: windowAlg{}}, ratelimit.ErrInvalidLimit},
		{"nil algorithm", ratelimit.Check{Key: "k", Limit: hourly(1)}, ratelimit.ErrInvalidRule},
		{"algorithm name with NUL", ratelimit.Check{Key: "k", Limit: hourly(1), Algorithm: windowAlg{name: "a\x00b"}}, ratelimit.ErrInvalidRule},
		{"unsupported op", ratelimit.Check{Key: "k", Limit: hourly(1), Algorithm: windowAlg{}, Op: ratelimit.OpRefund, Cost: 1}, ratelimit.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Apply(t.Context(), tc.c); !errors.Is(err, tc.want) {
				t.Fatalf("Apply = %v, want %v", err, tc.want)
			}
		})
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+s.Table()+" WHERE state <> ''").Scan(&n); err != nil || n != 0 {
		t.Fatalf("bad input left %d rows with state (%v), want 0", n, err)
	}
}

func TestCorruptStateLeftUntouched(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("k-")
	if _, err := s.Apply(t.Context(), take(key, 5, 1)); err != nil {
		t.Fatal(err)
	}
	c := take(key, 5, 1)
	c.Algorithm = windowAlg{name: "other"}
	if _, err := s.Apply(t.Context(), c); !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Fatalf("Apply with another algorithm on the key = %v, want ErrCorruptState", err)
	}
	if _, err := pool.Exec(t.Context(), "UPDATE "+s.Table()+" SET state = '\\x0102' WHERE key = $1", []byte(key)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(t.Context(), take(key, 5, 1)); !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Fatalf("Apply on undecodable state = %v, want ErrCorruptState", err)
	}
	var state []byte
	if err := pool.QueryRow(t.Context(), "SELECT state FROM "+s.Table()+" WHERE key = $1", []byte(key)).Scan(&state); err != nil || string(state) != "\x01\x02" {
		t.Fatalf("state after the refused call: %x, %v; want it untouched", state, err)
	}
	if err := s.Reset(t.Context(), "ns", key); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, s, key, 5); got != 5 {
		t.Fatalf("after Reset, remaining %d, want 5", got)
	}
}

func TestClose(t *testing.T) {
	s, _ := newStore(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Apply(t.Context(), take("k", 1, 1)); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Apply after Close = %v, want ErrClosed", err)
	}
	if err := s.Reset(t.Context(), "ns", "k"); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Reset after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Sweep(t.Context()); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Sweep after Close = %v, want ErrClosed", err)
	}
}

func TestDeadlineTooShortRefusedBeforeSending(t *testing.T) {
	s, pool := newStore(t)
	// Less than 2ms: the shrunk lock margin (half the time left) would
	// leave lock_timeout under 1ms.
	const tooShort = 1900 * time.Microsecond
	ctx, cancel := context.WithTimeout(t.Context(), tooShort)
	defer cancel()
	key := randomName("k-")
	if _, err := s.Apply(ctx, take(key, 5, 1)); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Apply with %s left = %v, want ErrUnavailable", tooShort, err)
	}
	if n := rowCount(t, pool, s, key); n != 0 {
		t.Fatalf("refused call reached the server: %d rows", n)
	}
	cancelled, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if _, err := s.Apply(cancelled, take(key, 5, 1)); !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled context = %v, want ErrUnavailable wrapping context.Canceled", err)
	}
}

// TestQueryExecModes runs a few decisions with every pgx query exec mode,
// since poolers (PgBouncer in transaction mode) may need a mode other than
// the default statement cache. Keys with NUL and invalid UTF-8 check that
// every mode sends them as bytea.
func TestQueryExecModes(t *testing.T) {
	table := randomName("t_")
	newStoreOn(t, newPool(t, nil), WithTable(table))
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newStoreOn(t, newPool(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode }), WithTable(table))
			key := randomName("mode\x00\xff-")
			for i := range 4 {
				o, err := s.Apply(t.Context(), take(key, 3, 1))
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if o.Allowed != (i < 3) {
					t.Fatalf("call %d: allowed %t, want %t", i, o.Allowed, i < 3)
				}
			}
			out := make([]ratelimit.Outcome, 2)
			if ok, err := s.ApplyAll(t.Context(), []ratelimit.Check{take(key+"a", 1, 1), take(key+"b", 1, 1)}, out); err != nil || !ok {
				t.Fatalf("composite: %t, %v", ok, err)
			}
			if err := s.Reset(t.Context(), "ns", key); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, s, key, 3); got != 3 {
				t.Fatalf("after Reset: remaining %d, want 3", got)
			}
		})
	}
}

// TestReadCommittedWhateverTheDefault: a database whose default isolation
// is SERIALIZABLE still gets exact, error-free decisions on a new key under
// contention, since the store starts its transactions at READ COMMITTED.
func TestReadCommittedWhateverTheDefault(t *testing.T) {
	pool := newPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
		c.MaxConns = 16
	})
	s := newStoreOn(t, pool, WithTable(randomName("t_")))
	key := randomName("ser-")
	const callers, calls = 16, 8
	allowed := admitConcurrently(t, callers, calls, func(ctx context.Context, _ int) (bool, error) {
		o, err := s.Apply(ctx, take(key, 1000, 1))
		return o.Allowed, err
	})
	if allowed != callers*calls {
		t.Fatalf("%d allowed, want %d", allowed, callers*calls)
	}
}

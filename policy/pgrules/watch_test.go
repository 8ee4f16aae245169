package pgrules

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/policy"
)

// watching runs src.Watch into e until the test ends and returns the
// channel its reload hook reports to.
func watching(t *testing.T, f *fixture, e *policy.Engine, opts ...Option) (*Source, <-chan error) {
	t.Helper()
	reloads := make(chan error, 1000)
	src := f.source(t, append(opts, OnReload(func(r policy.Reload) {
		if (r.Set == nil) == (r.Err == nil) {
			t.Errorf("reload reported with set %p and error %v: want exactly one", r.Set, r.Err)
		}
		select {
		case reloads <- r.Err:
		default:
		}
	}))...)
	return src, reloads
}

func startWatch(t *testing.T, src *Source, e *policy.Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Watch(ctx, e.Swap) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
}

// nextReload waits for the hook's next report.
func nextReload(t *testing.T, reloads <-chan error) error {
	t.Helper()
	select {
	case err := <-reloads:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("no reload within 30s")
		return nil
	}
}

// waitLimit waits until the limit in force for d is want, and returns how
// long that took.
func waitLimit(t *testing.T, e *policy.Engine, domain string, d policy.Descriptor, want int64) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		if got := limitInForce(t, e, domain, d); got == want {
			return time.Since(start)
		} else if time.Now().After(deadline) {
			t.Fatalf("limit in force for %v is %d 30s after the change, want %d", d, got, want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestWatchNotify: committed changes reach the engine through NOTIFY; a
// bad row is refused and the rules in force stay; the propagation delay
// from COMMIT to the new limit deciding is logged.
func TestWatchNotify(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t))
	id := f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 5, "minute")
	user := desc("user", "u1")
	e := f.engine(t, f.source(t))
	// A long poll interval: only a notification can explain a quick reload.
	src, reloads := watching(t, f, e, WithPollInterval(time.Hour))
	startWatch(t, src, e)
	if err := nextReload(t, reloads); err != nil {
		t.Fatalf("first reload: %v", err)
	}

	var delays []time.Duration
	for i := range 20 {
		want := int64(10 + i)
		f.exec(t, "UPDATE %s SET requests_per_unit = $1 WHERE id = $2", want, id)
		delays = append(delays, waitLimit(t, e, f.domain, user, want))
	}
	slices.Sort(delays)
	t.Logf("propagation UPDATE committed -> new limit deciding, 20 changes: min %s, median %s, p90 %s, max %s",
		delays[0], delays[10], delays[18], delays[19])

	// Buckets are kept: the rule's identity did not change.
	if got := admitted(t, e, f.domain, user, 3); got != 3 {
		t.Fatalf("admitted %d of 3 under limit 29", got)
	}

	// A bad row: refused with its id and column, old rules in force.
	before := e.Set()
	for len(reloads) > 0 {
		if err := <-reloads; err != nil {
			t.Fatalf("reload of a good change: %v", err)
		}
	}
	bad := f.insert(t, "descriptor, requests_per_unit, unit, algorithm", `[{"key":"path"}]`, 1, "minute", "magic")
	err := nextReload(t, reloads)
	var ce *policy.ConfigError
	if !errors.As(err, &ce) || ce.Line != int(bad) || ce.Field != "algorithm" {
		t.Fatalf("reload with a bad row: %v, want a ConfigError for row %d column algorithm", err, bad)
	}
	if e.Set() != before || limitInForce(t, e, f.domain, user) != 29 {
		t.Fatal("a refused reload changed the rules in force")
	}
	// An UPDATE that breaks a good row is refused the same way.
	f.exec(t, "UPDATE %s SET is_active = false WHERE id = $1", bad)
	if err := nextReload(t, reloads); err != nil {
		t.Fatalf("reload after deactivating the bad row: %v", err)
	}
	f.exec(t, "UPDATE %s SET unit = 'fortnight' WHERE id = $1", id)
	if err := nextReload(t, reloads); !errors.As(err, &ce) || ce.Line != int(id) || ce.Field != "unit" {
		t.Fatalf("reload with row %d broken: %v, want a ConfigError for its unit", id, err)
	}
	if got := limitInForce(t, e, f.domain, user); got != 29 {
		t.Fatalf("limit %d after a refused reload, want 29 still", got)
	}
	f.exec(t, "UPDATE %s SET unit = 'minute', requests_per_unit = 7 WHERE id = $1", id)
	waitLimit(t, e, f.domain, user, 7)
	// Deleting a rule removes it; deleting a domain's last rule removes
	// the domain.
	other := f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"path"}]`, 1, "minute")
	waitLimit(t, e, f.domain, desc("path", "/"), 1)
	f.exec(t, "DELETE FROM %s WHERE id = $1", id)
	waitLimit(t, e, f.domain, user, 0)
	f.exec(t, "DELETE FROM %s WHERE id = $1", other)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := e.Decide(t.Context(), f.domain, []policy.Descriptor{user}, 0)
		if errors.Is(err, policy.ErrUnknownDomain) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Decide after deleting the domain's last row: %v, want ErrUnknownDomain", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWatchPolls: without a listening connection, Watch reloads every poll
// interval and keeps trying to listen.
func TestWatchPolls(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t))
	id := f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 5, "minute")
	user := desc("user", "u1")
	e := f.engine(t, f.source(t))
	src, _ := watching(t, f, e, WithPollInterval(20*time.Millisecond))
	var attempts atomic.Int64
	src.listenConn = func(context.Context) (*pgx.Conn, error) {
		attempts.Add(1)
		return nil, errors.New("LISTEN refused by the test")
	}
	startWatch(t, src, e)
	for _, want := range []int64{6, 9, 2} {
		f.exec(t, "UPDATE %s SET requests_per_unit = $1 WHERE id = $2", want, id)
		waitLimit(t, e, f.domain, user, want)
	}
	if n := attempts.Load(); n < 3 {
		t.Fatalf("%d attempts to listen over 3 polled changes, want one per poll", n)
	}
}

// TestWatchReconnects: a killed listening connection and a restarted
// server are survived; changes made meanwhile arrive.
func TestWatchReconnects(t *testing.T) {
	srv := pgtest.New(t) // removed after the fixture's cleanup
	f := newFixture(t, srv.DSN())
	id := f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 5, "minute")
	user := desc("user", "u1")
	e := f.engine(t, f.source(t))
	src, reloads := watching(t, f, e, WithPollInterval(50*time.Millisecond))
	startWatch(t, src, e)
	if err := nextReload(t, reloads); err != nil {
		t.Fatal(err)
	}
	// listener waits for a listening backend other than except (0 for
	// any) and returns its pid. A terminated backend stays in
	// pg_stat_activity until it has exited, which may come after the
	// polling watcher has already seen the next change.
	listener := func(except int32) int32 {
		t.Helper()
		var pid int32
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := f.pool.QueryRow(t.Context(), "SELECT pid FROM pg_stat_activity WHERE application_name = "+listenerName+" AND pid <> $1 LIMIT 1", except).Scan(&pid)
			if err == nil {
				return pid
			}
			if time.Now().After(deadline) {
				t.Fatalf("no listening backend but %d: %v", except, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	old := listener(0)
	f.exec(t, "SELECT pg_terminate_backend($1) FROM %s LIMIT 1", old)
	f.exec(t, "UPDATE %s SET requests_per_unit = 8 WHERE id = $1", id)
	waitLimit(t, e, f.domain, user, 8)
	listener(old) // the watcher listens again, on another connection

	// Stop like a crash, having made what the test wrote durable.
	f.exec(t, "CHECKPOINT -- %s")
	srv.Crash()
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The pool may hand out a connection the restart broke: retry.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := f.pool.Exec(t.Context(), "UPDATE "+f.rules+" SET requests_per_unit = 11 WHERE id = $1", id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("UPDATE after restart: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitLimit(t, e, f.domain, user, 11)
	listener(0)
}

// TestWatchPingsQuietConnection: a quiet poll interval costs a ping, not a
// new connection.
func TestWatchPingsQuietConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t))
	f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 5, "minute")
	e := f.engine(t, f.source(t))
	src, reloads := watching(t, f, e, WithPollInterval(10*time.Millisecond))
	var dials atomic.Int64
	src.listenConn = func(ctx context.Context) (*pgx.Conn, error) {
		dials.Add(1)
		return src.dialListener(ctx)
	}
	startWatch(t, src, e)
	if err := nextReload(t, reloads); err != nil {
		t.Fatal(err)
	}
	// Wait until the listening backend has answered 5 pings: each moves
	// its state_change.
	changes := map[time.Time]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(changes) < 5 {
		var query string
		var changed time.Time
		err := f.pool.QueryRow(t.Context(), "SELECT query, state_change FROM pg_stat_activity WHERE application_name = "+
			listenerName).Scan(&query, &changed)
		if err != nil {
			t.Fatal(err)
		}
		if query == "-- ping" {
			changes[changed] = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pings seen in 30s", len(changes))
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d listening connections over quiet poll intervals, want 1", n)
	}
}

// TestWatchKeepsBuckets: a rule whose row changes keeps its buckets: a
// raised limit and a new plan row give what is left, not a fresh burst.
func TestWatchKeepsBuckets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t))
	id := f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 3, "year")
	e := f.engine(t, f.source(t))
	src, _ := watching(t, f, e, WithPollInterval(time.Hour))
	startWatch(t, src, e)
	alice, alicePro := desc("user", "alice"), desc("user", "alice", "plan", "pro")
	if got := admitted(t, e, f.domain, alice, 5); got != 3 {
		t.Fatalf("%d of 5 admitted under 3/year", got)
	}
	f.exec(t, "UPDATE %s SET requests_per_unit = 5 WHERE id = $1", id)
	waitLimit(t, e, f.domain, alice, 5)
	if got := admitted(t, e, f.domain, alice, 5); got != 2 {
		t.Fatalf("%d of 5 admitted after raising 3/year to 5/year with 3 used, want 2", got)
	}
	f.insert(t, "descriptor, requests_per_unit, unit, plan", `[{"key":"user"}]`, 8, "year", "pro")
	waitLimit(t, e, f.domain, alicePro, 8)
	if got := admitted(t, e, f.domain, alicePro, 5); got != 3 {
		t.Fatalf("%d of 5 admitted on plan pro (8/year) with 5 used, want 3", got)
	}
}

// TestWatchReloadUnderLoadConcurrentSafe: 64 callers decide on one key
// while its row changes: no decision fails, and the admitted total is
// exactly each limit in turn (100/year, raised to 150, lowered to 120).
func TestWatchReloadUnderLoadConcurrentSafe(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t))
	id := f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 100, "year")
	e := f.engine(t, f.source(t))
	src, _ := watching(t, f, e, WithPollInterval(time.Hour))
	startWatch(t, src, e)
	alice := []policy.Descriptor{desc("user", "alice")}

	var allowed, failed atomic.Int64
	// exhausted peeks: the limit in force is want and nothing is left.
	exhausted := func(want int64) bool {
		res, err := e.Decide(context.Background(), f.domain, alice, 0)
		if err != nil {
			failed.Add(1)
			return true
		}
		d := res.Statuses[0].Decision
		return d.Limit.Count == want && d.Remaining == 0
	}
	hammer := func(done func() bool) {
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for !done() {
					res, err := e.Decide(context.Background(), f.domain, alice, 1)
					switch {
					case err != nil:
						failed.Add(1)
						return
					case res.Allowed:
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}

	hammer(func() bool { return exhausted(100) })
	if n := allowed.Load(); n != 100 {
		t.Fatalf("%d admitted under 100/year", n)
	}
	// Raise while the callers run: they see 100 until the swap, then 150.
	updated := make(chan error, 1)
	go func() {
		_, err := f.pool.Exec(t.Context(), "UPDATE "+f.rules+" SET requests_per_unit = 150 WHERE id = $1", id)
		updated <- err
	}()
	hammer(func() bool { return exhausted(150) })
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	if n := allowed.Load(); n != 150 {
		t.Fatalf("%d admitted after raising to 150/year", n)
	}
	f.exec(t, "UPDATE %s SET requests_per_unit = 120 WHERE id = $1", id)
	waitLimit(t, e, f.domain, alice[0], 120)
	deadline := time.Now().Add(100 * time.Millisecond)
	hammer(func() bool { return time.Now().After(deadline) })
	if n, errs := allowed.Load(), failed.Load(); n != 150 || errs != 0 {
		t.Fatalf("%d admitted after lowering to 120/year with 150 used, %d failed decisions; want 150 and 0", n, errs)
	}
}

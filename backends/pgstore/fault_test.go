package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// waitFor polls cond every 10ms until it holds or timeout passes. It is
// for server-side state that no clock can be injected into.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// holdLock locks key's row from another transaction until the returned
// function is called.
func holdLock(t testing.TB, pool *pgxpool.Pool, s *Store, key string) (release func()) {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = tx.QueryRow(t.Context(), "SELECT 1 FROM "+s.Table()+" WHERE namespace = 'ns' AND key = $1 FOR UPDATE", []byte(key)).Scan(&n)
	if err != nil {
		t.Fatalf("lock %q: %v", key, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Rollback(context.Background()); err != nil {
				t.Errorf("release lock: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// lockFree reports whether key's row can be locked right now.
func lockFree(t testing.TB, pool *pgxpool.Pool, s *Store, key string) bool {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a probe; nothing to keep
	var n int
	err = tx.QueryRow(t.Context(), "SELECT 1 FROM "+s.Table()+" WHERE namespace = 'ns' AND key = $1 FOR UPDATE NOWAIT", []byte(key)).Scan(&n)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == codeLockNotAvailable {
		return false
	}
	if err != nil {
		t.Fatalf("probe lock on %q: %v", key, err)
	}
	return true
}

// TestFirstUseRaceConcurrentSafe: 64 callers on four independent stores
// (separate pools, like separate gateway pods) hit a never-seen key at
// once. Exactly one row is created, exactly the burst is admitted and no
// unique violation reaches a caller.
func TestFirstUseRaceConcurrentSafe(t *testing.T) {
	first, _ := newStore(t)
	stores := []*Store{first}
	for range 3 {
		stores = append(stores, newStoreOn(t, newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 }), WithTable(first.cfg.table)))
	}
	key := randomName("first-")
	const callers, burst = 64, 10
	allowed := admitConcurrently(t, callers, 1, func(ctx context.Context, i int) (bool, error) {
		o, err := stores[i%len(stores)].Apply(ctx, take(key, burst, 1))
		return o.Allowed, err
	})
	if allowed != burst {
		t.Fatalf("%d of %d callers allowed, want exactly %d", allowed, callers, burst)
	}
	if n := rowCount(t, newPool(t, nil), first, key); n != 1 {
		t.Fatalf("%d rows for the key, want 1", n)
	}
}

// TestCompositeOppositeOrdersConcurrentSafe: two groups apply the
// composites {a, b} and {b, a}. Sorted locking means no deadlock (no error
// at all) and exact admission on both keys.
func TestCompositeOppositeOrdersConcurrentSafe(t *testing.T) {
	s, _ := newStore(t)
	other := newStoreOn(t, newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 }), WithTable(s.cfg.table))
	a, b := randomName("a-"), randomName("b-")
	const perGroup, calls, burst = 16, 10, 100
	groups := [][]ratelimit.Check{{take(a, burst, 1), take(b, burst, 1)}, {take(b, burst, 1), take(a, burst, 1)}}
	allowed := admitConcurrently(t, 2*perGroup, calls, func(ctx context.Context, i int) (bool, error) {
		out := make([]ratelimit.Outcome, 2)
		return []*Store{s, other}[i%2].ApplyAll(ctx, groups[i%2], out)
	})
	if allowed != burst {
		t.Fatalf("%d of %d composites allowed, want exactly %d", allowed, 2*perGroup*calls, burst)
	}
	if ra, rb := remaining(t, s, a, burst), remaining(t, s, b, burst); ra != 0 || rb != 0 {
		t.Fatalf("remaining a=%d b=%d, want 0 and 0", ra, rb)
	}
}

// TestTerminateBackendMidTransaction kills the backend while it holds the
// row lock between the read and the write phase. The caller gets a
// classified error, nothing is spent, the lock is gone and the pool
// serves the next call.
func TestTerminateBackendMidTransaction(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("term-")
	for range 2 {
		if _, err := s.Apply(t.Context(), take(key, 10, 1)); err != nil {
			t.Fatal(err)
		}
	}
	pids := make(chan uint32, 1)
	proceed := make(chan struct{})
	var hooked atomic.Bool
	s.afterLock = func(pid uint32) {
		if hooked.CompareAndSwap(false, true) {
			pids <- pid
			<-proceed
		}
	}
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := s.Apply(ctx, take(key, 10, 1))
		errs <- err
	}()
	pid := <-pids
	var ok bool
	if err := pool.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %t, %v", pid, ok, err)
	}
	waitFor(t, 5*time.Second, "terminated backend gone", func() bool {
		var n int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	close(proceed)
	err := <-errs
	if !errors.Is(err, ratelimit.ErrUnavailable) && !errors.Is(err, ratelimit.ErrUnknownOutcome) {
		t.Fatalf("Apply on a terminated backend = %v, want ErrUnavailable or ErrUnknownOutcome", err)
	}
	t.Logf("classified as: %v", err)
	waitFor(t, time.Second, "row lock released", func() bool { return lockFree(t, pool, s, key) })
	if got := remaining(t, s, key, 10); got != 8 {
		t.Fatalf("remaining %d after the killed transaction, want 8 (nothing spent)", got)
	}
	start := time.Now()
	o, err := s.Apply(t.Context(), take(key, 10, 1))
	if err != nil || o.Remaining != 7 {
		t.Fatalf("next Apply = %+v, %v; want allowed with 7 remaining", o, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("next Apply took %s", d)
	}
	for i := range 8 {
		if _, err := s.Apply(t.Context(), take(randomName("after-"), 1, 1)); err != nil {
			t.Fatalf("pool did not recover: call %d: %v", i, err)
		}
	}
}

// TestIdleInTransactionBackstop stalls the client between the read and the
// write phase past its deadline: the server ends the transaction on its
// own (idle_in_transaction_session_timeout) and releases the lock while
// the client is still stalled; the late write phase is refused and nothing
// is spent.
func TestIdleInTransactionBackstop(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("idle-")
	if _, err := s.Apply(t.Context(), take(key, 5, 1)); err != nil {
		t.Fatal(err)
	}
	var freedAfter time.Duration
	var hooked atomic.Bool
	s.afterLock = func(uint32) {
		if hooked.CompareAndSwap(false, true) {
			freedAfter = waitFor(t, 5*time.Second, "server released the stalled client's lock", func() bool { return lockFree(t, pool, s, key) })
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := s.Apply(ctx, take(key, 5, 1))
	if !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Apply after a stall past the deadline = %v, want ErrUnavailable", err)
	}
	t.Logf("lock released %s into the stall; error: %v", freedAfter.Round(time.Millisecond), err)
	if got := remaining(t, s, key, 5); got != 4 {
		t.Fatalf("remaining %d, want 4 (nothing spent)", got)
	}
}

// TestRowDeletedWhileWaitingIsRetried: the row a caller waits to lock is
// deleted by the lock holder (as the sweeper does with an expired row), so
// the caller's SELECT … FOR UPDATE finds nothing after its seed found the
// row. The transaction is retried, seeds a fresh row and decides on it.
func TestRowDeletedWhileWaitingIsRetried(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("gone-")
	if _, err := s.Apply(t.Context(), take(key, 5, 4)); err != nil {
		t.Fatal(err)
	}
	waiting := newPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = "pgstore-gone-test" })
	ws := newStoreOn(t, waiting, WithTable(s.cfg.table))
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	var one int
	if err := tx.QueryRow(t.Context(), "SELECT 1 FROM "+s.Table()+" WHERE key = $1 FOR UPDATE", []byte(key)).Scan(&one); err != nil {
		t.Fatal(err)
	}
	type result struct {
		o   ratelimit.Outcome
		err error
	}
	results := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		o, err := ws.Apply(ctx, take(key, 5, 1))
		results <- result{o, err}
	}()
	waitFor(t, 5*time.Second, "caller waiting on the row lock", func() bool {
		var n int
		err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgstore-gone-test' AND wait_event_type = 'Lock'").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if _, err := tx.Exec(t.Context(), "DELETE FROM "+s.Table()+" WHERE key = $1", []byte(key)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.err != nil || !r.o.Allowed || r.o.Remaining != 4 {
		t.Fatalf("Apply on a row deleted while waiting = %+v, %v; want allowed on a fresh key (4 remaining)", r.o, r.err)
	}
	if n := rowCount(t, pool, s, key); n != 1 {
		t.Fatalf("%d rows for the key, want 1", n)
	}
}

// TestLockTimeoutBeatsDeadline: a row locked elsewhere makes the server
// give up (lock_timeout, 55P03) before the caller's deadline, which is
// reported as ErrUnavailable: the transaction rolled back.
func TestLockTimeoutBeatsDeadline(t *testing.T) {
	// Margins wide enough for a loaded test machine, where a scheduling
	// delay of tens of milliseconds is common.
	s, pool := newStore(t, WithTimeoutMargins(300*time.Millisecond, 200*time.Millisecond))
	key := randomName("lock-")
	if _, err := s.Apply(t.Context(), take(key, 5, 1)); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, pool, s, key)
	const deadline = time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	_, err := s.Apply(ctx, take(key, 5, 1))
	elapsed := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.As(err, &pgErr) || pgErr.Code != codeLockNotAvailable {
		t.Fatalf("Apply on a locked row = %v, want ErrUnavailable from the server's lock_timeout (55P03)", err)
	}
	if elapsed >= deadline {
		t.Fatalf("Apply returned after %s, not before the %s deadline", elapsed, deadline)
	}
	release()
	if got := remaining(t, s, key, 5); got != 4 {
		t.Fatalf("remaining %d, want 4", got)
	}
}

// TestMaxLockWaitCapsHotKeyQueue: with WithMaxLockWait, a caller behind a
// locked row gives up after the cap, long before its deadline.
func TestMaxLockWaitCapsHotKeyQueue(t *testing.T) {
	s, pool := newStore(t, WithMaxLockWait(50*time.Millisecond))
	key := randomName("capped-")
	if _, err := s.Apply(t.Context(), take(key, 5, 1)); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, pool, s, key)
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.Apply(ctx, take(key, 5, 1))
	elapsed := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.As(err, &pgErr) || pgErr.Code != codeLockNotAvailable {
		t.Fatalf("Apply behind a lock with a 50ms cap = %v, want ErrUnavailable from lock_timeout", err)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("Apply gave up after %s, want about 50ms (deadline 10s)", elapsed)
	}
}

// TestNetworkCutDuringLockWait partitions the client from the server while
// its transaction waits for a row lock (the case where a statement can be
// applied after the client gave up). The client reports ErrUnavailable at
// its deadline, the server's own timeouts end the orphaned session before
// the lock holder lets go, and the state is unchanged afterwards.
func TestNetworkCutDuringLockWait(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("cut-")
	if _, err := s.Apply(t.Context(), take(key, 5, 1)); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config()
	proxy := startProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	proxied := newPool(t, func(c *pgxpool.Config) {
		host, port, _ := net.SplitHostPort(proxy.Addr())
		p, _ := strconv.Atoi(port)
		c.ConnConfig.Host, c.ConnConfig.Port = host, uint16(p)
		c.ConnConfig.RuntimeParams["application_name"] = "pgstore-cut-test"
		c.MaxConns = 2
	})
	ps := newStoreOn(t, proxied, WithTable(s.cfg.table))
	release := holdLock(t, pool, s, key)

	const deadline = 1500 * time.Millisecond
	type result struct {
		err     error
		elapsed time.Duration
	}
	results := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		start := time.Now()
		_, err := ps.Apply(ctx, take(key, 5, 1))
		results <- result{err, time.Since(start)}
	}()
	var waiter int32
	waitFor(t, 5*time.Second, "proxied client waiting on the lock", func() bool {
		err := pool.QueryRow(t.Context(), "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgstore-cut-test' AND wait_event_type = 'Lock'").Scan(&waiter)
		if errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
	proxy.Cut()
	r := <-results
	if !errors.Is(r.err, ratelimit.ErrUnavailable) {
		t.Fatalf("Apply cut off during a lock wait = %v, want ErrUnavailable", r.err)
	}
	if r.elapsed > deadline+500*time.Millisecond {
		t.Fatalf("Apply returned %s after its %s deadline", r.elapsed-deadline, deadline)
	}
	// The server gave up the lock wait on its own (lock_timeout) and
	// aborted the transaction, which releases everything it held; the
	// session itself lingers until the server notices the dead peer.
	var state string
	aborted := waitFor(t, 5*time.Second, "orphaned transaction aborted by the server", func() bool {
		err := pool.QueryRow(t.Context(), "SELECT state FROM pg_stat_activity WHERE pid = $1", waiter).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		return state == "idle in transaction (aborted)"
	})
	t.Logf("client: %v after %s; orphaned transaction aborted %s later (session state %q)",
		r.err, r.elapsed.Round(time.Millisecond), aborted.Round(time.Millisecond), state)
	release() // the lock holder lets go only now
	if got := remaining(t, s, key, 5); got != 4 {
		t.Fatalf("remaining %d after the cut, want 4 (server state unchanged)", got)
	}
	// Close the proxy before the pool: pgx's best-effort cancel request for
	// the timed-out connection is stuck in the partition until then.
	proxy.close()
}

// TestPoolExhaustionFailsFast: four connections, a row locked for longer
// than every deadline, 64 callers with 50ms deadlines. Every call fails
// with ErrUnavailable close to its deadline (never an unknown outcome),
// and the store serves calls again once the holder lets go.
func TestPoolExhaustionFailsFast(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	pool := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	s := newStoreOn(t, pool, WithTable(randomName("t_")))
	admin := newPool(t, nil)
	key := randomName("hot-")
	if _, err := s.Apply(t.Context(), take(key, 1000, 1)); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, admin, s, key)
	const callers, deadline, slack = 64, 50 * time.Millisecond, 500 * time.Millisecond
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	var hotFailures atomic.Int64
	for i := range callers {
		wg.Go(func() {
			k := key
			if i%2 == 1 {
				k = randomName("cold-")
			}
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			_, err := s.Apply(ctx, take(k, 1000, 1))
			elapsed := time.Since(start)
			if k == key && err != nil {
				hotFailures.Add(1)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && !errors.Is(err, ratelimit.ErrUnavailable):
				problems = append(problems, fmt.Sprintf("caller %d: %v, want ErrUnavailable", i, err))
			case elapsed > deadline+slack:
				problems = append(problems, fmt.Sprintf("caller %d returned after %s", i, elapsed))
			case k == key && err == nil:
				problems = append(problems, fmt.Sprintf("caller %d passed a row locked elsewhere", i))
			}
		})
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if hotFailures.Load() != callers/2 {
		t.Errorf("%d hot-key calls failed, want %d", hotFailures.Load(), callers/2)
	}
	release()
	for i := range 20 {
		if _, err := s.Apply(t.Context(), take(key, 1000, 1)); err != nil {
			t.Fatalf("after the holder let go, call %d: %v", i, err)
		}
	}
	if got := remaining(t, s, key, 1000); got != 1000-21 {
		t.Fatalf("remaining %d, want %d: a failed call spent", got, 1000-21)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	admin.Close()
	goleak.VerifyNone(t, leaks)
}

// insertExpired adds n expired rows in namespace "sweep".
func insertExpired(t testing.TB, pool *pgxpool.Pool, s *Store, n int) {
	t.Helper()
	_, err := pool.Exec(t.Context(), "INSERT INTO "+s.Table()+" (namespace, key, algorithm, state, expires_at) "+
		"SELECT 'sweep', convert_to($1 || g, 'UTF8'), 'test-window', '\\x01', clock_timestamp() - interval '1 second' "+
		"FROM generate_series(1, $2::int) g", randomName("x-"), n)
	if err != nil {
		t.Fatal(err)
	}
}

func expiredRows(t testing.TB, pool *pgxpool.Pool, s *Store) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+s.Table()+" WHERE expires_at <= clock_timestamp()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSweeperBesideHotTrafficConcurrentSafe sweeps 1000 expired rows in
// batches of 100 while 8 goroutines hammer two hot keys. Admission stays
// exact, no call fails, the sweeper deletes exactly the expired rows and
// none is left after the sweeps.
func TestSweeperBesideHotTrafficConcurrentSafe(t *testing.T) {
	s, pool := newStore(t, WithSweepBatch(100))
	const expired = 1000
	insertExpired(t, pool, s, expired)
	hot := []string{randomName("hot1-"), randomName("hot2-")}
	const workers, calls, burst = 8, 40, 100
	var allowed, failed atomic.Int64
	var firstErr atomic.Value
	var maxLatency atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				start := time.Now()
				o, err := s.Apply(t.Context(), take(hot[(w+i)%2], burst, 1))
				if d := int64(time.Since(start)); d > maxLatency.Load() {
					maxLatency.Store(d) // approximate maximum, for the log
				}
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case o.Allowed:
					allowed.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	swept, sweeps := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		n, err := s.Sweep(t.Context())
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		swept += n
		sweeps++
	}
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed beside the sweeper, first: %v", failed.Load(), firstErr.Load())
	}
	if allowed.Load() != 2*burst {
		t.Fatalf("%d calls allowed, want exactly %d", allowed.Load(), 2*burst)
	}
	if swept != expired {
		t.Fatalf("sweeps deleted %d rows, want exactly the %d expired ones", swept, expired)
	}
	if n := expiredRows(t, pool, s); n != 0 {
		t.Fatalf("%d expired rows left", n)
	}
	for _, k := range hot {
		if got := remaining(t, s, k, burst); got != 0 {
			t.Fatalf("hot key %s: remaining %d, want 0 (its row must survive the sweeps)", k, got)
		}
	}
	t.Logf("%d sweeps; max decision latency %s", sweeps, time.Duration(maxLatency.Load()).Round(time.Microsecond))
}

// TestBackgroundSweeper: WithSweeper removes expired rows on its own and
// Close stops its goroutine.
func TestBackgroundSweeper(t *testing.T) {
	pool := newPool(t, nil)
	table := randomName("t_")
	newStoreOn(t, pool, WithTable(table)) // the table exists before the sweeper starts
	var mu sync.Mutex
	var sweepErrs []error
	s, err := New(pool, WithTable(table), WithSweeper(20*time.Millisecond), WithSweepBatch(50),
		WithSweepErrorHandler(func(err error) {
			mu.Lock()
			defer mu.Unlock()
			sweepErrs = append(sweepErrs, err)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	insertExpired(t, pool, s, 300)
	waitFor(t, 10*time.Second, "background sweeper emptied the expired rows", func() bool { return expiredRows(t, pool, s) == 0 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.sweepDone:
	default:
		t.Fatal("Close returned with the sweeper goroutine still running")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range sweepErrs {
		t.Errorf("sweep error: %v", err)
	}
}

// recordingAlg is windowAlg that records the last "now" it was given.
type recordingAlg struct {
	windowAlg
	now *atomic.Int64
}

func (a recordingAlg) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	a.now.Store(now)
	return a.windowAlg.Decide(state, now, l, cost, dst)
}

// TestClockReadAfterLock: a caller that waited for a row lock decides with
// the server's time after it got the lock, not the time it started.
func TestClockReadAfterLock(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("clock-")
	var seen atomic.Int64
	c := take(key, 5, 1)
	c.Algorithm = recordingAlg{now: &seen}
	if _, err := s.Apply(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	var one int
	if err := tx.QueryRow(t.Context(), "SELECT 1 FROM "+s.Table()+" WHERE key = $1 FOR UPDATE", []byte(key)).Scan(&one); err != nil {
		t.Fatal(err)
	}
	var started time.Time
	if err := pool.QueryRow(t.Context(), "SELECT clock_timestamp()").Scan(&started); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() {
		_, err := s.Apply(t.Context(), c)
		errs <- err
	}()
	waitFor(t, 5*time.Second, "caller queued on the row lock", func() bool {
		var n int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	var released time.Time
	if err := tx.QueryRow(t.Context(), "SELECT clock_timestamp()").Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if now := time.Unix(0, seen.Load()); now.Before(released) {
		t.Fatalf("decided at %s, before the lock was released at %s (caller started by %s)",
			now.Format(time.StampMicro), released.Format(time.StampMicro), started.Format(time.StampMicro))
	}
}

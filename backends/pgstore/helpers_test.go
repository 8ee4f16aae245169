package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// windowAlg is a fixed-window counter used by these tests until the
// algorithm catalog is available: Burst units per window of Period. Its
// state is the window start and the units used, 16 bytes big-endian. It
// follows the Algorithm contract (peek, cost > burst, clock going back,
// TTL) in the simplest way.
type windowAlg struct{ name string }

func (a windowAlg) Name() string {
	if a.name == "" {
		return "test-window"
	}
	return a.name
}

func (windowAlg) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	start, used := int64(0), int64(0)
	switch len(state) {
	case 0:
	case 16:
		start, used = int64(binary.BigEndian.Uint64(state)), int64(binary.BigEndian.Uint64(state[8:]))
	default:
		return ratelimit.Outcome{}, dst[:0], fmt.Errorf("%w: test-window state of %d bytes", ratelimit.ErrCorruptState, len(state))
	}
	if w := now - now%int64(l.Period); w > start || len(state) == 0 {
		start, used = max(w, start), 0
	}
	now = max(now, start)
	left := time.Duration(start + int64(l.Period) - now)
	o := ratelimit.Outcome{Remaining: l.Burst - used, ResetAfter: left, TTL: left}
	dst = append(dst[:0], state...)
	keep := dst
	if used == 0 {
		o.ResetAfter, o.TTL = 0, 0
	}
	switch {
	case cost > l.Burst:
		o.RetryAfter = ratelimit.Never
		return o, keep, nil
	case cost == 0:
		o.Allowed = used < l.Burst
		if !o.Allowed {
			o.RetryAfter = left
		}
		return o, keep, nil
	case used+cost > l.Burst:
		o.RetryAfter = left
		return o, keep, nil
	}
	used += cost
	out := binary.BigEndian.AppendUint64(dst[:0], uint64(start))
	out = binary.BigEndian.AppendUint64(out, uint64(used))
	return ratelimit.Outcome{Allowed: true, Changed: true, Remaining: l.Burst - used, ResetAfter: left, TTL: left}, out, nil
}

// hourly is a limit of burst units per hour: no refill while a test runs.
func hourly(burst int64) ratelimit.Limit {
	return ratelimit.Limit{Count: burst, Period: time.Hour, Burst: burst}
}

// randomName returns prefix followed by 12 random hex digits.
func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
}

// newPool returns a pool on the test server, closed when t ends.
func newPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newStore returns a migrated Store on its own random table and its own
// pool, closed when t ends.
func newStore(t testing.TB, opts ...Option) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool := newPool(t, nil)
	return newStoreOn(t, pool, append([]Option{WithTable(randomName("t_"))}, opts...)...), pool
}

// newStoreOn returns a migrated Store on pool, closed when t ends.
func newStoreOn(t testing.TB, pool Pool, opts ...Option) *Store {
	t.Helper()
	s, err := New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// take is a Check taking cost units of key under a no-refill limit.
func take(key string, burst, cost int64) ratelimit.Check {
	return ratelimit.Check{Namespace: "ns", Key: key, Algorithm: windowAlg{}, Limit: hourly(burst), Cost: cost}
}

// rowCount returns how many rows of s's table hold key (any namespace).
func rowCount(t testing.TB, pool *pgxpool.Pool, s *Store, key string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+s.Table()+" WHERE key = $1", []byte(key)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// remaining peeks key and returns its Remaining.
func remaining(t testing.TB, s *Store, key string, burst int64) int64 {
	t.Helper()
	o, err := s.Apply(t.Context(), take(key, burst, 0))
	if err != nil {
		t.Fatalf("peek %q: %v", key, err)
	}
	return o.Remaining
}

// admitConcurrently starts callers goroutines at once, each making calls
// calls of apply (given its caller number and a context with a 20 s
// deadline), and returns how many calls were allowed. Any error fails t,
// with the count and the first error.
func admitConcurrently(t testing.TB, callers, calls int, apply func(ctx context.Context, caller int) (bool, error)) int64 {
	t.Helper()
	var allowed, failed atomic.Int64
	var firstErr atomic.Value
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			for range calls {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				ok, err := apply(ctx, i)
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case ok:
					allowed.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d calls failed, first: %v", failed.Load(), callers*calls, firstErr.Load())
	}
	return allowed.Load()
}

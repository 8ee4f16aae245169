package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Pool is the part of a *pgxpool.Pool the store uses: it borrows one
// connection per call and returns it with Release. Any wrapper around a
// pool (instrumentation, routing) that keeps this method fits.
//
// The pool's owner closes it, after closing the Store.
type Pool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

var _ Pool = (*pgxpool.Pool)(nil)

// maxAttempts bounds how often one call runs its transaction when the
// server rolled it back for a reason that is safe to retry (serialization
// failure, deadlock, a row swept between seeding and locking).
const maxAttempts = 3

// beginSQL starts every transaction of the store at READ COMMITTED, which
// the seeding in the read phase relies on, whatever the database's
// default_transaction_isolation.
const beginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// seedGrace is how long a freshly seeded, still empty row is protected from
// the sweeper, so that the caller that seeded it can lock it.
const seedGrace = "1 minute"

// errVanished reports a seeded row that was swept before it was locked; the
// transaction is retried.
var errVanished = errors.New("row deleted between seeding and locking")

// Store is a ratelimit.Store that keeps one row of state per
// (namespace, key) in a PostgreSQL table and applies every check in one
// transaction that locks the rows it reads, so decisions are exact across
// any number of processes sharing the database. The package
// documentation states its error classes; docs/postgres.md derives the
// transaction, its round trips and timeouts.
//
// A Store is safe for concurrent use. Create one with New, create its table
// with Migrate (or the SQL of SchemaSQL), and Close it before closing the
// pool.
type Store struct {
	pool  Pool
	cfg   config
	table string // quoted, possibly schema-qualified
	q     queries
	stmts statements // the decision path, prepared once per connection
	queue *keyQueue  // at most txnsPerKey transactions per key at the server

	closed    atomic.Bool
	closeOnce sync.Once
	stopSweep context.CancelFunc
	sweepDone chan struct{}

	// afterLock, when set (tests only), runs after the rows are locked and
	// before the write phase, with the backend's process id.
	afterLock func(pid uint32)
	// testClock, when set (tests only), replaces the server's clock for
	// decisions, so that the conformance suite can check outcomes and TTLs
	// at fixed instants. It is read at the same point: after the locks.
	testClock ratelimit.Clock
}

type queries struct {
	setTimeouts, seed, lock, lockWithTimeouts, update, reset, sweep string
}

// New returns a Store on pool. It validates the options and prepares the
// SQL, but does not touch the database: call Migrate (or run SchemaSQL
// yourself) before the first decision. Errors wrap
// ratelimit.ErrInvalidOption.
func New(pool Pool, opts ...Option) (*Store, error) {
	if p, ok := pool.(*pgxpool.Pool); pool == nil || ok && p == nil {
		return nil, fmt.Errorf("%w: pgstore: nil pool", ratelimit.ErrInvalidOption)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: pgstore: nil option", ratelimit.ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ident := pgx.Identifier{cfg.table}
	if cfg.schema != "" {
		ident = pgx.Identifier{cfg.schema, cfg.table}
	}
	t := ident.Sanitize()
	s := &Store{pool: pool, cfg: cfg, table: t, queue: newKeyQueue()}
	s.q = queries{
		setTimeouts: "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true), " +
			"set_config('idle_in_transaction_session_timeout', $3, true)",
		// The seed inserts only when the statement's snapshot has no row:
		// ON CONFLICT alone would also wait for any transaction that has
		// updated an existing row, until it commits, and then wake every
		// such waiter at once.
		seed: "INSERT INTO " + t + " (namespace, key, algorithm, state, expires_at) " +
			"SELECT $1, $2, $3, '', clock_timestamp() + interval '" + seedGrace + "' " +
			"WHERE NOT EXISTS (SELECT FROM " + t + " WHERE namespace = $1 AND key = $2) " +
			"ON CONFLICT (namespace, key) DO NOTHING",
		// The clock is read by the outer query, once the subquery's
		// LockRows has returned the locked row (a subquery with FOR
		// UPDATE is never flattened into its parent).
		lock: "SELECT algorithm, state, expires_at, clock_timestamp() FROM (SELECT algorithm, state, expires_at FROM " + t +
			" WHERE namespace = $1 AND key = $2 FOR UPDATE) locked",
		// lockWithTimeouts is lock that first sets the timeouts, saving
		// their statement: the LATERAL reference makes the server run
		// set_config before it scans and locks, so lock_timeout bounds
		// the wait. statement_timeout applies from the next statement on.
		lockWithTimeouts: "SELECT algorithm, state, expires_at, clock_timestamp() FROM " +
			"(SELECT set_config('lock_timeout', $3, true) AS lt, set_config('statement_timeout', $4, true) AS st, " +
			"set_config('idle_in_transaction_session_timeout', $5, true) AS it) timeouts, " +
			"LATERAL (SELECT algorithm, state, expires_at FROM " + t +
			" WHERE namespace = $1 AND key = $2 AND timeouts.lt IS NOT NULL FOR UPDATE) locked",
		update: "UPDATE " + t + " SET algorithm = $3, state = $4, expires_at = $5 WHERE namespace = $1 AND key = $2",
		reset:  "DELETE FROM " + t + " WHERE namespace = $1 AND key = $2",
		sweep: "DELETE FROM " + t + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + t +
			" WHERE expires_at <= clock_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED))" +
			" AND expires_at <= clock_timestamp()",
	}
	s.stmts = newStatements(s.q)
	if cfg.sweepInterval > 0 {
		s.startSweeper()
	}
	return s, nil
}

// Table returns the quoted, possibly schema-qualified name of the table the
// store uses, for example "sluice_ratelimit" (with the double quotes).
func (s *Store) Table() string { return s.table }

// keyState is one distinct (namespace, key) of a call.
type keyState struct {
	ns, key []byte
	alg     string // algorithm of the first check on the key, for the seed row

	rowAlg   []byte // algorithm column as read under the lock
	rowState []byte // state column as read under the lock
	expires  int64  // expires_at column as read under the lock, Unix ns
	found    bool   // the lock statement returned the row

	curAlg string // algorithm of the working state (meaningful when it is not empty)
}

// Apply applies c in one transaction. See ratelimit.Store and the package
// documentation for the error classes.
func (s *Store) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	var out [1]ratelimit.Outcome
	if _, err := s.applyAll(ctx, []ratelimit.Check{c}, out[:], false); err != nil {
		return ratelimit.Outcome{}, err
	}
	return out[0], nil
}

// ApplyAll applies checks in one transaction, all or nothing, locking their
// rows in sorted (namespace, key) order so that concurrent composites never
// deadlock. See ratelimit.Store.
func (s *Store) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	return s.applyAll(ctx, checks, out, true)
}

func (s *Store) applyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome, many bool) (bool, error) {
	if s.closed.Load() {
		return false, fmt.Errorf("pgstore: %w", ratelimit.ErrClosed)
	}
	if len(out) < len(checks) {
		return false, fmt.Errorf("%w: pgstore: %d outcomes for %d checks", ratelimit.ErrInvalidOption, len(out), len(checks))
	}
	if len(checks) == 0 {
		return true, nil
	}
	for i := range checks {
		if err := validate(&checks[i]); err != nil {
			if many {
				return false, fmt.Errorf("pgstore: check %d: %w", i, err)
			}
			return false, fmt.Errorf("pgstore: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("pgstore: %w: %w", ratelimit.ErrUnavailable, err)
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()

	keys, idx := plan(checks)
	giveUp := s.giveUpAt(ctx)
	var lockWaitEnd time.Time
	if s.cfg.maxLockWait > 0 {
		// The cap covers the wait in the key queue and on the row locks.
		lockWaitEnd = time.Now().Add(s.cfg.maxLockWait)
		if lockWaitEnd.Before(giveUp) {
			giveUp = lockWaitEnd
		}
	}
	var slotBuf [4]uint16
	slots := s.queue.slotsOf(keys, slotBuf[:0])
	if err := s.queue.enter(ctx, slots, giveUp); err != nil {
		return false, err
	}
	defer s.queue.leave(slots)

	work := make([]ratelimit.KeyState, len(keys))
	for attempt := 1; ; attempt++ {
		allowed, err := s.attempt(ctx, checks, out, keys, work, idx, lockWaitEnd)
		if err == nil || attempt == maxAttempts || !retryable(err) || ctx.Err() != nil {
			return allowed, err
		}
	}
}

func validate(c *ratelimit.Check) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if name := c.Algorithm.Name(); name == "" || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: algorithm name %q is not valid UTF-8 text without NUL", ratelimit.ErrInvalidRule, name)
	}
	return nil
}

// plan returns the distinct keys of checks in sorted order and, for each
// check, the index of its key.
func plan(checks []ratelimit.Check) ([]keyState, []int) {
	type ref struct {
		ns, key string
		i       int
	}
	keys := make([]keyState, 0, len(checks))
	if len(checks) == 1 { // one key: nothing to sort
		c := &checks[0]
		return append(keys, keyState{ns: []byte(c.Namespace), key: []byte(c.Key), alg: c.Algorithm.Name()}), []int{0}
	}
	refs := make([]ref, len(checks))
	for i := range checks {
		refs[i] = ref{checks[i].Namespace, checks[i].Key, i}
	}
	slices.SortStableFunc(refs, func(a, b ref) int {
		return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.key, b.key))
	})
	idx := make([]int, len(checks))
	for j, r := range refs {
		if j == 0 || r.ns != refs[j-1].ns || r.key != refs[j-1].key {
			keys = append(keys, keyState{
				ns:  []byte(r.ns),
				key: []byte(r.key),
				alg: checks[r.i].Algorithm.Name(),
			})
		}
		idx[r.i] = len(keys) - 1
	}
	return keys, idx
}

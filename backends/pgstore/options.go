package pgstore

import (
	"fmt"
	"regexp"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Defaults used by New when no option overrides them.
const (
	// DefaultTable is the table that holds limiter state.
	DefaultTable = "sluice_ratelimit"
	// DefaultTimeout bounds a call whose context has no deadline.
	DefaultTimeout = 2 * time.Second
	// DefaultLockMargin is how much shorter than the time left before the
	// caller's deadline the server-side lock_timeout is.
	DefaultLockMargin = 10 * time.Millisecond
	// DefaultStatementMargin is how much shorter than the time left before
	// the caller's deadline the server-side statement_timeout is.
	DefaultStatementMargin = 5 * time.Millisecond
	// DefaultSweepBatch is how many expired rows one sweep statement
	// deletes at most.
	DefaultSweepBatch = 1000
)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names are truncated by
// the server, so they are refused instead.
const maxIdentLen = 63

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

type config struct {
	schema          string
	table           string
	unlogged        bool
	defaultTimeout  time.Duration
	lockMargin      time.Duration
	statementMargin time.Duration
	maxLockWait     time.Duration
	sweepBatch      int
	sweepInterval   time.Duration
	sweepErr        func(error)
}

func defaultConfig() config {
	return config{
		table:           DefaultTable,
		defaultTimeout:  DefaultTimeout,
		lockMargin:      DefaultLockMargin,
		statementMargin: DefaultStatementMargin,
		sweepBatch:      DefaultSweepBatch,
	}
}

func (c *config) validate() error {
	if c.schema != "" {
		if err := validIdent("schema", c.schema); err != nil {
			return err
		}
	}
	if err := validIdent("table", c.table); err != nil {
		return err
	}
	if c.statementMargin <= 0 || c.lockMargin < c.statementMargin {
		return fmt.Errorf("%w: pgstore: timeout margins lock=%s statement=%s: need 0 < statement <= lock",
			ratelimit.ErrInvalidOption, c.lockMargin, c.statementMargin)
	}
	if c.defaultTimeout <= c.lockMargin+time.Millisecond {
		return fmt.Errorf("%w: pgstore: default timeout %s must exceed the lock margin %s by more than 1ms",
			ratelimit.ErrInvalidOption, c.defaultTimeout, c.lockMargin)
	}
	if c.maxLockWait != 0 && c.maxLockWait < time.Millisecond {
		return fmt.Errorf("%w: pgstore: max lock wait %s: want 0 (none) or at least 1ms", ratelimit.ErrInvalidOption, c.maxLockWait)
	}
	if c.sweepBatch < 1 {
		return fmt.Errorf("%w: pgstore: sweep batch %d < 1", ratelimit.ErrInvalidOption, c.sweepBatch)
	}
	if c.sweepInterval < 0 {
		return fmt.Errorf("%w: pgstore: negative sweep interval %s", ratelimit.ErrInvalidOption, c.sweepInterval)
	}
	return nil
}

// margins returns the lock and statement margins for a call with left
// before its deadline: the configured ones, or half and a quarter of left
// when those are smaller, so that a short budget (sluice's 5 ms default
// for a Limiter's rule) still reaches the server. Shrunk margins may not
// cover a slow network's round trip, so the client's deadline may end a
// wait before the server's error arrives. That costs the connection, not
// a late write: a read phase sends no COMMIT, and a write phase whose
// reply the deadline cuts off is reported as ErrUnknownOutcome, as before.
// The lock margin is never below the statement margin, as validate
// requires of the configured ones.
func (c *config) margins(left time.Duration) (lock, statement time.Duration) {
	return min(c.lockMargin, left/2), min(c.statementMargin, left/4)
}

func validIdent(what, name string) error {
	if len(name) > maxIdentLen || !identRE.MatchString(name) {
		return fmt.Errorf("%w: pgstore: %s name %q: want 1..%d of [A-Za-z0-9_], not starting with a digit",
			ratelimit.ErrInvalidOption, what, name, maxIdentLen)
	}
	return nil
}

// Option configures a Store. Options are applied in order by New, which
// validates the result; a nil Option is refused with
// ratelimit.ErrInvalidOption.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithSchema places the table in schema name instead of the first schema
// of the connection's search_path. The name must match
// [A-Za-z_][A-Za-z0-9_]* and be at most 63 bytes; it is quoted, so it is
// case-sensitive. Migrate creates the schema if it does not exist.
func WithSchema(name string) Option {
	return optionFunc(func(c *config) { c.schema = name })
}

// WithTable sets the table name (default DefaultTable). The same rules as
// for WithSchema apply.
func WithTable(name string) Option {
	return optionFunc(func(c *config) { c.table = name })
}

// WithUnlogged makes Migrate create the table UNLOGGED: no write-ahead log,
// so writes are cheaper, but PostgreSQL empties the table after a crash or
// an immediate shutdown and does not replicate it to standbys. After such
// an event every key starts fully available again (one free burst per
// key). Migrate refuses to run against an existing table whose persistence
// differs.
func WithUnlogged() Option {
	return optionFunc(func(c *config) { c.unlogged = true })
}

// WithDefaultTimeout bounds calls whose context has no deadline (default
// DefaultTimeout). The server-side timeouts are derived from a deadline, so
// the store never runs a call without one.
func WithDefaultTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.defaultTimeout = d })
}

// WithTimeoutMargins sets how much earlier than the caller's deadline the
// server gives up: lock_timeout is the time left minus lock, and
// statement_timeout the time left minus statement. It needs
// 0 < statement <= lock. The margins must cover one network round trip,
// so that the server's error reaches the caller before its deadline
// (defaults DefaultLockMargin and DefaultStatementMargin, sized for a LAN).
// A call with less than twice lock left uses half and a quarter of the
// time left instead, so that short budgets still reach the server.
func WithTimeoutMargins(lock, statement time.Duration) Option {
	return optionFunc(func(c *config) {
		c.lockMargin = lock
		c.statementMargin = statement
	})
}

// WithMaxLockWait caps how long a call waits behind other calls on its
// keys at d whatever the deadline: in the Store's key queue (at most two
// transactions per key go to the server at a time), and then on the row
// locks, whose lock_timeout gets what the queue left of d (PostgreSQL
// times each lock wait on its own). Callers queueing behind a hot key then
// give up after about d with ratelimit.ErrUnavailable (and the rule's
// failure policy answers) instead of waiting until their deadline. 0, the
// default, means no cap beyond the deadline; otherwise d must be at least
// 1ms.
func WithMaxLockWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxLockWait = d })
}

// WithSweepBatch sets how many expired rows one sweep statement deletes at
// most (default DefaultSweepBatch). A decision on an expired key waits for
// at most one such statement.
func WithSweepBatch(n int) Option {
	return optionFunc(func(c *config) { c.sweepBatch = n })
}

// WithSweeper starts a background goroutine that calls Sweep every
// interval until Close; 0 (the default) starts none. Each background
// sweep is bounded by the default timeout (WithDefaultTimeout); ticks that
// pass during a sweep are skipped. Close stops the goroutine and waits for
// it.
func WithSweeper(interval time.Duration) Option {
	return optionFunc(func(c *config) { c.sweepInterval = interval })
}

// WithSweepErrorHandler sets a function the background sweeper calls with
// every error it meets (by default errors are dropped and the next sweep
// tries again). It is called from the sweeper goroutine and must not
// block for long.
func WithSweepErrorHandler(f func(error)) Option {
	return optionFunc(func(c *config) { c.sweepErr = f })
}

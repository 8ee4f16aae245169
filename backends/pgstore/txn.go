package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// withDeadline gives ctx the store's default deadline when it has none:
// every server-side timeout is derived from a deadline.
func (s *Store) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.defaultTimeout)
}

// serverTimeouts holds the values of lock_timeout, statement_timeout and
// idle_in_transaction_session_timeout for one transaction, in PostgreSQL's
// unit syntax.
type serverTimeouts struct {
	lock, statement, idle string
}

// timeoutLimits are the server-side timeouts of one transaction before
// formatting, in whole milliseconds.
type timeoutLimits struct {
	lock, statement, idle int64
}

// timeouts derives the server-side timeouts from the time left before the
// deadline of ctx: lock and statement timeouts end their margins (see
// config.margins) before it, in whole milliseconds rounded down and never
// 0 (which would disable them). When less than 2ms is left it refuses,
// since the server could no longer be trusted to give up first.
func (s *Store) timeouts(ctx context.Context) (serverTimeouts, error) {
	deadline, _ := ctx.Deadline()
	return s.timeoutsFor(time.Until(deadline))
}

// timeoutsFor is timeouts with left, the time to the deadline, given.
func (s *Store) timeoutsFor(left time.Duration) (serverTimeouts, error) {
	l, err := s.timeoutLimitsFor(left)
	if err != nil {
		return serverTimeouts{}, err
	}
	return serverTimeouts{lock: millis(l.lock), statement: millis(l.statement), idle: millis(l.idle)}, nil
}

// timeoutLimits is timeouts before formatting: the decision path appends
// the values to a buffer of its own instead of allocating strings.
func (s *Store) timeoutLimits(ctx context.Context) (timeoutLimits, error) {
	deadline, _ := ctx.Deadline()
	return s.timeoutLimitsFor(time.Until(deadline))
}

func (s *Store) timeoutLimitsFor(left time.Duration) (timeoutLimits, error) {
	lockMargin, statementMargin := s.cfg.margins(left)
	lock := left - lockMargin
	if left <= 0 {
		return timeoutLimits{}, fmt.Errorf("pgstore: %w: %w", ratelimit.ErrUnavailable, context.DeadlineExceeded)
	}
	if lock < time.Millisecond {
		return timeoutLimits{}, fmt.Errorf("pgstore: %w: %s left before the deadline, less than the lock margin %s plus 1ms",
			ratelimit.ErrUnavailable, left.Round(time.Microsecond), lockMargin)
	}
	if s.cfg.maxLockWait > 0 {
		lock = min(lock, s.cfg.maxLockWait)
	}
	return timeoutLimits{
		lock:      wholeMillis(lock),
		statement: wholeMillis(left - statementMargin),
		// The backstop: a transaction whose client vanished between the
		// read and the write phase releases its locks when the caller's
		// deadline passes.
		idle: wholeMillis(left + time.Millisecond - 1),
	}, nil
}

// wholeMillis is d in whole milliseconds, rounded down and at least 1.
func wholeMillis(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }

func millis(ms int64) string { return string(appendMillis(nil, ms)) }

// appendMillis appends ms in PostgreSQL's unit syntax ("250ms").
func appendMillis(dst []byte, ms int64) []byte {
	return append(strconv.AppendInt(dst, ms, 10), "ms"...)
}

// timeoutParams holds the formatted timeouts of one transaction as
// statement parameters, in storage that lives with the call.
type timeoutParams struct {
	buf                   [3 * 24]byte
	lock, statement, idle []byte
}

func (p *timeoutParams) set(l timeoutLimits) {
	b := appendMillis(p.buf[:0], l.lock)
	p.lock = b[:len(b):len(b)]
	b = appendMillis(b[len(b):], l.statement)
	p.statement = b[:len(b):len(b)]
	p.idle = appendMillis(b[len(b):], l.idle)
}

// giveUpAt is when a call stops waiting for a connection or for the calls
// ahead of it on its keys: early enough to leave the transaction its lock
// margin.
func (s *Store) giveUpAt(ctx context.Context) time.Time {
	deadline, _ := ctx.Deadline()
	lockMargin, _ := s.cfg.margins(time.Until(deadline))
	return deadline.Add(-lockMargin - time.Millisecond)
}

// acquire borrows a connection, giving up in time (giveUpAt).
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	actx, cancel := context.WithDeadline(ctx, s.giveUpAt(ctx))
	defer cancel()
	conn, err := s.pool.Acquire(actx)
	if err != nil {
		if e := ctx.Err(); e != nil && !errors.Is(err, e) {
			err = fmt.Errorf("%w (%w)", err, e)
		}
		return nil, fmt.Errorf("pgstore: acquire connection: %w: %w", ratelimit.ErrUnavailable, err)
	}
	return conn, nil
}

// release returns conn to the pool, rolling back an open transaction first
// when the caller's context still allows it. When it does not, or the
// rollback fails, the pool destroys the connection (it never reuses one
// whose transaction status is not idle) and the server rolls back when the
// session ends, so the error is deliberately not reported. ROLLBACK goes
// by the simple query protocol: one round trip, nothing to prepare, and no
// dependence on statements the server may have discarded.
func (s *Store) release(ctx context.Context, conn *pgxpool.Conn) {
	pc := conn.Conn().PgConn()
	if !pc.IsClosed() && pc.TxStatus() != 'I' && ctx.Err() == nil {
		_, _ = pc.Exec(ctx, "ROLLBACK").ReadAll()
	}
	conn.Release()
}

// attempt runs the transaction once: the read phase (seed, lock, clock)
// and the write phase (update, commit), one round trip each, after the
// preparation of the statements when s has not used the connection yet.
//
// lockWaitEnd, when not zero, is when the call's allowance for lock waits
// (WithMaxLockWait) runs out.
func (s *Store) attempt(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome, keys []keyState, work []ratelimit.KeyState, idx []int, lockWaitEnd time.Time) (bool, error) {
	conn, err := s.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer s.release(ctx, conn)

	sds, err := s.connStatements(ctx, conn.Conn())
	if err != nil {
		return false, err
	}
	x := sender{sds: sds, stmts: &s.stmts}
	now, err := s.readPhase(ctx, conn.Conn().PgConn(), x, keys, lockWaitEnd)
	if err != nil {
		if stalePrepared(err) {
			s.forgetStatements(conn.Conn())
		}
		return false, err
	}
	if s.afterLock != nil {
		s.afterLock(conn.Conn().PgConn().PID())
	}
	if s.testClock != nil {
		now = s.testClock.Now()
	}

	allowed, err := decide(checks, out, keys, work, idx, now)
	if err != nil || !allowed || !anyChanged(work) {
		// Nothing to write: end the read-only transaction. Its outcome
		// does not depend on the rollback, so a failure only costs the
		// connection (see release).
		return allowed, err
	}
	if err := s.writePhase(ctx, conn.Conn().PgConn(), x, keys, work, checks, out, now); err != nil {
		return false, err
	}
	return true, nil
}

// readPhase opens the transaction and locks every key's row, in sorted
// order, leaving the transaction open; it returns the server's time, as
// read by the last lock statement once every lock is held, in Unix
// nanoseconds. Most keys already have a row, so it first sends, in one
// round trip: BEGIN (READ COMMITTED), the timeouts and the lock of every
// key (SELECT … FOR UPDATE, with clock_timestamp() read by the same
// statement once the row is locked). When a row is missing it sends, in a
// second round trip: ROLLBACK, which releases every lock taken, then
// BEGIN, the timeouts, the seed of every key (an INSERT of a row that the
// statement's snapshot does not have, ON CONFLICT DO NOTHING, so missing
// rows exist before any lock is requested) and the lock of every key.
//
// Seeding inside the transaction is safe under READ COMMITTED: an INSERT
// that meets a concurrent caller's uncommitted seed waits for it and then
// does nothing, and the lock statement that follows takes a new snapshot
// that sees the committed row. Seeds never wait while their transaction
// holds a lock (the rollback comes first, and every caller seeds before
// it locks, in the same sorted order), and a lock statement never waits
// for an uncommitted seed (its snapshot does not see the row), so neither
// path can deadlock with the other.
//
// Nothing here changes limiter state: the transaction can only commit when
// the write phase sends COMMIT. So every failure of this phase, a lost
// reply or a client-side timeout included, means "not applied".
func (s *Store) readPhase(ctx context.Context, pc *pgconn.PgConn, x sender, keys []keyState, lockWaitEnd time.Time) (int64, error) {
	now, err := s.lockRows(ctx, pc, x, keys, lockWaitEnd, false)
	if err != nil {
		return 0, err
	}
	for i := range keys {
		if !keys[i].found {
			return s.lockRows(ctx, pc, x, keys, lockWaitEnd, true)
		}
	}
	return now, nil
}

// paramsLockWithTimeouts are the parameter formats of
// stmtLockWithTimeouts: the key in binary, the timeouts in text.
var paramsLockWithTimeouts = []int16{1, 1, 0, 0, 0}

// lockRows sends one round trip of readPhase, one pgconn batch: with
// seed, the rollback of the transaction the first one opened and the
// seeds; then BEGIN, the timeouts and the locks. A missing row after seeding was swept in
// between (errVanished, retried); without seed it is left to readPhase.
func (s *Store) lockRows(ctx context.Context, pc *pgconn.PgConn, x sender, keys []keyState, lockWaitEnd time.Time, seed bool) (int64, error) {
	limits, err := s.timeoutLimits(ctx)
	if err != nil {
		return 0, err
	}
	if !lockWaitEnd.IsZero() {
		// The row locks get what the wait in the key queue left.
		limits.lock = min(limits.lock, wholeMillis(time.Until(lockWaitEnd)))
	}
	var t timeoutParams
	t.set(limits)
	var b pgconn.Batch
	x.b = &b
	var params [5][]byte
	results := 1
	if seed {
		// The seeds may wait for a concurrent seed: the timeouts come
		// first, in a statement of their own.
		x.send(stmtRollback, nil, nil, nil)
		results += 2 + len(keys)
	}
	x.send(stmtBegin, nil, nil, nil)
	if seed {
		params[0], params[1], params[2] = t.lock, t.statement, t.idle
		x.send(stmtTimeouts, params[:3], allText, allText)
		for i := range keys {
			params[0], params[1], params[2] = keys[i].ns, keys[i].key, []byte(keys[i].alg)
			x.send(stmtSeed, params[:3], allBinary, allText)
		}
	}
	for i := range keys {
		params[0], params[1] = keys[i].ns, keys[i].key
		if i == 0 && !seed {
			params[2], params[3], params[4] = t.lock, t.statement, t.idle
			x.send(stmtLockWithTimeouts, params[:5], paramsLockWithTimeouts, allBinary)
			continue
		}
		x.send(stmtLock, params[:2], allBinary, allBinary)
	}

	// The results come in the order sent: the statements before the
	// locks, then one per lock.
	want := results + len(keys)
	mrr := pc.ExecBatch(ctx, &b)
	var now int64
	n := 0
	for ; err == nil && mrr.NextResult(); n++ {
		switch rr := mrr.ResultReader(); {
		case n < results:
			_, err = rr.Close()
		case n < want:
			now, err = readLocked(rr, &keys[n-results])
		}
	}
	if cerr := mrr.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != want {
		err = fmt.Errorf("pgstore: read phase: %d results, want %d", n, want)
	}
	if err != nil {
		return 0, classifyRead(err)
	}
	if seed {
		for i := range keys {
			if !keys[i].found {
				return 0, fmt.Errorf("pgstore: %w: %w", ratelimit.ErrUnavailable, errVanished)
			}
		}
	}
	return now, nil
}

// readLocked reads rr, the result of k's lock statement, into k (k.found
// is false when the row is missing) and returns the clock it read, in
// Unix nanoseconds (0 when the row is missing).
func readLocked(rr *pgconn.ResultReader, k *keyState) (int64, error) {
	k.found = false
	var now int64
	var err error
	if rr.NextRow() {
		now, err = k.scanLocked(rr.Values())
	}
	if _, cerr := rr.Close(); err == nil {
		err = cerr
	}
	return now, err
}

// scanLocked copies the binary columns algorithm, state, expires_at and
// clock_timestamp() of a locked row into k and returns the clock.
func (k *keyState) scanLocked(v [][]byte) (int64, error) {
	if len(v) != 4 || v[0] == nil || v[1] == nil {
		return 0, fmt.Errorf("pgstore: locked row with %d columns, want 4 non-null", len(v))
	}
	expires, err := decodeTimestamptz(v[2])
	if err != nil {
		return 0, fmt.Errorf("pgstore: expires_at: %w", err)
	}
	now, err := decodeTimestamptz(v[3])
	if err != nil {
		return 0, fmt.Errorf("pgstore: clock_timestamp(): %w", err)
	}
	// The values are only valid until the next read from the connection.
	k.rowAlg = append(k.rowAlg[:0], v[0]...)
	k.rowState = append(k.rowState[:0], v[1]...)
	k.expires, k.found = expires, true
	return now, nil
}

// decide evaluates every check in order on the locked rows, leaving in
// work the state to write of each key, and returns whether every take and
// reserve was allowed. A check reading state that another algorithm wrote
// gets ErrCorruptState.
func decide(checks []ratelimit.Check, out []ratelimit.Outcome, keys []keyState, work []ratelimit.KeyState, idx []int, now int64) (bool, error) {
	for j := range keys {
		k := &keys[j]
		work[j].State, k.curAlg = nil, ""
		if len(k.rowState) > 0 && k.expires > now {
			work[j].State, k.curAlg = k.rowState, k.alg
			if string(k.rowAlg) != k.alg {
				k.curAlg = string(k.rowAlg)
			}
		}
	}
	allowed, err := ratelimit.EvaluateAll(checks, now, idx, work, out, func(i int, state, dst []byte) (ratelimit.Outcome, []byte, error) {
		c := &checks[i]
		k := &keys[idx[i]]
		name := c.Algorithm.Name()
		if len(state) > 0 && k.curAlg != name {
			return ratelimit.Outcome{}, dst[:0], fmt.Errorf("%w: state written by algorithm %q, read by %q", ratelimit.ErrCorruptState, k.curAlg, name)
		}
		o, next, err := ratelimit.Evaluate(c.Algorithm, c.Op, state, now, c.Limit, c.Cost, c.MaxWait, dst)
		if err == nil && o.Changed {
			k.curAlg = name
		}
		return o, next, err
	})
	if err != nil {
		return false, fmt.Errorf("pgstore: %w", err)
	}
	return allowed, nil
}

func anyChanged(work []ratelimit.KeyState) bool {
	for j := range work {
		if work[j].Changed {
			return true
		}
	}
	return false
}

// writePhase sends, in one round trip (a pgconn batch), one UPDATE per
// changed key and COMMIT. It runs under the read phase's SET LOCAL
// timeouts: its UPDATEs never wait for a lock (the rows are held), and
// once it is sent, a failure the client sees before the reply is
// ErrUnknownOutcome whatever the server's timeouts, so refreshing
// statement_timeout here would cost a statement and change no outcome. A
// batch that pgx failed to write counts as sent, since pgx does not say
// whether part of it left. It is refused, with nothing sent, when less
// than the lock margin is left.
func (s *Store) writePhase(ctx context.Context, pc *pgconn.PgConn, x sender, keys []keyState, work []ratelimit.KeyState, checks []ratelimit.Check, out []ratelimit.Outcome, now int64) error {
	if _, err := s.timeoutLimits(ctx); err != nil {
		return err // nothing sent: the open transaction is rolled back
	}
	var b pgconn.Batch
	x.b = &b
	var params [5][]byte
	var expBuf [8]byte
	sent := 0
	for j := range keys {
		k, w := &keys[j], &work[j]
		if !w.Changed {
			continue
		}
		state, expires := w.State, expiry(now, out[w.Last].TTL).UnixNano()
		if len(state) == 0 || out[w.Last].TTL <= 0 {
			// The state may be dropped: mark the row empty and expired
			// rather than deleting it, so concurrent callers that already
			// seeded it find it; the sweeper removes it.
			state, expires = []byte{}, now
		}
		params[0], params[1], params[2] = k.ns, k.key, []byte(checks[w.Last].Algorithm.Name())
		params[3], params[4] = state, appendTimestamptz(expBuf[:0], expires)
		x.send(stmtUpdate, params[:5], allBinary, allText)
		sent++
	}
	x.send(stmtCommit, nil, nil, nil)

	// The results come in order and a server error ends them, so the
	// number read in full says which statement failed: COMMIT's is the
	// last, and an error after it (its ReadyForQuery lost) is judged as
	// one on COMMIT, which may have happened.
	mrr := pc.ExecBatch(ctx, &b)
	n := 0
	var err error
	for ; mrr.NextResult(); n++ {
		if _, err = mrr.ResultReader().Close(); err != nil {
			break
		}
	}
	if cerr := mrr.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return classifyWrite("write phase", err, n >= sent)
	}
	return nil
}

// expiry returns now+ttl rounded up to the microsecond (the precision of
// timestamptz), so a row never expires before its TTL, saturating at the
// largest time.Time a Unix nanosecond count can express.
func expiry(now int64, ttl time.Duration) time.Time {
	const maxNs = 1<<63 - 1
	if ttl > 0 && now > maxNs-int64(ttl)-int64(time.Microsecond) {
		return time.Unix(0, maxNs).Truncate(time.Microsecond)
	}
	at := now + int64(ttl)
	if r := at % int64(time.Microsecond); r != 0 {
		at += int64(time.Microsecond) - r
	}
	return time.Unix(0, at)
}

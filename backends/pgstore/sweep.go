package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Sweep deletes expired rows (expires_at at or before the server's
// clock_timestamp()) and returns how many it deleted. It works in batches
// of at most the sweep batch size (WithSweepBatch), one short transaction
// each, until a batch finds fewer rows than that or ctx ends. Each batch
// locks its rows with FOR UPDATE SKIP LOCKED, so it never waits for a
// decision in progress, and a decision waits for at most one batch.
//
// Deleting an expired row changes no decision: expired rows are treated as
// absent. Sweep is safe to run concurrently with anything, including other
// sweeps. Without a ctx deadline it is bounded by the default timeout
// (WithDefaultTimeout). Errors wrap ratelimit.ErrClosed,
// ratelimit.ErrUnavailable or ratelimit.ErrUnknownOutcome (a batch whose
// COMMIT reply was lost); the count covers the batches known to be
// committed.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("pgstore: %w", ratelimit.ErrClosed)
	}
	return s.sweep(ctx)
}

func (s *Store) sweep(ctx context.Context) (int, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("pgstore: sweep: %w: %w", ratelimit.ErrUnavailable, err)
		}
		n, err := s.sweepBatch(ctx)
		total += n
		if err != nil || n < s.cfg.sweepBatch {
			return total, err
		}
	}
}

// sweepBatch deletes one batch in one round trip.
func (s *Store) sweepBatch(ctx context.Context) (int, error) {
	tag, err := s.oneShot(ctx, "sweep", s.q.sweep, s.cfg.sweepBatch)
	if err != nil {
		return 0, err
	}
	return int(tag), nil
}

// oneShot runs one statement in its own transaction with the server-side
// timeouts, in one round trip (BEGIN, timeouts, statement, COMMIT), and
// returns the rows it affected. Errors are classified as for the write
// phase.
func (s *Store) oneShot(ctx context.Context, op, sql string, args ...any) (int64, error) {
	conn, err := s.acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer s.release(ctx, conn)
	t, err := s.timeouts(ctx)
	if err != nil {
		return 0, err
	}
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	b.Queue(s.q.setTimeouts, t.lock, t.statement, t.idle)
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := conn.Conn().SendBatch(ctx, b)
	var rows int64
	failedAt := -1
	for i := range b.Len() {
		tag, err2 := br.Exec()
		if err2 != nil {
			err, failedAt = err2, i
			break
		}
		if i == 2 {
			rows = tag.RowsAffected()
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err, failedAt = cerr, b.Len()-1
	}
	if err != nil {
		return 0, classifyWrite(op, err, failedAt == b.Len()-1)
	}
	return rows, nil
}

// startSweeper runs Sweep every interval until Close.
func (s *Store) startSweeper() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopSweep = cancel
	s.sweepDone = make(chan struct{})
	go func() {
		defer close(s.sweepDone)
		tick := time.NewTicker(s.cfg.sweepInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := s.sweep(ctx) // bounded by the default timeout
			if err != nil && ctx.Err() == nil && s.cfg.sweepErr != nil {
				s.cfg.sweepErr(err)
			}
		}
	}()
}

// Reset deletes the state of key in namespace in one transaction (one
// round trip), waiting for a decision in progress on the key to finish.
// Resetting a key without state is not an error. Errors wrap
// ratelimit.ErrInvalidKey, ratelimit.ErrClosed, ratelimit.ErrUnavailable or
// ratelimit.ErrUnknownOutcome.
func (s *Store) Reset(ctx context.Context, namespace, key string) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %w", ratelimit.ErrClosed)
	}
	if !ratelimit.ValidKey(key) || len(namespace) > ratelimit.MaxKeyLen {
		return fmt.Errorf("pgstore: %w: key length %d outside 1..%d or namespace length %d over %d",
			ratelimit.ErrInvalidKey, len(key), ratelimit.MaxKeyLen, len(namespace), ratelimit.MaxKeyLen)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgstore: %w: %w", ratelimit.ErrUnavailable, err)
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	_, err := s.oneShot(ctx, "reset", s.q.reset, []byte(namespace), []byte(key))
	return err
}

// Close marks the store closed and stops the background sweeper, waiting
// for it to return. Calls in progress finish; later calls return
// ratelimit.ErrClosed. Close does not close the pool, which belongs to the
// caller. Closing twice is not an error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.stopSweep != nil {
			s.stopSweep()
			<-s.sweepDone
		}
	})
	return nil
}

var _ ratelimit.Store = (*Store)(nil)

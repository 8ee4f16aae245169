package pgrules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Watch keeps apply fed with the table's rules until ctx ends, and then
// returns nil. Pass the engine's Swap:
//
//	go src.Watch(ctx, engine.Swap)
//
// It borrows one connection from the pool for LISTEN (taken out of the
// pool for good, so its queued notifications never reach another user) and
// reloads on every notification the table's trigger sends, that is when a
// writing transaction commits. Each time it (re)starts listening it reloads
// first, so nothing committed while it was not listening is missed. When
// the connection fails, or a ping every poll interval does not answer, it
// falls back to polling: it reloads every poll interval and tries to listen
// again each time.
//
// A reload reads every active row; when they differ from the last rows it
// tried, it converts and validates them (Source.Load) and calls apply. A
// refused reload (a bad row, apply's error) leaves the rules in force as
// they are, is logged, and is reported to the OnReload function, which
// also hears of every successful one.
func (s *Source) Watch(ctx context.Context, apply func(*policy.Set) error) error {
	if apply == nil {
		return fmt.Errorf("%w: pgrules: nil apply function", sluice.ErrInvalid)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0 // consecutive failures to listen
	for {
		listened, err := s.listen(ctx, apply)
		if ctx.Err() != nil {
			return nil
		}
		if listened {
			failures = 0
		}
		// Log when polling starts, then every 100 failed attempts.
		if failures%100 == 0 {
			s.cfg.logger.Warn("pgrules: not listening for rule changes; polling", "channel", s.cfg.channel,
				"interval", s.cfg.pollInterval, "attempts", failures+1, "error", err)
		}
		failures++
		s.reload(ctx, apply)
		timer.Reset(s.cfg.pollInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
	}
}

// listen LISTENs on a connection of its own, reloads, and then reloads on
// every notification until the connection fails or ctx ends. It reports
// whether it got to listen.
func (s *Source) listen(ctx context.Context, apply func(*policy.Set) error) (listened bool, err error) {
	conn, err := s.listenConn(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx) // the connection may already be broken
	}()
	s.reload(ctx, apply)
	for {
		waitCtx, cancel := context.WithTimeout(ctx, s.cfg.pollInterval)
		_, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			s.reload(ctx, apply)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// A quiet poll interval: prove the connection still carries
			// notifications (a dead peer sends no error).
			pingCtx, cancel := s.cfg.withTimeout(ctx)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
		default:
			return true, err
		}
	}
}

// listenerName is the application_name of the listening session.
const listenerName = "'sluice policy/pgrules listener'"

// dialListener borrows a connection, takes it out of the pool and LISTENs
// on it.
func (s *Source) dialListener(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	// The application name shows operators which session listens.
	_, err = conn.Exec(ctx, "SET application_name = "+listenerName+"; LISTEN "+pgx.Identifier{s.cfg.channel}.Sanitize())
	if err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// reload reads the rules and applies them if they changed since the last
// attempt, logging and reporting the outcome.
func (s *Source) reload(ctx context.Context, apply func(*policy.Set) error) {
	noticed := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var set *policy.Set
	rows, err := s.readRows(ctx)
	if err != nil && ctx.Err() == nil {
		// The server is unreachable: log when it starts, then every 100
		// attempts, not once per poll interval.
		if s.readFailures%100 == 0 {
			s.cfg.logger.Warn("pgrules: cannot read the rules; the rules in force stay", "attempts", s.readFailures+1, "error", err)
		}
		s.readFailures++
	}
	if err == nil {
		s.readFailures = 0
		fp := fingerprint(rows)
		if s.tried && fp == s.lastTried {
			return
		}
		s.tried, s.lastTried = true, fp
		if set, err = s.convert(rows); err == nil {
			if err = apply(set); err != nil {
				set, err = nil, fmt.Errorf("pgrules: apply: %w", err)
			}
		}
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case err != nil && s.readFailures == 0:
		s.cfg.logger.Error("pgrules: rules refused; the rules in force stay", "error", err)
	case err == nil:
		s.cfg.logger.Info("pgrules: rules reloaded", "rows", len(rows))
	}
	if s.cfg.onReload != nil {
		s.cfg.onReload(policy.Reload{Set: set, Err: err, Delay: time.Since(noticed)})
	}
}

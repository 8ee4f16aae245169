package pgstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// SQLSTATE codes the store treats specially.
const (
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeLockNotAvailable     = "55P03"
	codeQueryCanceled        = "57014"
	codeInvalidStatementName = "26000"
	codeFeatureNotSupported  = "0A000"
)

// classifyRead classifies a failure of the read phase (or of any batch that
// cannot commit limiter state): the locking transaction was never
// committed, so the call certainly did not apply. This holds for server
// errors (lock_timeout 55P03, statement_timeout 57014, a terminated
// backend) and for client-side failures alike (lost reply, deadline passed
// while waiting): the COMMIT that could apply anything is only sent by the
// write phase.
func classifyRead(err error) error {
	return fmt.Errorf("pgstore: read phase: %w: %w", ratelimit.ErrUnavailable, err)
}

// classifyWrite classifies a failure of op, a batch whose last statement is
// COMMIT (the write phase, a reset, a sweep batch). atCommit reports whether the first error was the
// COMMIT's own result.
//
//   - A server error before COMMIT: the server skips the rest of the
//     batch, COMMIT never runs, the transaction rolls back:
//     ErrUnavailable.
//   - A server error on COMMIT of class 40 (except 40003) or 23: the commit
//     failed and rolled back: ErrUnavailable. Any other error there (a
//     FATAL from a terminated backend, a cancel) may have arrived after the
//     commit was durable: ErrUnknownOutcome.
//   - A client-side error before anything was written: ErrUnavailable.
//     Otherwise (lost connection, deadline passed while waiting for the
//     reply): ErrUnknownOutcome.
func classifyWrite(op string, err error, atCommit bool) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && !atCommit:
		return fmt.Errorf("pgstore: %s: %w: %w", op, ratelimit.ErrUnavailable, err)
	case errors.As(err, &pgErr) && commitFailed(pgErr.Code):
		return fmt.Errorf("pgstore: %s: commit failed: %w: %w", op, ratelimit.ErrUnavailable, err)
	case pgconn.SafeToRetry(err):
		return fmt.Errorf("pgstore: %s: not sent: %w: %w", op, ratelimit.ErrUnavailable, err)
	default:
		return fmt.Errorf("pgstore: %s: %w: %w", op, ratelimit.ErrUnknownOutcome, err)
	}
}

// commitFailed reports whether an error returned for COMMIT means the
// transaction was rolled back.
func commitFailed(code string) bool {
	return (strings.HasPrefix(code, "40") && code != "40003") || strings.HasPrefix(code, "23")
}

// retryable reports whether a failed attempt certainly rolled back for a
// reason another attempt may not meet: a serialization failure, a deadlock,
// a row swept between seeding and locking, or a prepared statement the
// server lost or must plan again (the attempt prepares it again). Timeouts
// are not retried: the deadline they derive from is spent.
func retryable(err error) bool {
	if errors.Is(err, ratelimit.ErrUnknownOutcome) || !errors.Is(err, ratelimit.ErrUnavailable) {
		return false
	}
	if errors.Is(err, errVanished) || stalePrepared(err) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == codeSerializationFailure || pgErr.Code == codeDeadlockDetected)
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// ErrContention reports that the generic path (an algorithm without a Lua
// program) lost its compare-and-set race more times than WithCASAttempts
// allows. Nothing was applied, so it wraps ratelimit.ErrUnavailable.
var ErrContention = fmt.Errorf("%w: redisstore: compare-and-set contention", ratelimit.ErrUnavailable)

// ErrCrossSlot reports a composite whose keys cannot be applied in one
// script: on a ClusterClient keys in different hash slots, on a Ring
// checks with different hash tags. The store refuses such a composite
// before sending anything; on a client it cannot identify, Redis's
// CROSSSLOT reply maps to it. Either way nothing was applied. Give the
// keys one hash tag (see WithHashTag). It wraps ratelimit.ErrInvalid, not
// ErrUnavailable: the same composite always fails the same way, so it is a
// configuration mistake that no retry or failure policy masks.
var ErrCrossSlot = fmt.Errorf("%w: redisstore: keys cannot be applied atomically together", ratelimit.ErrInvalid)

// classify maps an error from go-redis to the ratelimit error classes.
//
// The store's commands are never retried by go-redis (see noRetryCmd), so
// one call is one attempt and the class follows from where it failed:
//
//   - nothing was written to the socket: a dial error, a pool timeout, a
//     closed client, a full or stuck autopipeliner queue, a context that
//     ended while waiting for a connection,
//     or a failed write (Redis executes a command only once it has read all
//     of it, and a write error means its last bytes never left) →
//     ErrUnavailable;
//   - an error reply from Redis: the script did not run, or it stopped
//     before its first write (every script reads and decides before
//     writing, and Redis refuses an out-of-memory write only when it is the
//     script's first) → ErrUnavailable; except CROSSSLOT → ErrCrossSlot (a
//     composite across slots, which wraps ratelimit.ErrInvalid because it
//     can never succeed) and WRONGTYPE → ErrCorruptState (a non-string
//     value at a key of the store);
//   - the command was written but no reply was read (a read timeout, a
//     reset connection, EOF) or anything not recognised → ErrUnknownOutcome.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		switch opErr.Op {
		case "dial":
			return fmt.Errorf("%w: redisstore: %w", ratelimit.ErrUnavailable, err)
		case "write":
			return fmt.Errorf("%w: redisstore: request not fully sent: %w", ratelimit.ErrUnavailable, err)
		case "read":
			return fmt.Errorf("%w: redisstore: request sent, no reply: %w", ratelimit.ErrUnknownOutcome, err)
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: redisstore: request sent, connection closed: %w", ratelimit.ErrUnknownOutcome, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "CROSSSLOT"):
			return fmt.Errorf("%w: redisstore: %w", ErrCrossSlot, err)
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return fmt.Errorf("%w: redisstore: a key of the store holds a non-string value: %w", ratelimit.ErrCorruptState, err)
		}
		return fmt.Errorf("%w: redisstore: redis refused the script: %w", ratelimit.ErrUnavailable, err)
	}
	switch {
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrAutoPipelineQueueFull), errors.Is(err, redis.ErrAutoPipelineTimeout):
		// The last two: an autopipeliner refused the command, or gave up
		// waiting for a batch slot, before writing it.
		return fmt.Errorf("%w: redisstore: %w", ratelimit.ErrUnavailable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// go-redis returns a bare context error only before writing (while
		// waiting for a pooled connection or dialling); once written, a
		// deadline surfaces as a read error, handled above.
		return fmt.Errorf("%w: redisstore: %w", ratelimit.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: redisstore: %w", ratelimit.ErrUnknownOutcome, err)
}

// isNoScript reports whether err is Redis's NOSCRIPT reply: the script is
// not in the server's cache and nothing ran.
func isNoScript(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOSCRIPT")
}

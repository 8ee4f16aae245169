package grpclimit

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/backoff"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Backoff bounds the client interceptor's retries, as
// httplimit.Transport's fields do for HTTP; zero fields take the same
// defaults (4 attempts, 30 s in all, backoff from 100 ms up to 10 s).
type Backoff struct {
	MaxAttempts         int
	MaxElapsed          time.Duration
	BaseDelay, MaxDelay time.Duration
}

// UnaryClientInterceptor retries unary calls refused with
// codes.ResourceExhausted or codes.Unavailable, no earlier than their
// errdetails.RetryInfo delay, plus exponential backoff with full jitter,
// the schedule httplimit.Transport uses. A ResourceExhausted answer
// without RetryInfo (a cost that can never pass, or a server that does
// not say) is not retried. Retries stop after MaxAttempts, when the wait
// would pass MaxElapsed or the call's deadline, or when its context
// ends; then the last error (or the context's) is returned.
func UnaryClientInterceptor(b Backoff) grpc.UnaryClientInterceptor {
	p := backoff.Policy{Base: b.BaseDelay, Max: b.MaxDelay, Attempts: b.MaxAttempts, Total: b.MaxElapsed}.WithDefaults()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil {
				return nil
			}
			floor, retry := retryFloor(err)
			if !retry {
				return err
			}
			wait, ok := p.Next(ctx, start, attempt, floor)
			if !ok {
				return err
			}
			if serr := backoff.Sleep(ctx, wait); serr != nil {
				return status.FromContextError(serr).Err()
			}
		}
	}
}

// retryFloor reports whether err may be retried, and the server's
// RetryInfo delay (0 when absent).
func retryFloor(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	var floor time.Duration
	hasInfo := false
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			floor, hasInfo = max(0, ri.GetRetryDelay().AsDuration()), true
		}
	}
	switch st.Code() {
	case codes.ResourceExhausted:
		return floor, hasInfo
	case codes.Unavailable:
		return floor, true
	}
	return 0, false
}

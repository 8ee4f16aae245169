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

// StreamClientInterceptor retries server-streaming calls refused when they
// open, as UnaryClientInterceptor retries unary calls: a refusal arrives
// with the first receive, and until a message has arrived the stream is
// opened again and its request replayed. Streams whose client sends a
// stream of its own, and streams that have received a message, are never
// retried.
func StreamClientInterceptor(b Backoff) grpc.StreamClientInterceptor {
	p := backoff.Policy{Base: b.BaseDelay, Max: b.MaxDelay, Attempts: b.MaxAttempts, Total: b.MaxElapsed}.WithDefaults()
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || desc.ClientStreams {
			return cs, err
		}
		return &retryStream{ClientStream: cs, ctx: ctx, p: p, start: time.Now(), open: func() (grpc.ClientStream, error) {
			return streamer(ctx, desc, cc, method, opts...)
		}}, nil
	}
}

// retryStream is a server-streaming ClientStream that is opened again when
// the server refuses it before its first message.
type retryStream struct {
	grpc.ClientStream
	// ctx is the call's: a stream lives as long as its call, and the
	// refused stream's own context is cancelled when it ends.
	ctx      context.Context
	p        backoff.Policy
	start    time.Time
	open     func() (grpc.ClientStream, error)
	sent     []any // the request, replayed on a new stream
	closed   bool
	received bool
	attempt  int
}

func (s *retryStream) SendMsg(m any) error {
	if !s.received {
		s.sent = append(s.sent, m)
	}
	return s.ClientStream.SendMsg(m)
}

func (s *retryStream) CloseSend() error {
	s.closed = true
	return s.ClientStream.CloseSend()
}

func (s *retryStream) RecvMsg(m any) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if err == nil || s.received {
			s.received = s.received || err == nil
			if s.received {
				s.sent = nil
			}
			return err
		}
		floor, retry := retryFloor(err)
		if !retry {
			return err
		}
		s.attempt++
		wait, ok := s.p.Next(s.ctx, s.start, s.attempt, floor)
		if !ok {
			return err
		}
		if serr := backoff.Sleep(s.ctx, wait); serr != nil {
			return status.FromContextError(serr).Err()
		}
		cs, oerr := s.open()
		if oerr != nil {
			return oerr
		}
		s.ClientStream = cs
		for _, msg := range s.sent {
			if serr := cs.SendMsg(msg); serr != nil {
				return serr
			}
		}
		if s.closed {
			if cerr := cs.CloseSend(); cerr != nil {
				return cerr
			}
		}
	}
}

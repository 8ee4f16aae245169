package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrNoKey reports that a Key found nothing to key the call by; the call
// is refused with codes.InvalidArgument.
var ErrNoKey = errors.New("grpclimit: no rate-limit key in the call")

// Key derives a rate-limit key from a call: its context (peer, metadata)
// and its full method name ("/package.Service/Method").
type Key func(ctx context.Context, fullMethod string) (string, error)

// PeerAddress keys calls by the peer's IP address, grouping IPv6 peers by
// their first ipv6PrefixLen bits (64 when 0: one host usually holds a
// whole /64). Behind a proxy every call has the proxy's address: key by
// metadata the proxy sets instead.
func PeerAddress(ipv6PrefixLen int) Key {
	if ipv6PrefixLen <= 0 || ipv6PrefixLen > 128 {
		ipv6PrefixLen = 64
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer", ErrNoKey)
		}
		host, _, err := net.SplitHostPort(p.Addr.String())
		if err != nil {
			host = p.Addr.String()
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return "", fmt.Errorf("%w: peer %q is not an IP address", ErrNoKey, p.Addr)
		}
		a = a.WithZone("").Unmap()
		if a.Is4() || ipv6PrefixLen == 128 {
			return a.String(), nil
		}
		pfx, _ := a.Prefix(ipv6PrefixLen)
		return pfx.String(), nil
	}
}

// Metadata keys calls by the first value of incoming metadata name, for
// example an API key. A missing or empty value is ErrNoKey.
func Metadata(name string) Key {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(name); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", fmt.Errorf("%w: metadata %s is missing", ErrNoKey, name)
	}
}

// Method keys calls by their full method name.
func Method() Key {
	return func(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }
}

// Join keys calls by all of keys together, joined with a NUL byte.
func Join(keys ...Key) Key {
	return func(ctx context.Context, m string) (string, error) {
		parts := make([]string, len(keys))
		for i, k := range keys {
			s, err := k(ctx, m)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, "\x00"), nil
	}
}

// Decider decides calls for the interceptors: build one with ByLimiter
// or ByComposite.
type Decider struct {
	limiter   *sluice.Limiter
	key       Key
	composite *sluice.Composite
	keys      []Key
}

// ByLimiter decides each call with l, keyed by key.
func ByLimiter(l *sluice.Limiter, key Key) Decider { return Decider{limiter: l, key: key} }

// ByComposite decides each call with c, keys[i] giving the key of its
// i-th rule.
func ByComposite(c *sluice.Composite, keys ...Key) Decider {
	return Decider{composite: c, keys: keys}
}

// Option configures the server interceptors.
type Option func(*config)

type config struct {
	cost             func(ctx context.Context, fullMethod string) int64
	shadow           bool
	unavailableRetry time.Duration
}

// WithCost makes each call cost fn(ctx, fullMethod) units instead of 1.
func WithCost(fn func(ctx context.Context, fullMethod string) int64) Option {
	return func(c *config) { c.cost = fn }
}

// WithShadowMode decides every call but refuses none (a fail-closed
// store failure still refuses).
func WithShadowMode() Option { return func(c *config) { c.shadow = true } }

// WithUnavailableRetryAfter sets the RetryInfo delay of the Unavailable
// answer to a fail-closed store failure; default 1 s.
func WithUnavailableRetryAfter(d time.Duration) Option {
	return func(c *config) { c.unavailableRetry = d }
}

type limiter struct {
	d   Decider
	cfg config
}

func newLimiter(d Decider, opts []Option) *limiter {
	if d.limiter == nil && d.composite == nil || d.limiter != nil && d.key == nil {
		panic("grpclimit: a Decider from ByLimiter or ByComposite is needed")
	}
	cfg := config{unavailableRetry: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	return &limiter{d: d, cfg: cfg}
}

// UnaryServerInterceptor refuses unary calls that d denies, before the
// handler runs; see the package documentation for the status codes.
func UnaryServerInterceptor(d Decider, opts ...Option) grpc.UnaryServerInterceptor {
	l := newLimiter(d, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor refuses streams that d denies, when they open;
// each stream costs as one call.
func StreamServerInterceptor(d Decider, opts ...Option) grpc.StreamServerInterceptor {
	l := newLimiter(d, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := l.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// check decides one call, returning the status error of a refusal.
func (l *limiter) check(ctx context.Context, method string) error {
	cost := int64(1)
	if l.cfg.cost != nil {
		cost = l.cfg.cost(ctx, method)
	}
	var ds []sluice.Decision
	var err error
	if l.d.limiter != nil {
		key, kerr := l.d.key(ctx, method)
		if kerr != nil {
			return status.Error(codes.InvalidArgument, kerr.Error())
		}
		var d sluice.Decision
		d, err = l.d.limiter.AllowN(ctx, key, cost)
		ds = []sluice.Decision{d}
	} else {
		keys := make([]string, len(l.d.keys))
		for i, k := range l.d.keys {
			var kerr error
			if keys[i], kerr = k(ctx, method); kerr != nil {
				return status.Error(codes.InvalidArgument, kerr.Error())
			}
		}
		ds, err = l.d.composite.Decide(ctx, cost, keys...)
	}
	return l.refusal(ctx, ds, err)
}

func (l *limiter) refusal(ctx context.Context, ds []sluice.Decision, err error) error {
	switch {
	case err != nil && ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, sluice.ErrUnavailable), errors.Is(err, sluice.ErrUnknownOutcome):
		st := status.New(codes.Unavailable, "rate limiter unavailable: "+err.Error())
		return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(l.cfg.unavailableRetry)})
	case errors.Is(err, sluice.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return status.Error(codes.Unavailable, err.Error())
	}
	var worst *sluice.Decision
	var violations []*errdetails.QuotaFailure_Violation
	for i := range ds {
		d := &ds[i]
		if d.Allowed || d.ByPolicy {
			continue
		}
		violations = append(violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + d.Rule,
			Description: fmt.Sprintf("rate limit %s exceeded", d.Limit),
		})
		if worst == nil || d.RetryAfter > worst.RetryAfter {
			worst = d
		}
	}
	if worst == nil || l.cfg.shadow {
		return nil
	}
	quota := &errdetails.QuotaFailure{Violations: violations}
	if worst.RetryAfter == sluice.Never {
		// No wait lets this call pass: no RetryInfo, so clients do not retry.
		st := status.New(codes.ResourceExhausted, fmt.Sprintf("the call's cost exceeds the burst of policy %q: it can never pass", worst.Rule))
		return withDetails(st, quota)
	}
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(worst.RetryAfter)}
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit exceeded (policy %q); retry after %s", worst.Rule, worst.RetryAfter))
	return withDetails(st, retry, quota)
}

func withDetails(st *status.Status, details ...protoadapt.MessageV1) error {
	withD, err := st.WithDetails(details...)
	if err != nil {
		return st.Err()
	}
	return withD.Err()
}

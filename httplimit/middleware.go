package httplimit

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Quota is one rule's part in a request's decision.
type Quota struct {
	// Policy names the rule; it is the policy name in the RateLimit fields.
	Policy string
	// Decision is the rule's decision. A Decision with ByPolicy set came
	// from the rule's failure policy: it is not reported in the fields.
	Decision sluice.Decision
	// Shadow reports that the rule is in shadow mode: its denial is
	// reported but does not deny the request.
	Shadow bool
	// Key is the rule's key for the request; it is hashed into the pk
	// parameter when WithPartitionKeys is set.
	Key string
}

// Result is the decision on one request, as a deny handler sees it.
type Result struct {
	// Allowed reports whether the request proceeds: false only when a rule
	// not in shadow mode denied it or failed closed.
	Allowed bool
	// Cost is the request's cost in the rules' units.
	Cost int64
	// Quotas has one entry per rule that applied, in rule order.
	Quotas []Quota
	// Err is the error of the decision: a store failure that a fail-closed
	// rule answered (wrapping sluice.ErrUnavailable or
	// sluice.ErrUnknownOutcome), a missing key (ErrNoKey) or invalid input
	// (sluice.ErrInvalid).
	Err error
}

// StatusCode returns the status the middleware answers a refused request
// with: 400 for a missing key or invalid input, 413 when the cost can
// never pass (it exceeds a rule's burst), 403 when a rule admits nothing
// at all (a policy's requests_per_unit: 0), 503 when the limiter's store
// failed closed, 429 otherwise. It is 200 for an allowed request.
func (res *Result) StatusCode() int {
	return statusCode(res.Allowed, res.Err, res.Quotas)
}

// statusCode is Result.StatusCode on the parts of a Result: a pointer to
// the Result would make its Quotas escape wherever its Err does.
func statusCode(allowed bool, err error, quotas []Quota) int {
	switch {
	case allowed:
		return http.StatusOK
	case errors.Is(err, ErrNoKey), errors.Is(err, sluice.ErrInvalid):
		return http.StatusBadRequest
	case err != nil:
		return http.StatusServiceUnavailable
	}
	if q := denying(quotas); q != nil && q.Decision.RetryAfter == sluice.Never {
		if q.Decision.Limit.Count == 0 {
			return http.StatusForbidden // a rule that admits nothing
		}
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusTooManyRequests
}

// denying returns the quota that denies the request: the denying,
// non-shadow rule with the longest RetryAfter; nil when none does.
func denying(quotas []Quota) *Quota {
	var worst *Quota
	for i := range quotas {
		q := &quotas[i]
		if q.Shadow || q.Decision.Allowed || q.Decision.ByPolicy {
			continue
		}
		if worst == nil || q.Decision.RetryAfter > worst.Decision.RetryAfter {
			worst = q
		}
	}
	return worst
}

// result returns the Result of the parts finish is given, with a copy of
// quotas that the caller may keep.
func result(quotas []Quota, allowed bool, cost int64, err error) Result {
	return Result{Allowed: allowed, Cost: cost, Quotas: append([]Quota(nil), quotas...), Err: err}
}

// retryAfterOf is the Retry-After of a 429: the denying rule's wait.
func retryAfterOf(quotas []Quota) int64 {
	if q := denying(quotas); q != nil {
		return retryAfterSeconds(q.Decision.RetryAfter)
	}
	return 1
}

// DecideFunc decides a request at cost: it appends one Quota per rule that
// applied to quotas and returns them, with allowed false only when a rule
// not in shadow mode denied or failed closed. Its error follows
// Result.Err. It is how a policy engine, or any other decider, plugs in.
type DecideFunc func(r *http.Request, cost int64, quotas []Quota) (_ []Quota, allowed bool, err error)

// Decider decides requests for Middleware: build one with ByLimiter,
// ByComposite or ByFunc.
type Decider struct {
	limiter   *sluice.Limiter
	key       Key
	composite *sluice.Composite
	keys      []Key
	fn        DecideFunc
}

// ByLimiter decides each request with l, keyed by key.
func ByLimiter(l *sluice.Limiter, key Key) Decider {
	return Decider{limiter: l, key: key}
}

// ByComposite decides each request with c, keys[i] giving the key of
// the composite's i-th rule; all rules are decided atomically.
func ByComposite(c *sluice.Composite, keys ...Key) Decider {
	return Decider{composite: c, keys: keys}
}

// ByFunc decides each request with fn.
func ByFunc(fn DecideFunc) Decider {
	return Decider{fn: fn}
}

// Middleware returns middleware that decides each request with d before
// calling the next handler. An allowed request gets the RateLimit fields
// and proceeds; a refused one is answered as Result.StatusCode says, with
// Retry-After and an RFC 9457 problem body (or WithDenyHandler's answer),
// and does not reach the next handler. It panics if d is the zero Decider.
func Middleware(d Decider, opts ...Option) func(http.Handler) http.Handler {
	if d.limiter == nil && d.composite == nil && d.fn == nil || d.limiter != nil && d.key == nil {
		panic("httplimit: Middleware needs a Decider from ByLimiter, ByComposite or ByFunc")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return func(next http.Handler) http.Handler {
		return &handler{next: next, d: d, cfg: cfg}
	}
}

type handler struct {
	next   http.Handler
	d      Decider
	cfg    config
	fields fieldCache
}

var quotaPool = sync.Pool{New: func() any { s := make([]Quota, 0, 8); return &s }}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cost := int64(1)
	if h.cfg.cost != nil {
		cost = h.cfg.cost(r)
	}
	if h.d.limiter != nil {
		h.serveLimiter(w, r, cost)
		return
	}
	qp := quotaPool.Get().(*[]Quota)
	res := Result{Cost: cost, Quotas: (*qp)[:0]}
	if h.d.composite != nil {
		h.decideComposite(r, &res)
	} else {
		res.Quotas, res.Allowed, res.Err = h.d.fn(r, cost, res.Quotas)
	}
	h.finish(w, r, res.Quotas, res.Allowed, res.Cost, res.Err)
	clear(res.Quotas)
	*qp = res.Quotas[:0]
	quotaPool.Put(qp)
}

// serveLimiter is the single-rule path: its quota lives on the stack.
func (h *handler) serveLimiter(w http.ResponseWriter, r *http.Request, cost int64) {
	var one [1]Quota
	key, err := h.d.key(r)
	if err != nil {
		h.finish(w, r, nil, false, cost, err)
		return
	}
	d, err := h.d.limiter.AllowN(r.Context(), key, cost)
	one[0] = Quota{Policy: d.Rule, Decision: d, Key: key, Shadow: h.cfg.shadow}
	h.finish(w, r, one[:], d.Allowed || h.cfg.shadow && err == nil, cost, err)
}

func (h *handler) decideComposite(r *http.Request, res *Result) {
	var keyBuf [8]string
	keys := keyBuf[:0]
	for _, k := range h.d.keys {
		s, err := k(r)
		if err != nil {
			res.Err = err
			return
		}
		keys = append(keys, s)
	}
	ds, err := h.d.composite.Decide(r.Context(), res.Cost, keys...)
	res.Err = err
	res.Allowed = err == nil
	for i, d := range ds {
		res.Quotas = append(res.Quotas, Quota{Policy: d.Rule, Decision: d, Key: keys[i], Shadow: h.cfg.shadow})
		if !d.Allowed && !h.cfg.shadow {
			res.Allowed = false
		}
	}
}

// finish writes the fields and either calls the next handler or refuses.
// It takes a Result's parts, not a Result, so that quotas can stay on the
// caller's stack (see statusCode).
func (h *handler) finish(w http.ResponseWriter, r *http.Request, quotas []Quota, allowed bool, cost int64, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client is gone: nobody reads an answer
	}
	if allowed {
		err = nil // a fail-open rule's error is the rule's business
	}
	now := time.Time{}
	if h.cfg.headers&(XRateLimitHeaders) != 0 {
		now = time.Now()
	}
	h.fields.write(w.Header(), quotas, allowed, cost, err, &h.cfg, now)
	if h.cfg.onDecision != nil {
		res := result(quotas, allowed, cost, err)
		h.cfg.onDecision(r, &res)
	}
	if allowed {
		h.next.ServeHTTP(w, r)
		return
	}
	status := statusCode(allowed, err, quotas)
	res := result(quotas, allowed, cost, err)
	if h.cfg.deny != nil {
		h.cfg.deny(w, r, res)
		return
	}
	writeProblem(w, status, &res)
}

// HeaderStyle selects the rate-limit fields the middleware sends.
type HeaderStyle uint8

const (
	// IETFHeaders are RateLimit and RateLimit-Policy as
	// draft-ietf-httpapi-ratelimit-headers-11 defines them: structured
	// field Lists with one item per rule. The default.
	IETFHeaders HeaderStyle = 1 << iota
	// LegacyDraftHeaders are RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (delay-seconds), the trio of the draft's early
	// versions that Kong and envoy's ratelimit still send, for the
	// strictest rule.
	LegacyDraftHeaders
	// XRateLimitHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix seconds), GitHub's convention, for the
	// strictest rule.
	XRateLimitHeaders
)

// Option configures Middleware.
type Option func(*config)

type config struct {
	cost             func(*http.Request) int64
	shadow           bool
	headers          HeaderStyle
	partitionKeys    bool
	deny             func(http.ResponseWriter, *http.Request, Result)
	onDecision       func(*http.Request, *Result)
	unavailableRetry time.Duration
}

func defaultConfig() config {
	return config{headers: IETFHeaders, unavailableRetry: time.Second}
}

// WithCost makes each request cost fn(r) units instead of 1, for example
// its body size or a model's token count. A cost above a rule's burst can
// never pass: it is answered 413.
func WithCost(fn func(r *http.Request) int64) Option {
	return func(c *config) { c.cost = fn }
}

// WithShadowMode decides and reports every request but refuses none: a
// denial still shows in the fields and in WithDecisionHook, and the
// request proceeds. For trying rules on live traffic. A rule that fails
// closed still refuses.
func WithShadowMode() Option {
	return func(c *config) { c.shadow = true }
}

// WithHeaders selects the rate-limit fields sent, as a set of
// HeaderStyles; 0 sends none (Retry-After is always sent on a refusal).
func WithHeaders(s HeaderStyle) Option {
	return func(c *config) { c.headers = s }
}

// WithPartitionKeys adds the pk parameter to each RateLimit item: the
// first 12 bytes of SHA-256 of the rule's key, so a client behind a
// shared address can tell its partition apart without learning the key.
func WithPartitionKeys() Option {
	return func(c *config) { c.partitionKeys = true }
}

// WithDenyHandler answers refused requests with fn instead of the problem
// body. The middleware has set the fields and Retry-After; fn writes the
// status (Result.StatusCode is the default one) and the body.
func WithDenyHandler(fn func(w http.ResponseWriter, r *http.Request, res Result)) Option {
	return func(c *config) { c.deny = fn }
}

// WithDecisionHook calls fn with every decision before the request
// proceeds or is refused, for logging shadow-mode denials for example. fn
// must not keep res or its Quotas after it returns.
func WithDecisionHook(fn func(r *http.Request, res *Result)) Option {
	return func(c *config) { c.onDecision = fn }
}

// WithUnavailableRetryAfter sets the Retry-After of a 503 sent when a
// fail-closed rule's store failed; default 1 s.
func WithUnavailableRetryAfter(d time.Duration) Option {
	return func(c *config) { c.unavailableRetry = d }
}

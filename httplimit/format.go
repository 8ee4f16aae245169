package httplimit

import "time"

// Field is one header field line: its name, in http.CanonicalHeaderKey
// form, and its value.
type Field struct {
	Name, Value string
}

// Formatter formats the header fields of decisions made elsewhere (by a
// policy engine behind an RPC, say) exactly as Middleware writes them:
// it runs the middleware's own code. Like the middleware, it serialises
// each rule's policy item with httpsfv once and appends the per-response
// integers, so keep one Formatter for many responses. It is safe for
// concurrent use. Create one with NewFormatter; the zero value is not
// usable.
type Formatter struct {
	cfg   config
	cache fieldCache
}

// NewFormatter returns a Formatter writing the fields Middleware with
// opts writes. Of the options, WithHeaders, WithPartitionKeys and
// WithUnavailableRetryAfter shape the fields; the others have no effect.
func NewFormatter(opts ...Option) *Formatter {
	f := &Formatter{cfg: defaultConfig()}
	for _, o := range opts {
		o(&f.cfg)
	}
	return f
}

// AppendFields appends to dst the fields Middleware sends for res, in
// this order: RateLimit-Policy and RateLimit (one line each, with an item
// per quota the store decided under a finite limit, in quota order), the
// legacy fields WithHeaders selects, and Retry-After when
// res.StatusCode() is 429 or 503. It appends nothing for a result with
// nothing to report. The X-RateLimit-Reset of XRateLimitHeaders counts
// from time.Now.
//
// A caller that reuses dst and keeps one Formatter allocates only the
// RateLimit line per call (and a RateLimit-Policy line when the quotas'
// rules differ from the previous call's).
func (f *Formatter) AppendFields(dst []Field, res *Result) []Field {
	err := res.Err
	if res.Allowed {
		err = nil // a fail-open rule's error is the rule's business
	}
	now := time.Time{}
	if f.cfg.headers&XRateLimitHeaders != 0 {
		now = time.Now()
	}
	var buf [maxFields]field
	for _, fl := range f.cache.appendFields(buf[:0], res.Quotas, res.Allowed, res.Cost, err, &f.cfg, now) {
		dst = append(dst, Field{Name: fl.name, Value: fl.value})
	}
	return dst
}

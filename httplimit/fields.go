package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/muldiv"
)

// ruleFields is one rule's serialised policy: what stays the same from
// one response to the next, computed once with httpsfv.
type ruleFields struct {
	name  string
	limit sluice.Limit
	// quota and window are q and w of the policy.
	quota, window int64
	// policyLine is the RateLimit-Policy item, as a one-line field value
	// shared by every response: its length and capacity are 1, so an
	// Add to the header copies it rather than writing into it.
	policyLine []string
	// itemPrefix is the RateLimit item up to the r value: `"name";r=`.
	itemPrefix string
}

func newRuleFields(name string, l sluice.Limit) *ruleFields {
	rf := &ruleFields{name: name, limit: l}
	rf.quota, rf.window = quotaWindow(l)
	sfName := sfString(name)
	item := httpsfv.NewItem(sfName)
	item.Params.Add("q", rf.quota)
	item.Params.Add("w", rf.window)
	policy, err := httpsfv.Marshal(httpsfv.List{item})
	if err != nil {
		policy = `"invalid"` // unreachable: sfString makes the name valid
	}
	rf.policyLine = []string{policy}
	prefix, _ := httpsfv.Marshal(httpsfv.NewItem(sfName))
	rf.itemPrefix = prefix + ";r="
	return rf
}

// sfString returns name as a valid structured-field String: printable
// ASCII, other bytes replaced by '?'.
func sfString(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			b := []byte(name)
			for j := range b {
				if b[j] < 0x20 || b[j] > 0x7e {
					b[j] = '?'
				}
			}
			return string(b)
		}
	}
	return name
}

// quotaWindow returns the q and w of limit l: w is the time to refill
// the burst (Burst·Period/Count) rounded up to whole seconds, at least
// one; q is what the rule admits within w: the burst, plus the refill of
// the rounding when w is longer than the refill time.
func quotaWindow(l sluice.Limit) (q, w int64) {
	fill := l.FillTime()
	w = max(1, int64((fill+time.Second-1)/time.Second))
	q = l.Burst
	if time.Duration(w)*time.Second > fill {
		q = max(q, muldiv.Floor(l.Count, w*int64(time.Second), int64(l.Period)))
	}
	return q, w
}

// fieldCache keeps the ruleFields of the rules a handler reports, slot i
// for a request's i-th quota, rebuilt when a rule's name or limit changes.
// Behind the slots, byName keeps every rule seen, for deciders (a policy)
// whose i-th quota is not always the same rule.
type fieldCache struct {
	slots  atomicSlice
	byName sync.Map // rule name -> *ruleFields
	joined atomic.Pointer[joinedLine]
}

func (c *fieldCache) get(i int, name string, l sluice.Limit) *ruleFields {
	s := c.slots.load()
	if i < len(s) {
		if rf := s[i]; rf != nil && rf.name == name && rf.limit == l {
			return rf
		}
	}
	if v, ok := c.byName.Load(name); ok && v.(*ruleFields).limit == l {
		rf := v.(*ruleFields)
		if i >= len(s) || s[i] == nil {
			c.slots.set(i, rf)
		}
		return rf // slot i serves another rule too: leave it
	}
	rf := newRuleFields(name, l)
	c.byName.Store(name, rf)
	c.slots.set(i, rf)
	return rf
}

// reportable reports whether q goes into the fields: a decision of the
// store, under a finite limit.
func reportable(q *Quota) bool {
	return !q.Decision.ByPolicy && !q.Decision.Limit.IsUnlimited() && q.Decision.Limit.Count > 0
}

// Canonical names of the fields the middleware writes.
const (
	nameRateLimitPolicy     = "Ratelimit-Policy"
	nameRateLimit           = "Ratelimit"
	nameLegacyLimit         = "Ratelimit-Limit"
	nameLegacyRemaining     = "Ratelimit-Remaining"
	nameLegacyReset         = "Ratelimit-Reset"
	nameXRateLimitLimit     = "X-Ratelimit-Limit"
	nameXRateLimitRemaining = "X-Ratelimit-Remaining"
	nameXRateLimitReset     = "X-Ratelimit-Reset"
	nameRetryAfter          = "Retry-After"
)

// maxFields is the most fields appendFields writes: RateLimit-Policy and
// RateLimit, the two legacy trios and Retry-After.
const maxFields = 9

// field is one field line as appendFields writes it. line, when not nil,
// is value as a one-element slice shared by every response (a cached
// policy item): Middleware puts it in the header as is, without
// allocating.
type field struct {
	name, value string
	line        []string
}

// appendFields appends to dst the fields of a decision on quotas at
// cost: RateLimit-Policy and RateLimit (one line each, an item per
// reportable quota), the legacy trios cfg selects, and Retry-After when
// the answer is 429 or 503. err is the decision's error, nil when
// allowed. It is the one implementation behind Middleware and Formatter.
func (c *fieldCache) appendFields(dst []field, quotas []Quota, allowed bool, cost int64, err error, cfg *config, now time.Time) []field {
	if cfg.headers != 0 {
		dst = c.appendRateLimitFields(dst, quotas, cost, cfg, now)
	}
	if allowed {
		return dst
	}
	switch statusCode(allowed, err, quotas) {
	case http.StatusTooManyRequests:
		dst = append(dst, field{name: nameRetryAfter, value: formatSeconds(retryAfterOf(quotas))})
	case http.StatusServiceUnavailable:
		dst = append(dst, field{name: nameRetryAfter, value: formatSeconds(retryAfterSeconds(cfg.unavailableRetry))})
	}
	return dst
}

// appendRateLimitFields appends the rate-limit fields cfg selects for
// quotas; none when no quota is reportable.
func (c *fieldCache) appendRateLimitFields(dst []field, quotas []Quota, cost int64, cfg *config, now time.Time) []field {
	var strictest *Quota
	var strictestFields *ruleFields
	var fieldsBuf [8]*ruleFields
	fields := fieldsBuf[:0]
	for i := range quotas {
		q := &quotas[i]
		if !reportable(q) {
			continue
		}
		rf := c.get(i, q.Policy, q.Decision.Limit)
		fields = append(fields, rf)
		if strictest == nil || stricterQuota(q, strictest) {
			strictest, strictestFields = q, rf
		}
	}
	if len(fields) == 0 {
		return dst
	}
	// A denial is atomic: the rules that admitted took nothing, and their
	// decisions say what remains after a taking that did not happen.
	untaken := int64(0)
	for i := range quotas {
		if d := &quotas[i].Decision; !d.Allowed && !d.ByPolicy {
			untaken = cost
			break
		}
	}
	if cfg.headers&IETFHeaders != 0 {
		if len(fields) == 1 {
			dst = append(dst, field{name: nameRateLimitPolicy, value: fields[0].policyLine[0], line: fields[0].policyLine})
		} else {
			line := c.joinedPolicy(fields)
			dst = append(dst, field{name: nameRateLimitPolicy, value: line[0], line: line})
		}
		var buf [256]byte
		b := buf[:0]
		j := 0
		for i := range quotas {
			if !reportable(&quotas[i]) {
				continue
			}
			if j > 0 {
				b = append(b, ", "...)
			}
			b = appendRateLimitItem(b, fields[j], &quotas[i], untaken, cfg.partitionKeys)
			j++
		}
		dst = append(dst, field{name: nameRateLimit, value: string(b)})
	}
	if cfg.headers&(LegacyDraftHeaders|XRateLimitHeaders) != 0 {
		limit := formatSeconds(strictestFields.quota)
		remaining := formatSeconds(available(strictest, untaken))
		reset := windowSeconds(strictest)
		if cfg.headers&LegacyDraftHeaders != 0 {
			dst = append(dst, field{name: nameLegacyLimit, value: limit},
				field{name: nameLegacyRemaining, value: remaining},
				field{name: nameLegacyReset, value: formatSeconds(reset)})
		}
		if cfg.headers&XRateLimitHeaders != 0 {
			dst = append(dst, field{name: nameXRateLimitLimit, value: limit},
				field{name: nameXRateLimitRemaining, value: remaining},
				field{name: nameXRateLimitReset, value: formatSeconds(now.Unix() + reset)})
		}
	}
	return dst
}

// joinedPolicy returns the RateLimit-Policy line of several rules, their
// cached items joined by commas, as a one-line field value (see
// ruleFields.policyLine). The last line built is kept, so that a stream of
// requests meeting the same rules shares one.
func (c *fieldCache) joinedPolicy(fields []*ruleFields) []string {
	if j := c.joined.Load(); j != nil && slices.Equal(j.rules, fields) {
		return j.line
	}
	n := 0
	for _, rf := range fields {
		n += len(rf.policyLine[0]) + 2
	}
	var sb strings.Builder
	sb.Grow(n)
	for i, rf := range fields {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(rf.policyLine[0])
	}
	j := &joinedLine{rules: slices.Clone(fields), line: []string{sb.String()}}
	c.joined.Store(j)
	return j.line
}

// joinedLine is a RateLimit-Policy line of several rules and the rules it
// was built from, compared by pointer (a rule's fields change pointer
// when its limit does).
type joinedLine struct {
	rules []*ruleFields
	line  []string
}

// write sets the fields appendFields writes on hdr, each as one line.
func (c *fieldCache) write(hdr http.Header, quotas []Quota, allowed bool, cost int64, err error, cfg *config, now time.Time) {
	var buf [maxFields]field
	for _, f := range c.appendFields(buf[:0], quotas, allowed, cost, err, cfg, now) {
		if f.line != nil {
			hdr[f.name] = f.line
		} else {
			hdr[f.name] = []string{f.value}
		}
	}
}

// stricterQuota reports whether a is closer to refusal than b: a denial
// over an admission, then the longer wait or the fewer units left.
func stricterQuota(a, b *Quota) bool {
	aDenied := !a.Decision.Allowed && !a.Shadow
	bDenied := !b.Decision.Allowed && !b.Shadow
	if aDenied != bDenied {
		return aDenied
	}
	if aDenied {
		return a.Decision.RetryAfter > b.Decision.RetryAfter
	}
	return a.Decision.Remaining < b.Decision.Remaining
}

// available is r, the units q has left: its Remaining, plus the cost
// it did not take when another rule denied the request.
func available(q *Quota, untaken int64) int64 {
	r := max(0, q.Decision.Remaining)
	if q.Decision.Allowed && untaken > 0 {
		r = min(r+untaken, max(r, q.Decision.Limit.Burst))
	}
	return r
}

// windowSeconds is t, the effective window of q: when q denied, its
// Retry-After, so that Retry-After never points before the window's end;
// otherwise the seconds until the rule is fully available again.
func windowSeconds(q *Quota) int64 {
	d := q.Decision
	if !d.Allowed && d.RetryAfter != sluice.Never {
		return retryAfterSeconds(d.RetryAfter)
	}
	return ceilSeconds(d.ResetAfter)
}

// rateLimitItem returns q's RateLimit item: `"name";r=R;t=T[;pk=:…:]`.
func rateLimitItem(rf *ruleFields, q *Quota, untaken int64, pk bool) string {
	var buf [128]byte
	return string(appendRateLimitItem(buf[:0], rf, q, untaken, pk))
}

// appendRateLimitItem appends q's RateLimit item to b. The name part
// comes from httpsfv (see ruleFields); the parameters are non-negative
// integers, written directly.
func appendRateLimitItem(b []byte, rf *ruleFields, q *Quota, untaken int64, pk bool) []byte {
	b = append(b, rf.itemPrefix...)
	b = strconv.AppendInt(b, available(q, untaken), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, windowSeconds(q), 10)
	if pk {
		sum := sha256.Sum256([]byte(q.Key))
		b = append(b, ";pk=:"...)
		b = base64.StdEncoding.AppendEncode(b, sum[:12])
		b = append(b, ':')
	}
	return b
}

// maxSeconds bounds every seconds value sent: the structured-field
// Integer range is 15 digits; a wait this long is a refusal in all but
// name (a never-passing cost is answered 413, not with a wait).
const maxSeconds = 999_999_999_999_999

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return min(maxSeconds, int64((d-1)/time.Second)+1)
}

// retryAfterSeconds is the Retry-After of a denial: d rounded up, at
// least one second, so a client never retries before it may pass.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, ceilSeconds(d))
}

func formatSeconds(n int64) string { return strconv.FormatInt(n, 10) }

// atomicSlice is a copy-on-write slice of ruleFields: readers load it
// without locking; a writer replaces it whole.
type atomicSlice struct {
	mu sync.Mutex
	p  atomic.Pointer[[]*ruleFields]
}

func (a *atomicSlice) load() []*ruleFields {
	if p := a.p.Load(); p != nil {
		return *p
	}
	return nil
}

func (a *atomicSlice) set(i int, rf *ruleFields) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.load()
	next := make([]*ruleFields, max(len(old), i+1))
	copy(next, old)
	next[i] = rf
	a.p.Store(&next)
}

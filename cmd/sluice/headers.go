package main

import (
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// appendQuotas appends, for each limited rule that matched (request
// order; unlimited rules have no quota to report), the httplimit Quota
// that formats its RateLimit fields.
func appendQuotas(q []httplimit.Quota, res *policy.Result) []httplimit.Quota {
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if st.Matched && !st.Unlimited {
			q = append(q, httplimit.Quota{Policy: st.Decision.Rule, Decision: st.Decision, Shadow: st.Shadow})
		}
	}
	return q
}

// fieldFormatter formats the fields of the RLS and /json answers with
// httplimit's own code, so they are exactly what an HTTP client of
// httplimit (or of /forward-auth) gets. It caches each rule's policy item.
var fieldFormatter = httplimit.NewFormatter()

// quotaPool recycles the quotas of appendHeaders: a Result's Quotas
// escape through AppendFields (escape analysis does not tell them from
// its Err, which errors.Is leaks), so a stack array would move to the
// heap on every call.
var quotaPool = sync.Pool{New: func() any { s := make([]httplimit.Quota, 0, 8); return &s }}

// appendHeaders appends to out the response_headers_to_add of res,
// decided at hits: RateLimit-Policy, RateLimit and, on a 429,
// Retry-After. Each header lives in vals, appended to; with room for
// them in both, nothing is allocated but the RateLimit value.
func appendHeaders(out []*corev3.HeaderValue, vals []corev3.HeaderValue, res *policy.Result, hits int64) []*corev3.HeaderValue {
	qp := quotaPool.Get().(*[]httplimit.Quota)
	hr := httplimit.Result{Allowed: res.Allowed, Cost: hits, Quotas: appendQuotas((*qp)[:0], res)}
	var buf [4]httplimit.Field
	fields := fieldFormatter.AppendFields(buf[:0], &hr)
	clear(hr.Quotas)
	*qp = hr.Quotas[:0]
	quotaPool.Put(qp)
	if cap(vals)-len(vals) < len(fields) {
		vals = make([]corev3.HeaderValue, 0, len(fields))
	}
	for _, f := range fields {
		vals = append(vals, corev3.HeaderValue{})
		v := &vals[len(vals)-1]
		v.Key, v.Value = f.Name, f.Value
		out = append(out, v)
	}
	return out
}

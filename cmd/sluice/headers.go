package main

import (
	"context"
	"net/http"

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

// fieldsRequest carries a decided result to fieldWriter.
type fieldsRequest struct {
	res  *policy.Result
	hits int64
}

type fieldsKey struct{}

// fieldWriter is httplimit's middleware over decisions already made: it
// writes exactly the fields (RateLimit-Policy, RateLimit, Retry-After) an
// HTTP client of httplimit gets, so the RLS headers and the HTTP answers
// share one formatter.
var fieldWriter = httplimit.Middleware(
	httplimit.ByFunc(func(r *http.Request, _ int64, q []httplimit.Quota) ([]httplimit.Quota, bool, error) {
		fr := r.Context().Value(fieldsKey{}).(*fieldsRequest)
		return appendQuotas(q, fr.res), fr.res.Allowed, nil
	}),
	httplimit.WithCost(func(r *http.Request) int64 { return r.Context().Value(fieldsKey{}).(*fieldsRequest).hits }),
	httplimit.WithDenyHandler(func(http.ResponseWriter, *http.Request, httplimit.Result) {}),
)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

// headerRecorder is a ResponseWriter that keeps only the header.
type headerRecorder http.Header

func (h headerRecorder) Header() http.Header       { return http.Header(h) }
func (headerRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (headerRecorder) WriteHeader(int)             {}

// rateLimitFields returns the header fields httplimit sends for res.
func rateLimitFields(ctx context.Context, res *policy.Result, hits int64) http.Header {
	h := make(http.Header, 3)
	r := (&http.Request{}).WithContext(context.WithValue(ctx, fieldsKey{}, &fieldsRequest{res: res, hits: hits}))
	fieldWriter.ServeHTTP(headerRecorder(h), r)
	return h
}

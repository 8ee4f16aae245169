// Package httppolicy decides HTTP requests with a policy engine
// (github.com/sluicehq/sluice/policy): it builds the request's descriptors
// from httplimit Keys, and hands httplimit.Middleware the engine's
// verdict, one Quota per rule that applied.
//
//	engine, _ := policy.New(set)
//	d := httppolicy.Decider(engine, "api",
//		httppolicy.Descriptor{{Key: "remote_address", Value: httplimit.ClientIP()}},
//		httppolicy.Descriptor{{Key: "path", Value: httplimit.Pattern(mux)}})
//	handler := httplimit.Middleware(d)(mux)
//
// A descriptor one of whose entries finds no value (httplimit.ErrNoKey,
// such as a missing header) is left out of the request, as envoy leaves
// out a descriptor whose action does not apply; a request left with none
// is allowed. Shadow-mode rules are reported and never refuse. An unknown
// domain is answered 503, like a store failure: a refusal that tells the
// client to come back, never a 500.
package httppolicy

import (
	"errors"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// Entry is one descriptor entry: its key, and the value taken from the
// request.
type Entry struct {
	Key   string
	Value httplimit.Key
}

// Descriptor is one request descriptor: ordered entries.
type Descriptor []Entry

// Decider decides each request with e in domain, building descriptors
// from the request.
func Decider(e *policy.Engine, domain string, descriptors ...Descriptor) httplimit.Decider {
	return httplimit.ByFunc(func(r *http.Request, cost int64, quotas []httplimit.Quota) ([]httplimit.Quota, bool, error) {
		descs := make([]policy.Descriptor, 0, len(descriptors))
		keys := make([]string, 0, len(descriptors))
	next:
		for _, d := range descriptors {
			desc := make(policy.Descriptor, len(d))
			values := make([]string, len(d))
			for i, en := range d {
				v, err := en.Value(r)
				if errors.Is(err, httplimit.ErrNoKey) || err == nil && v == "" {
					continue next
				}
				if err != nil {
					return quotas, false, err
				}
				desc[i] = policy.Entry{Key: en.Key, Value: v}
				values[i] = v
			}
			descs = append(descs, desc)
			keys = append(keys, strings.Join(values, "\x00"))
		}
		if len(descs) == 0 {
			return quotas, true, nil
		}
		res, err := e.Decide(r.Context(), domain, descs, cost)
		for i, st := range res.Statuses {
			if !st.Matched || st.Unlimited {
				continue
			}
			quotas = append(quotas, httplimit.Quota{Policy: st.Decision.Rule, Decision: st.Decision, Shadow: st.Shadow, Key: keys[i]})
		}
		return quotas, res.Allowed, err
	})
}

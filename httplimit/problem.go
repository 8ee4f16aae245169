package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Problem types of RFC 9457 bodies. The first two are registered by
// draft-ietf-httpapi-ratelimit-headers-11.
const (
	ProblemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// Problem is the RFC 9457 application/problem+json body of a refusal.
type Problem struct {
	Type   string `json:"type,omitempty"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies names the rules that refused the request, as the
	// draft's problem types define it.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// NewProblem returns the problem body the middleware sends for res.
func NewProblem(res *Result) Problem {
	status := res.StatusCode()
	p := Problem{Title: http.StatusText(status), Status: status}
	switch status {
	case http.StatusBadRequest:
		p.Detail = "the request could not be rate limited: " + res.Err.Error()
		return p
	case http.StatusServiceUnavailable:
		p.Type = ProblemReducedCapacity
		p.Detail = "the rate limiter is unavailable and refuses requests until it is back"
		return p
	}
	p.Type = ProblemQuotaExceeded
	for i := range res.Quotas {
		q := &res.Quotas[i]
		if !q.Shadow && !q.Decision.Allowed && !q.Decision.ByPolicy {
			p.ViolatedPolicies = append(p.ViolatedPolicies, q.Policy)
		}
	}
	switch status {
	case http.StatusForbidden:
		p.Detail = "a policy admits no requests of this kind"
	case http.StatusRequestEntityTooLarge:
		q := denying(res.Quotas)
		p.Detail = fmt.Sprintf("the request costs %d units; policy %q admits at most %d at once, so it can never pass", res.Cost, q.Policy, q.Decision.Limit.Burst)
	default:
		p.Detail = "retry after " + strconv.FormatInt(retryAfterOf(res.Quotas), 10) + " s"
	}
	return p
}

func writeProblem(w http.ResponseWriter, status int, res *Result) {
	body, err := json.Marshal(NewProblem(res))
	if err != nil {
		body = []byte(`{"title":"rate limited"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

package httplimit

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice/internal/backoff"
)

// Transport is an http.RoundTripper that backs off when a server rate
// limits it. A 429 or 503 answer is retried after its Retry-After
// (delay-seconds or an HTTP-date), or the RateLimit field's t when there
// is none, plus an exponential backoff with full jitter so that clients
// told the same moment do not return together; without either, after the
// backoff alone. Only requests that are safe to send again are retried:
// those with an idempotent method or a body that can be replayed
// (Request.GetBody), and always with their body replayed. Retries stop
// after MaxAttempts attempts, when the wait would pass MaxElapsed since
// the first attempt or the request context's deadline, or when the
// context ends; then the last answer (or the context's error) is returned.
//
// Transport also paces: when a response's RateLimit field says a quota is
// spent (r=0) it holds further requests to that host for the field's t
// seconds, and when fewer than PaceBelow of the quota is left it spaces
// them over t; a hold longer than MaxElapsed is not waited for. Malformed fields, and fields on cached responses (Age > 0),
// are ignored, as the draft requires.
//
// The zero value is usable; a Transport is safe for concurrent use.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts is the most attempts per request, the first included;
	// 0 means 4.
	MaxAttempts int
	// MaxElapsed bounds the time from the first attempt to the start of
	// the last; 0 means 30 s. A Retry-After past it is not waited for.
	MaxElapsed time.Duration
	// BaseDelay and MaxDelay bound the backoff: retry n waits, beyond the
	// server's Retry-After, a uniform draw from [0, min(MaxDelay,
	// BaseDelay·2ⁿ)). 0 means 100 ms and 10 s.
	BaseDelay, MaxDelay time.Duration
	// PaceBelow is the share of a quota (r/q, with q from
	// RateLimit-Policy) under which requests are spaced out; 0 means 0.1,
	// negative turns pacing off (a spent quota still holds requests).
	PaceBelow float64

	mu     sync.Mutex
	paceAt map[string]time.Time // host -> earliest next request
	jitter func(time.Duration) time.Duration
}

func (t *Transport) policy() backoff.Policy {
	return backoff.Policy{Base: t.BaseDelay, Max: t.MaxDelay, Attempts: t.MaxAttempts, Total: t.MaxElapsed, Jitter: t.jitter}.WithDefaults()
}

// RoundTrip sends req, retrying as the type documentation says.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx := req.Context()
	p := t.policy()
	if err := t.waitPace(ctx, req.URL.Host, p.Total); err != nil {
		closeBody(req)
		return nil, err
	}
	start := time.Now()
	replay := replayable(req)
	for attempt := 1; ; attempt++ {
		r := req
		if attempt > 1 {
			r = req.Clone(ctx)
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				r.Body = body
			}
		}
		resp, err := base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		floor, quotaWait := t.observe(req.URL.Host, resp)
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable || !replay {
			return resp, nil
		}
		if floor < 0 {
			floor = quotaWait
		}
		wait, ok := p.Next(ctx, start, attempt, floor)
		if !ok {
			return resp, nil
		}
		// Drain a little so the connection can be reused, then wait.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		_ = resp.Body.Close()
		if err := backoff.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// replayable reports whether req may be sent again: an idempotent method
// or a body that can be replayed, and in either case a body that can.
func replayable(req *http.Request) bool {
	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.GetBody != nil || req.Header.Get("Idempotency-Key") != ""
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// observe reads resp's Retry-After (floor, -1 when absent) and RateLimit
// fields, updating the host's pacing; quotaWait is the longest t among
// spent quotas.
func (t *Transport) observe(host string, resp *http.Response) (floor, quotaWait time.Duration) {
	floor = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	if age := resp.Header.Get("Age"); age != "" && age != "0" {
		return floor, 0 // a cached answer says nothing about now
	}
	lines := resp.Header.Values("RateLimit")
	if len(lines) == 0 {
		return floor, 0
	}
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		return floor, 0
	}
	quotas := policyQuotas(resp.Header.Values("RateLimit-Policy"))
	threshold := t.PaceBelow
	if threshold == 0 {
		threshold = 0.1
	}
	var next time.Duration // wait before the next request to host
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		r, okR := intParam(item.Params, "r")
		secs, okT := intParam(item.Params, "t")
		if !okR || !okT {
			continue
		}
		window := time.Duration(min(secs, 1<<30)) * time.Second
		switch {
		case r == 0:
			quotaWait = max(quotaWait, window)
			next = max(next, window)
		case threshold > 0:
			name, _ := item.Value.(string)
			if q, ok := quotas[name]; ok && q > 0 && float64(r) < threshold*float64(q) {
				next = max(next, window/time.Duration(r+1))
			}
		}
	}
	if next > 0 {
		t.mu.Lock()
		if t.paceAt == nil {
			t.paceAt = make(map[string]time.Time)
		}
		if at := time.Now().Add(next); at.After(t.paceAt[host]) {
			t.paceAt[host] = at
		}
		t.mu.Unlock()
	}
	return floor, quotaWait
}

// waitPace holds a request to host until its pacing allows, or ctx ends.
// A hold longer than limit is not waited for: the request goes, and the
// server's answer (a 429 with its Retry-After) decides.
func (t *Transport) waitPace(ctx context.Context, host string, limit time.Duration) error {
	t.mu.Lock()
	at, ok := t.paceAt[host]
	if ok && !time.Now().Before(at) {
		delete(t.paceAt, host)
		ok = false
	}
	t.mu.Unlock()
	if !ok || time.Until(at) > limit {
		return nil
	}
	return backoff.Sleep(ctx, time.Until(at))
}

// policyQuotas returns q by policy name from RateLimit-Policy lines.
func policyQuotas(lines []string) map[string]int64 {
	if len(lines) == 0 {
		return nil
	}
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		return nil
	}
	out := make(map[string]int64, len(list))
	for _, m := range list {
		if item, ok := m.(httpsfv.Item); ok {
			name, _ := item.Value.(string)
			if q, ok := intParam(item.Params, "q"); ok {
				out[name] = q
			}
		}
	}
	return out
}

func intParam(p *httpsfv.Params, name string) (int64, bool) {
	v, ok := p.Get(name)
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	return n, ok && n >= 0
}

// parseRetryAfter returns the wait a Retry-After value asks for: from
// delay-seconds or an HTTP-date (RFC 9110: IMF-fixdate in GMT, or the
// obsolete RFC 850 and asctime forms), 0 for a date in the past, -1 when
// absent or malformed.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return -1
		}
		return time.Duration(min(secs, 1<<30)) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return -1
	}
	return max(0, at.Sub(now))
}

package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/faultstore"
)

func newLimiter(t *testing.T, l sluice.Limit, failOpen bool, st ratelimit.Store) *sluice.Limiter {
	t.Helper()
	if st == nil {
		mem, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mem.Close() })
		st = mem
	}
	lim, err := sluice.New(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: l, FailOpen: failOpen}, sluice.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// fields are the RateLimit and RateLimit-Policy items of a response,
// parsed with httpsfv, by policy name.
type fields struct {
	policy map[string]*httpsfv.Params
	limit  map[string]*httpsfv.Params
}

// parseFields parses every rate-limit field of resp with a structured
// field parser, failing the test on any malformed one, and checks the
// draft's required parameters.
func parseFields(t *testing.T, resp *http.Response) fields {
	t.Helper()
	f := fields{policy: map[string]*httpsfv.Params{}, limit: map[string]*httpsfv.Params{}}
	for field, into := range map[string]map[string]*httpsfv.Params{"RateLimit-Policy": f.policy, "RateLimit": f.limit} {
		lines := resp.Header.Values(field)
		if len(lines) == 0 {
			continue
		}
		list, err := httpsfv.UnmarshalList(lines)
		if err != nil {
			t.Fatalf("%s %q does not parse as a structured-field List: %v", field, lines, err)
		}
		for _, m := range list {
			item, ok := m.(httpsfv.Item)
			if !ok {
				t.Fatalf("%s member %v is not an Item", field, m)
			}
			name, ok := item.Value.(string)
			if !ok {
				t.Fatalf("%s item %v is not a String", field, item.Value)
			}
			into[name] = item.Params
			required := []string{"r"}
			if field == "RateLimit-Policy" {
				required = []string{"q", "w"}
			}
			for _, p := range append(required, "t") {
				v, ok := item.Params.Get(p)
				if !ok {
					if p == "t" {
						continue
					}
					t.Fatalf("%s item %q lacks %s", field, name, p)
				}
				if n, ok := v.(int64); !ok || n < 0 {
					t.Fatalf("%s item %q: %s=%v is not a non-negative Integer", field, name, p, v)
				}
			}
		}
	}
	// Retry-After, when present, is delay-seconds: a positive integer.
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.ParseInt(ra, 10, 64); err != nil || n < 1 {
			t.Fatalf("Retry-After %q is not positive delay-seconds", ra)
		}
	}
	return f
}

func param(t *testing.T, p *httpsfv.Params, name string) int64 {
	t.Helper()
	if p == nil {
		t.Fatalf("no item to read %s from", name)
	}
	v, ok := p.Get(name)
	if !ok {
		t.Fatalf("no parameter %s", name)
	}
	return v.(int64)
}

type reply struct {
	resp    *http.Response
	body    string
	fields  fields
	problem httplimit.Problem
}

type step struct {
	header http.Header
	status int
	check  func(t *testing.T, r reply)
}

func fwd(name, value string) http.Header { return http.Header{name: {value}} }

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func TestMiddleware(t *testing.T) {
	retryAfter := func(t *testing.T, r reply) int64 {
		t.Helper()
		n, err := strconv.ParseInt(r.resp.Header.Get("Retry-After"), 10, 64)
		if err != nil {
			t.Fatalf("Retry-After %q: %v", r.resp.Header.Get("Retry-After"), err)
		}
		return n
	}
	var shadowDenials atomic.Int64
	cases := []struct {
		name  string
		mw    func(t *testing.T) func(http.Handler) http.Handler
		steps []step
	}{
		{
			name: "allowed then 429 with Retry-After and fields",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(2), false, nil), httplimit.ClientIP()))
			},
			steps: []step{
				{status: 200, check: func(t *testing.T, r reply) {
					if q, w := param(t, r.fields.policy["api"], "q"), param(t, r.fields.policy["api"], "w"); q != 2 || w != 60 {
						t.Errorf("policy q=%d w=%d, want q=2 w=60", q, w)
					}
					if got := param(t, r.fields.limit["api"], "r"); got != 1 {
						t.Errorf("r=%d after the first request, want 1", got)
					}
				}},
				{status: 200},
				{status: 429, check: func(t *testing.T, r reply) {
					ra := retryAfter(t, r)
					if ra < 1 || ra > 30 {
						t.Errorf("Retry-After %d, want 1..30 (one unit refills in 30 s)", ra)
					}
					if got := param(t, r.fields.limit["api"], "r"); got != 0 {
						t.Errorf("r=%d on a denial, want 0", got)
					}
					if tt := param(t, r.fields.limit["api"], "t"); tt > ra {
						t.Errorf("t=%d later than Retry-After %d", tt, ra)
					}
					if r.problem.Type != httplimit.ProblemQuotaExceeded || r.problem.Status != 429 ||
						len(r.problem.ViolatedPolicies) != 1 || r.problem.ViolatedPolicies[0] != "api" {
						t.Errorf("problem %+v", r.problem)
					}
					if ct := r.resp.Header.Get("Content-Type"); ct != "application/problem+json" {
						t.Errorf("Content-Type %q", ct)
					}
				}},
			},
		},
		{
			name: "forwarding headers from an untrusted peer are ignored",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), false, nil), httplimit.ClientIP()))
			},
			steps: []step{
				{header: fwd("X-Forwarded-For", "198.51.100.1"), status: 200},
				{header: fwd("X-Forwarded-For", "198.51.100.2"), status: 429},
				{header: fwd("X-Real-IP", "198.51.100.3"), status: 429},
			},
		},
		{
			name: "X-Forwarded-For from a trusted proxy is walked from the right",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				key := httplimit.ClientIP(append(loopback, netip.MustParsePrefix("10.0.0.0/8"))...)
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), false, nil), key))
			},
			steps: []step{
				{header: fwd("X-Forwarded-For", "6.6.6.6, 203.0.113.5, 10.0.0.1"), status: 200},
				// The client spoofs a different leftmost address: still itself.
				{header: fwd("X-Forwarded-For", "7.7.7.7, 203.0.113.5, 10.0.0.2"), status: 429},
				{header: fwd("X-Forwarded-For", "203.0.113.6"), status: 200},
			},
		},
		{
			name: "Forwarded from a trusted proxy",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				key := httplimit.ClientIPWith(httplimit.IPConfig{TrustedProxies: loopback, ForwardedHeader: "Forwarded"})
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), false, nil), key))
			},
			steps: []step{
				{header: fwd("Forwarded", `for=192.0.2.9, for="[2001:db8:cafe::17]:4711";proto=https`), status: 200},
				{header: fwd("Forwarded", `for="[2001:db8:cafe::99]"`), status: 429}, // same /64
				{header: fwd("X-Forwarded-For", "192.0.2.10"), status: 200},          // not the configured header: the proxy itself
			},
		},
		{
			name: "IPv6 clients are grouped by a configurable prefix",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				key := httplimit.ClientIPWith(httplimit.IPConfig{TrustedProxies: loopback, IPv6PrefixLen: 56})
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), false, nil), key))
			},
			steps: []step{
				{header: fwd("X-Forwarded-For", "2001:db8:1:200::1"), status: 200},
				{header: fwd("X-Forwarded-For", "2001:db8:1:2ff:ffff::1"), status: 429}, // same /56
				{header: fwd("X-Forwarded-For", "2001:db8:1:300::1"), status: 200},
			},
		},
		{
			name: "shadow mode decides and reports but never blocks",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), false, nil), httplimit.ClientIP()),
					httplimit.WithShadowMode(),
					httplimit.WithDecisionHook(func(_ *http.Request, res *httplimit.Result) {
						if !res.Quotas[0].Decision.Allowed {
							shadowDenials.Add(1)
						}
					}))
			},
			steps: []step{
				{status: 200},
				{status: 200, check: func(t *testing.T, r reply) {
					if got := param(t, r.fields.limit["api"], "r"); got != 0 {
						t.Errorf("r=%d, want 0: the shadow denial is reported", got)
					}
					if r.resp.Header.Get("Retry-After") != "" {
						t.Error("Retry-After on a request that proceeds")
					}
					if shadowDenials.Load() != 1 {
						t.Errorf("hook saw %d denials, want 1", shadowDenials.Load())
					}
				}},
			},
		},
		{
			name: "fail-open rule lets requests through when the store is down",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), true, faultstore.Down()), httplimit.ClientIP()))
			},
			steps: []step{{status: 200, check: func(t *testing.T, r reply) {
				if len(r.fields.limit) != 0 {
					t.Errorf("RateLimit sent for a decision the store did not make: %v", r.resp.Header.Values("RateLimit"))
				}
			}}, {status: 200}},
		},
		{
			name: "fail-closed rule answers 503 with Retry-After, not 500",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), false, faultstore.Down()), httplimit.ClientIP()),
					httplimit.WithUnavailableRetryAfter(3*time.Second))
			},
			steps: []step{{status: 503, check: func(t *testing.T, r reply) {
				if retryAfter(t, r) != 3 {
					t.Errorf("Retry-After %d, want 3", retryAfter(t, r))
				}
				if r.problem.Type != httplimit.ProblemReducedCapacity || r.problem.Status != 503 {
					t.Errorf("problem %+v", r.problem)
				}
			}}},
		},
		{
			name: "a cost that can never pass is 413 without Retry-After",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(2), false, nil), httplimit.ClientIP()),
					httplimit.WithCost(func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.Header.Get("Cost"), 10, 64); return n }))
			},
			steps: []step{
				{header: fwd("Cost", "3"), status: 413, check: func(t *testing.T, r reply) {
					if ra := r.resp.Header.Get("Retry-After"); ra != "" {
						t.Errorf("Retry-After %q for a cost that can never pass", ra)
					}
					if r.problem.Status != 413 || !strings.Contains(r.problem.Detail, "never") {
						t.Errorf("problem %+v", r.problem)
					}
				}},
				{header: fwd("Cost", "2"), status: 200}, // the 413 took nothing
			},
		},
		{
			name: "legacy header styles",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(2), false, nil), httplimit.ClientIP()),
					httplimit.WithHeaders(httplimit.LegacyDraftHeaders|httplimit.XRateLimitHeaders))
			},
			steps: []step{{status: 200, check: func(t *testing.T, r reply) {
				if len(r.fields.limit) != 0 || len(r.fields.policy) != 0 {
					t.Error("draft-11 fields sent although not selected")
				}
				want := map[string]int64{"RateLimit-Limit": 2, "RateLimit-Remaining": 1, "X-RateLimit-Limit": 2, "X-RateLimit-Remaining": 1}
				for h, v := range want {
					if got, err := strconv.ParseInt(r.resp.Header.Get(h), 10, 64); err != nil || got != v {
						t.Errorf("%s = %q, want %d", h, r.resp.Header.Get(h), v)
					}
				}
				reset, err := strconv.ParseInt(r.resp.Header.Get("RateLimit-Reset"), 10, 64)
				if err != nil || reset < 1 || reset > 30 {
					t.Errorf("RateLimit-Reset %q, want delay-seconds 1..30", r.resp.Header.Get("RateLimit-Reset"))
				}
				unix, err := strconv.ParseInt(r.resp.Header.Get("X-RateLimit-Reset"), 10, 64)
				if now := time.Now().Unix(); err != nil || unix < now || unix > now+31 {
					t.Errorf("X-RateLimit-Reset %q, want a Unix time within 30 s", r.resp.Header.Get("X-RateLimit-Reset"))
				}
			}}},
		},
		{
			name: "partition keys are byte sequences",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(2), false, nil), httplimit.ClientIP()),
					httplimit.WithPartitionKeys())
			},
			steps: []step{{status: 200, check: func(t *testing.T, r reply) {
				v, ok := r.fields.limit["api"].Get("pk")
				if b, isBytes := v.([]byte); !ok || !isBytes || len(b) != 12 {
					t.Errorf("pk = %v, want a 12-byte Byte Sequence", v)
				}
			}}},
		},
		{
			name: "a missing API key is 400",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(2), false, nil), httplimit.Header("X-API-Key")))
			},
			steps: []step{
				{status: 400},
				{header: fwd("X-API-Key", "k1"), status: 200},
			},
		},
		{
			name: "the user's deny handler answers",
			mw: func(t *testing.T) func(http.Handler) http.Handler {
				return httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerMinute(1), false, nil), httplimit.ClientIP()),
					httplimit.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res httplimit.Result) {
						w.WriteHeader(res.StatusCode())
						_, _ = io.WriteString(w, "slow down")
					}))
			},
			steps: []step{{status: 200}, {status: 429, check: func(t *testing.T, r reply) {
				if r.body != "slow down" || r.resp.Header.Get("Retry-After") == "" {
					t.Errorf("body %q, Retry-After %q", r.body, r.resp.Header.Get("Retry-After"))
				}
			}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.mw(t))
			for i, s := range tc.steps {
				r := do(t, srv, s.header)
				if r.resp.StatusCode != s.status {
					t.Fatalf("step %d: status %d, want %d (body %s)", i, r.resp.StatusCode, s.status, r.body)
				}
				if s.check != nil {
					s.check(t, r)
				}
			}
		})
	}
}

// newServer serves "ok" behind mw on a real loopback server.
func newServer(t *testing.T, mw func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, srv *httptest.Server, h http.Header) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/items/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{resp: resp, body: string(body), fields: parseFields(t, resp)}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(body, &r.problem); err != nil {
			t.Fatalf("problem body %s: %v", body, err)
		}
	}
	return r
}

func TestCompositeReportsEveryRule(t *testing.T) {
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	c, err := sluice.NewComposite([]sluice.Rule{
		{Name: "per-ip", Algorithm: gcra.New(), Limit: sluice.PerMinute(5)},
		{Name: "global", Algorithm: gcra.New(), Limit: sluice.PerSecond(2)},
	}, sluice.WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	global := func(*http.Request) (string, error) { return "all", nil }
	srv := newServer(t, httplimit.Middleware(httplimit.ByComposite(c, httplimit.ClientIP(), global)))
	first := do(t, srv, nil)
	if first.resp.StatusCode != http.StatusOK || len(first.fields.limit) != 2 || len(first.fields.policy) != 2 {
		t.Fatalf("status %d, RateLimit %v, RateLimit-Policy %v", first.resp.StatusCode, first.resp.Header.Values("RateLimit"), first.resp.Header.Values("RateLimit-Policy"))
	}
	if q, w := param(t, first.fields.policy["global"], "q"), param(t, first.fields.policy["global"], "w"); q != 2 || w != 1 {
		t.Errorf("global policy q=%d w=%d, want 2 and 1", q, w)
	}
	_ = do(t, srv, nil)
	third := do(t, srv, nil)
	if third.resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: status %d, want 429 from the global rule", third.resp.StatusCode)
	}
	if vp := third.problem.ViolatedPolicies; len(vp) != 1 || vp[0] != "global" {
		t.Errorf("violated-policies %v, want [global]", vp)
	}
	// The denied request took nothing from the per-ip rule.
	if r := param(t, third.fields.limit["per-ip"], "r"); r != 3 {
		t.Errorf("per-ip r=%d after the denial, want 3", r)
	}
}

// TestMiddlewareConcurrentSafe: 8 clients sending 20 requests each at one
// key through a real server get exactly the burst admitted.
func TestMiddlewareConcurrentSafe(t *testing.T) {
	mw := httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerHour(50), false, nil), httplimit.ClientIP()))
	srv := newServer(t, mw)
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					allowed.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 50 || denied.Load() != 110 {
		t.Errorf("%d allowed, %d denied; want exactly 50 and 110", allowed.Load(), denied.Load())
	}
}

// reusedWriter is a ResponseWriter whose header map keeps its capacity
// between requests, so that only the middleware's own allocations count.
type reusedWriter struct{ h http.Header }

func (w *reusedWriter) Header() http.Header         { return w.h }
func (w *reusedWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *reusedWriter) WriteHeader(int)             {}

// TestMiddlewareAllocations enforces the allowed path's cost on a
// Limiter: the RateLimit item and its one-element slice, nothing else
// (the policy field is shared between responses).
func TestMiddlewareAllocations(t *testing.T) {
	h := httplimit.Middleware(httplimit.ByLimiter(newLimiter(t, sluice.PerSecond(1_000_000_000), false, nil), httplimit.ClientIP()))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	w := &reusedWriter{h: http.Header{}}
	h.ServeHTTP(w, req) // create the key and the cached policy field
	allocs := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if allocs > 2 {
		t.Errorf("%.1f allocations per allowed request, want at most 2", allocs)
	}
}

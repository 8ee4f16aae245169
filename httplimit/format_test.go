package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// formatterResults are decisions of one to three rules: admitted, denied
// by one rule (the others' r gets the cost back), a never-passing cost, a
// store failure answered closed, and a rule left out (ByPolicy).
var formatterResults = map[string]httplimit.Result{
	"one admitted": {Allowed: true, Cost: 1, Quotas: []httplimit.Quota{
		{Policy: "api", Decision: sluice.Decision{Allowed: true, Remaining: 41, ResetAfter: 1500 * time.Millisecond, Limit: sluice.PerMinute(60)}},
	}},
	"three, one denies": {Allowed: false, Cost: 2, Quotas: []httplimit.Quota{
		{Policy: "per-ip", Decision: sluice.Decision{Allowed: true, Remaining: 7, ResetAfter: 3 * time.Second, Limit: sluice.PerSecond(10)}},
		{Policy: `we"ird`, Decision: sluice.Decision{Allowed: false, RetryAfter: 2500 * time.Millisecond, ResetAfter: time.Minute, Limit: sluice.PerMinute(5)}},
		{Policy: "global", Decision: sluice.Decision{Allowed: true, Remaining: 900, ResetAfter: time.Second, Limit: sluice.PerSecond(1000)}},
	}},
	"two admitted": {Allowed: true, Cost: 1, Quotas: []httplimit.Quota{
		{Policy: "per-ip", Decision: sluice.Decision{Allowed: true, Remaining: 3, ResetAfter: time.Second, Limit: sluice.PerSecond(10)}},
		{Policy: "daily", Decision: sluice.Decision{Allowed: true, Remaining: 99, ResetAfter: time.Hour, Limit: sluice.PerHour(100)}},
	}},
	"never passes": {Allowed: false, Cost: 9, Quotas: []httplimit.Quota{
		{Policy: "small", Decision: sluice.Decision{Allowed: false, Remaining: 3, RetryAfter: sluice.Never, Limit: sluice.PerHour(3)}},
	}},
	"store down": {Allowed: false, Cost: 1, Err: fmt.Errorf("redis: %w", sluice.ErrUnavailable), Quotas: []httplimit.Quota{
		{Policy: "api", Decision: sluice.Decision{ByPolicy: true, Limit: sluice.PerMinute(60)}},
	}},
	"shadow denial": {Allowed: true, Cost: 1, Quotas: []httplimit.Quota{
		{Policy: "try", Shadow: true, Decision: sluice.Decision{Allowed: false, RetryAfter: time.Second, Limit: sluice.PerSecond(1)}},
		{Policy: "left-out", Decision: sluice.Decision{Allowed: true, ByPolicy: true, Limit: sluice.PerSecond(1)}},
	}},
}

// TestFormatterMatchesMiddleware checks that Formatter writes exactly the
// fields Middleware sends for the same decision, in every header style,
// and that they parse as structured-field Lists.
func TestFormatterMatchesMiddleware(t *testing.T) {
	styles := []httplimit.HeaderStyle{
		httplimit.IETFHeaders,
		httplimit.IETFHeaders | httplimit.LegacyDraftHeaders,
		httplimit.LegacyDraftHeaders,
		0,
	}
	for name, res := range formatterResults {
		for _, style := range styles {
			opts := []httplimit.Option{httplimit.WithHeaders(style), httplimit.WithUnavailableRetryAfter(3 * time.Second)}
			mw := httplimit.Middleware(httplimit.ByFunc(func(_ *http.Request, _ int64, q []httplimit.Quota) ([]httplimit.Quota, bool, error) {
				return append(q, res.Quotas...), res.Allowed, res.Err
			}), append(opts, httplimit.WithCost(func(*http.Request) int64 { return res.Cost }),
				httplimit.WithDenyHandler(func(http.ResponseWriter, *http.Request, httplimit.Result) {}))...)
			rec := httptest.NewRecorder()
			mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			want := rec.Header()

			f := httplimit.NewFormatter(opts...)
			for range 2 { // the second call runs on the cached policy items
				got := http.Header{}
				for _, fl := range f.AppendFields(nil, &res) {
					if _, dup := got[fl.Name]; dup {
						t.Errorf("%s, style %d: field %s written twice", name, style, fl.Name)
					}
					got[fl.Name] = append(got[fl.Name], fl.Value)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s, style %d:\nformatter  %v\nmiddleware %v", name, style, got, want)
				}
				for _, list := range []string{"Ratelimit", "Ratelimit-Policy"} {
					if v := got.Values(list); len(v) > 0 {
						if _, err := httpsfv.UnmarshalList(v); err != nil {
							t.Errorf("%s: %s %q: %v", name, list, v, err)
						}
					}
				}
			}
		}
	}
}

// TestFormatterFields pins the fields of a three-rule denial: one line
// per field, an item per rule in order, r with the untaken cost back.
func TestFormatterFields(t *testing.T) {
	res := formatterResults["three, one denies"]
	got := httplimit.NewFormatter().AppendFields(nil, &res)
	want := []httplimit.Field{
		{Name: "Ratelimit-Policy", Value: `"per-ip";q=10;w=1, "we\"ird";q=5;w=60, "global";q=1000;w=1`},
		{Name: "Ratelimit", Value: `"per-ip";r=9;t=3, "we\"ird";r=0;t=3, "global";r=902;t=1`},
		{Name: "Retry-After", Value: "3"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fields\n%v\nwant\n%v", got, want)
	}
}

// TestFormatterAllocations enforces the cost of formatting a three-rule
// answer into a reused slice: the RateLimit line only (each rule's policy
// item, and their joined line, are cached).
func TestFormatterAllocations(t *testing.T) {
	res := formatterResults["three, one denies"]
	f := httplimit.NewFormatter()
	dst := f.AppendFields(nil, &res)
	allocs := testing.AllocsPerRun(1000, func() {
		dst = f.AppendFields(dst[:0], &res)
	})
	if allocs > 1 {
		t.Errorf("%.1f allocations per three-rule answer, want at most 1", allocs)
	}
}

// TestFormatterConcurrentRuleSets formats answers of three, two and one
// rules from many goroutines: the cached joined policy line
// changes hands all the time, and every answer must still name its own
// rules.
func TestFormatterConcurrentRuleSets(t *testing.T) {
	f := httplimit.NewFormatter()
	names := []string{"three, one denies", "two admitted", "one admitted"}
	want := map[string][]httplimit.Field{}
	for _, name := range names {
		res := formatterResults[name]
		want[name] = httplimit.NewFormatter().AppendFields(nil, &res)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var dst []httplimit.Field
			for i := range 500 {
				name := names[(g+i)%len(names)]
				res := formatterResults[name]
				dst = f.AppendFields(dst[:0], &res)
				if fmt.Sprint(dst) != fmt.Sprint(want[name]) {
					t.Errorf("%s: %v, want %v", name, dst, want[name])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestMiddlewareAllocationsThreeRules enforces the middleware's own cost
// of the fields of three rules (decided by a func, so no store counts):
// the RateLimit line and its one-element slice. The RateLimit-Policy line
// is shared between responses meeting the same rules.
func TestMiddlewareAllocationsThreeRules(t *testing.T) {
	quotas := slices.Clone(formatterResults["three, one denies"].Quotas)
	for i := range quotas {
		quotas[i].Decision.Allowed = true
	}
	h := httplimit.Middleware(httplimit.ByFunc(func(_ *http.Request, _ int64, q []httplimit.Quota) ([]httplimit.Quota, bool, error) {
		return append(q, quotas...), true, nil
	}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	w := &reusedWriter{h: http.Header{}}
	h.ServeHTTP(w, req) // cache the policy items and their line
	allocs := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if got := w.h.Get("RateLimit-Policy"); strings.Count(got, ";q=") != 3 {
		t.Fatalf("RateLimit-Policy %q, want 3 items", got)
	}
	if allocs > 2 {
		t.Errorf("%.1f allocations per allowed three-rule request, want at most 2", allocs)
	}
}

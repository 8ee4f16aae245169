package httplimit

import (
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice"
)

// rateLimitItemSFV builds the RateLimit item wholly with httpsfv: the
// reference the hot path's hand-appended parameters are checked against
// and measured against.
func rateLimitItemSFV(name string, q *Quota) string {
	item := httpsfv.NewItem(name)
	item.Params.Add("r", available(q, 0))
	item.Params.Add("t", windowSeconds(q))
	s, err := httpsfv.Marshal(httpsfv.List{item})
	if err != nil {
		panic(err)
	}
	return s
}

var testQuotas = []Quota{
	{Policy: "api", Decision: sluice.Decision{Allowed: true, Remaining: 41, ResetAfter: 1500 * time.Millisecond, Limit: sluice.PerMinute(60)}},
	{Policy: `we"ird\name`, Decision: sluice.Decision{Allowed: false, Remaining: 0, RetryAfter: 1, Limit: sluice.PerSecond(5)}},
	{Policy: "never", Decision: sluice.Decision{Allowed: false, Remaining: 3, RetryAfter: sluice.Never, ResetAfter: time.Hour, Limit: sluice.PerHour(3)}},
}

func TestRateLimitItemMatchesHTTPSFV(t *testing.T) {
	for i := range testQuotas {
		q := &testQuotas[i]
		rf := newRuleFields(q.Policy, q.Decision.Limit)
		if got, want := rateLimitItem(rf, q, 0, false), rateLimitItemSFV(q.Policy, q); got != want {
			t.Errorf("item %q, httpsfv writes %q", got, want)
		}
	}
}

func TestQuotaWindow(t *testing.T) {
	cases := []struct {
		l    sluice.Limit
		q, w int64
	}{
		{sluice.PerMinute(60), 60, 60},
		{sluice.PerSecond(5).WithBurst(10), 10, 2},
		{sluice.Limit{Count: 5000, Period: time.Second, Burst: 1}, 5000, 1}, // sub-second window: a second's worth
		{sluice.Limit{Count: 2, Period: time.Second, Burst: 5}, 6, 3},       // 2.5 s rounds up to 3: burst + 0.5 s of refill
		{sluice.PerHour(1), 1, 3600},
	}
	for _, c := range cases {
		if q, w := quotaWindow(c.l); q != c.q || w != c.w {
			t.Errorf("%s: q=%d w=%d, want q=%d w=%d", c.l, q, w, c.q, c.w)
		}
	}
}

// BenchmarkRateLimitItem compares the RateLimit item as the middleware
// writes it (name serialised once by httpsfv, integers appended) with
// httpsfv doing all of it per response.
func BenchmarkRateLimitItem(b *testing.B) {
	q := &testQuotas[0]
	b.Run("impl=cached-name", func(b *testing.B) {
		rf := newRuleFields(q.Policy, q.Decision.Limit)
		b.ReportAllocs()
		for b.Loop() {
			_ = rateLimitItem(rf, q, 0, false)
		}
	})
	b.Run("impl=httpsfv", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = rateLimitItemSFV(q.Policy, q)
		}
	})
}

package models_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/models"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// t0 is a whole second, so window boundaries fall on round offsets.
const t0 = int64(1_800_000_000) * int64(time.Second)

type call struct {
	at   time.Duration // offset from t0
	cost int64
	want models.Result
}

// TestHandComputed checks each model on sequences worked out by hand from
// the algorithms' documented semantics.
func TestHandComputed(t *testing.T) {
	perSec := ratelimit.Limit{Count: 10, Period: time.Second, Burst: 10}
	ms := time.Millisecond
	never := ratelimit.Never
	for _, tc := range []struct {
		model models.Model
		limit ratelimit.Limit
		calls []call
	}{
		{models.TokenBucket{}, perSec, []call{
			{0, 10, models.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
			{0, 0, models.Result{Remaining: 0, RetryAfter: 100 * ms, ResetAfter: time.Second}},
			{250 * ms, 3, models.Result{Remaining: 2, RetryAfter: 50 * ms, ResetAfter: 750 * ms}},
			{300 * ms, 3, models.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
			{200 * ms, 1, models.Result{Remaining: 0, RetryAfter: 200 * ms, ResetAfter: 1100 * ms}}, // clock back: evaluated at +300ms
			{300 * ms, 11, models.Result{Remaining: 0, RetryAfter: never, ResetAfter: time.Second}},
		}},
		{models.GCRA{}, perSec, []call{
			{0, 10, models.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
			{300 * ms, 3, models.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
			{200 * ms, 1, models.Result{Remaining: 0, RetryAfter: 200 * ms, ResetAfter: 1100 * ms}}, // clock back: 1 token in debt
		}},
		{models.LeakyBucket{}, perSec, []call{
			{0, 4, models.Result{Allowed: true, Remaining: 6, ResetAfter: 400 * ms}},
			{100 * ms, 7, models.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
			{150 * ms, 1, models.Result{Remaining: 0, RetryAfter: 50 * ms, ResetAfter: 950 * ms}},
		}},
		{models.FixedWindow{}, ratelimit.Limit{Count: 3, Period: time.Second, Burst: 3}, []call{
			{100 * ms, 3, models.Result{Allowed: true, Remaining: 0, ResetAfter: 900 * ms}},
			{400 * ms, 1, models.Result{Remaining: 0, RetryAfter: 600 * ms, ResetAfter: 600 * ms}},
			{time.Second, 2, models.Result{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
			{900 * ms, 1, models.Result{Allowed: true, Remaining: 0, ResetAfter: 1100 * ms}}, // clock back into the old window: treated as the new one's start
		}},
		{models.SlidingWindow{}, ratelimit.Limit{Count: 4, Period: time.Second, Burst: 4}, []call{
			{500 * ms, 4, models.Result{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
			// At +1.5s the previous window's 4 weigh ceil(4·0.5) = 2.
			{1500 * ms, 2, models.Result{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
			// One more unit fits once the weight of 4 drops to 1: ceil(4·(1−el)) <= 1 at el >= 0.75.
			{1500 * ms, 1, models.Result{Remaining: 0, RetryAfter: 250 * ms, ResetAfter: 1500 * ms}},
		}},
		{models.SlidingLog{}, ratelimit.Limit{Count: 3, Period: time.Second, Burst: 3}, []call{
			{0, 1, models.Result{Allowed: true, Remaining: 2, ResetAfter: time.Second}},
			{200 * ms, 2, models.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
			{500 * ms, 2, models.Result{Remaining: 0, RetryAfter: 700 * ms, ResetAfter: 700 * ms}},
			{time.Second, 1, models.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		}},
		// Burst ≠ Count: one window of Burst·Period/Count = 2s admits Burst 4.
		{models.FixedWindow{}, ratelimit.Limit{Count: 2, Period: time.Second, Burst: 4}, []call{
			{0, 4, models.Result{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
			{time.Second, 1, models.Result{Remaining: 0, RetryAfter: time.Second, ResetAfter: time.Second}},
			{2 * time.Second, 4, models.Result{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
		}},
		{models.SlidingLog{}, ratelimit.Limit{Count: 2, Period: time.Second, Burst: 4}, []call{
			{0, 3, models.Result{Allowed: true, Remaining: 1, ResetAfter: 2 * time.Second}},
			{1500 * ms, 1, models.Result{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
			{1900 * ms, 1, models.Result{Remaining: 0, RetryAfter: 100 * ms, ResetAfter: 1600 * ms}},
		}},
	} {
		t.Run(tc.model.Algorithm(), func(t *testing.T) {
			key := tc.model.New(tc.limit)
			for i, c := range tc.calls {
				if got := key.Decide(t0+int64(c.at), c.cost); got != c.want {
					t.Fatalf("call %d (cost %d at +%s): %+v, want %+v", i, c.cost, c.at, got, c.want)
				}
			}
		})
	}
}

// TestFor finds a model for every name All lists.
func TestFor(t *testing.T) {
	for _, m := range models.All() {
		if got, ok := models.For(m.Algorithm()); !ok || got.Algorithm() != m.Algorithm() {
			t.Errorf("For(%q) = %v, %t", m.Algorithm(), got, ok)
		}
	}
	if _, ok := models.For("no-such-algorithm"); ok {
		t.Error("For found a model for an unknown name")
	}
}

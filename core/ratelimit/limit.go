package ratelimit

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/internal/muldiv"
)

// Bounds enforced by [Limit.Validate] and by the stores. They keep every
// intermediate product of the in-repo algorithms inside 128-bit integer
// arithmetic and every result inside int64.
const (
	// MaxCount is the largest Count and Burst a Limit may have.
	MaxCount = 1 << 40
	// MaxPeriod is the longest Period a Limit may have (about 10 years).
	MaxPeriod = 10 * 365 * 24 * time.Hour
	// MaxCost is the largest cost of one call; it equals MaxCount.
	MaxCost = MaxCount
	// MaxKeyLen is the longest key, in bytes, a store must accept. Longer
	// keys are refused with ErrInvalidKey. Keys are opaque bytes: any
	// byte, including NUL, CR, LF, quotes and invalid UTF-8, is data.
	MaxKeyLen = 1024
	// MaxWindowSpan bounds Burst·Period/Count: how long a bucket takes to
	// refill from empty. It keeps reset times inside int64 nanoseconds.
	MaxWindowSpan = 100 * 365 * 24 * time.Hour
)

// Never is the RetryAfter of a decision that can never pass: the cost is
// larger than the burst.
const Never = time.Duration(1<<63 - 1)

// Limit is an integer rate: Count events per Period, with up to Burst
// events admitted at once. The zero value is invalid.
//
// Count, Period and Burst are integers so that Go, Lua and SQL compute
// bit-identical results; rounding, where an algorithm needs it, is stated
// in that algorithm's documentation and never lets the long-run rate exceed
// Count per Period.
type Limit struct {
	// Count is the number of events replenished per Period, 1..MaxCount.
	Count int64
	// Period is the time over which Count events replenish, 1ns..MaxPeriod.
	Period time.Duration
	// Burst is the number of events that may be admitted at once, 1..MaxCount.
	// Algorithms with windows (fixed and sliding window, sliding log)
	// admit Burst events per window of Burst·Period/Count.
	Burst int64
}

// Every returns a Limit of count events per period with a burst of count.
func Every(period time.Duration, count int64) Limit {
	return Limit{Count: count, Period: period, Burst: count}
}

// PerSecond returns a Limit of n events per second with a burst of n.
func PerSecond(n int64) Limit { return Every(time.Second, n) }

// PerMinute returns a Limit of n events per minute with a burst of n.
func PerMinute(n int64) Limit { return Every(time.Minute, n) }

// PerHour returns a Limit of n events per hour with a burst of n.
func PerHour(n int64) Limit { return Every(time.Hour, n) }

// Unlimited returns the Limit that admits everything. A Limiter answers
// for it without touching its store; stores refuse it (Validate reports
// ErrInvalidLimit), so it never reaches an Algorithm.
func Unlimited() Limit { return Limit{Count: math.MaxInt64, Period: 1, Burst: math.MaxInt64} }

// IsUnlimited reports whether l is the Limit returned by Unlimited (any
// Limit whose Count is the largest int64).
func (l Limit) IsUnlimited() bool { return l.Count == math.MaxInt64 }

// WithBurst returns a copy of l with its Burst set to b.
func (l Limit) WithBurst(b int64) Limit {
	l.Burst = b
	return l
}

// Validate reports whether l can be used, wrapping ErrInvalidLimit when it
// cannot: Count and Burst must be in 1..MaxCount, Period in 1ns..MaxPeriod,
// and the time to refill Burst from empty must not exceed MaxWindowSpan.
func (l Limit) Validate() error {
	switch {
	case l.Count < 1 || l.Count > MaxCount:
		return fmt.Errorf("%w: count %d outside 1..%d", ErrInvalidLimit, l.Count, int64(MaxCount))
	case l.Period < 1 || l.Period > MaxPeriod:
		return fmt.Errorf("%w: period %d ns outside 1ns..%s", ErrInvalidLimit, int64(l.Period), MaxPeriod)
	case l.Burst < 1 || l.Burst > MaxCount:
		return fmt.Errorf("%w: burst %d outside 1..%d", ErrInvalidLimit, l.Burst, int64(MaxCount))
	}
	// FillTime = ceil(Burst·Period/Count) > MaxWindowSpan exactly when
	// Burst·Period > MaxWindowSpan·Count; compare 128-bit products so the
	// hot path (stores validate every check) never divides.
	bh, bl := bits.Mul64(uint64(l.Burst), uint64(l.Period))
	mh, ml := bits.Mul64(uint64(MaxWindowSpan), uint64(l.Count))
	if bh > mh || (bh == mh && bl > ml) {
		return fmt.Errorf("%w: refilling burst %d at %d per %s takes longer than %s", ErrInvalidLimit, l.Burst, l.Count, l.Period, MaxWindowSpan)
	}
	return nil
}

// FillTime returns how long l takes to replenish Burst events from empty,
// Burst·Period/Count rounded up to a whole nanosecond. It saturates at
// Never instead of overflowing. The result is meaningful only for a Limit
// whose fields are positive.
func (l Limit) FillTime() time.Duration {
	if l.Count <= 0 || l.Period <= 0 || l.Burst <= 0 {
		return 0
	}
	return time.Duration(muldiv.Ceil(l.Burst, int64(l.Period), l.Count))
}

// String returns a compact form such as "10/1s burst 20".
func (l Limit) String() string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return fmt.Sprintf("%d/%s burst %d", l.Count, l.Period, l.Burst)
}

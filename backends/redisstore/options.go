package redisstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Defaults of the options.
const (
	// DefaultPrefix is the key prefix used when WithPrefix is not given.
	// It is short because every byte of it is stored in every key.
	DefaultPrefix = "rl:"
	// DefaultTTLMargin is added to every state's TTL (see WithTTLMargin).
	DefaultTTLMargin = time.Second
	// DefaultCASAttempts is how many compare-and-set rounds the generic
	// path tries before giving up with ErrContention: enough for 64
	// processes contending on one key (the store's own callers take turns
	// and never conflict).
	DefaultCASAttempts = 1000
	// maxPrefixLen bounds the key prefix, in bytes.
	maxPrefixLen = 256
)

// Option configures a Store. Options are applied in order by New, which
// validates them and returns an error wrapping ratelimit.ErrInvalidOption
// for a bad value.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	prefix          string
	tag             TagFunc
	ttlMargin       time.Duration
	casAttempts     int
	native          bool
	coalesce        bool
	checkClient     bool
	checkEviction   bool
	logf            func(format string, args ...any)
	clock           ratelimit.Clock
	evictionTimeout time.Duration
	// autoPipeline makes New build an asynchronous autopipeliner on the
	// client (see WithAutoPipeline); apOptions are its options.
	autoPipeline bool
	apOptions    *redis.AutoPipelineOptions
	// apAlways sends even a lone command through the autopipeliner
	// (tests of the autopipelined path only).
	apAlways bool
	// tagMode is how keys carry a hash tag (see WithHashTag and
	// WithoutHashTag).
	tagMode tagMode
}

// tagMode chooses whether keys carry a hash tag.
type tagMode uint8

const (
	// tagAuto tags keys unless the client is a single server.
	tagAuto tagMode = iota
	// tagAlways tags keys whatever the client (WithHashTag).
	tagAlways
	// tagNever never tags keys (WithoutHashTag).
	tagNever
)

func defaultConfig() config {
	return config{
		prefix:          DefaultPrefix,
		tag:             DefaultTag,
		ttlMargin:       DefaultTTLMargin,
		casAttempts:     DefaultCASAttempts,
		native:          true,
		coalesce:        true,
		checkClient:     true,
		evictionTimeout: time.Second,
	}
}

// WithPrefix sets the prefix of every Redis key the store writes; the
// default is DefaultPrefix. It may be empty, must be at most 256 bytes and
// must not contain '{' or '}' (they would change the Cluster hash slot).
// Give every application sharing a Redis its own prefix; an ACL user limited
// to the pattern prefix* is enough for the store.
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if len(prefix) > maxPrefixLen {
			return fmt.Errorf("%w: redisstore: prefix of %d bytes is longer than %d", ratelimit.ErrInvalidOption, len(prefix), maxPrefixLen)
		}
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("%w: redisstore: prefix %q contains a brace", ratelimit.ErrInvalidOption, prefix)
		}
		c.prefix = prefix
		return nil
	})
}

// WithHashTag sets the function choosing each check's hash tag source; the
// default is DefaultTag. Checks whose sources are equal share a Redis
// Cluster slot (and a Ring shard), which a composite (ApplyAll) needs on a
// ClusterClient or a Ring. The source is hashed into a fixed 3-character
// tag, so it may hold any bytes.
//
// Without this option, keys of a store on a single server (a
// *redis.Client, or WithAutoPipeline on one) carry no tag at all; with it
// they always do, on every client, so a deployment that plans to move from
// one server to a Cluster can keep its keys (and limits) across the move.
// It cannot be combined with WithoutHashTag.
func WithHashTag(f TagFunc) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: redisstore: nil hash tag function", ratelimit.ErrInvalidOption)
		}
		if c.tagMode == tagNever {
			return fmt.Errorf("%w: redisstore: WithHashTag and WithoutHashTag together", ratelimit.ErrInvalidOption)
		}
		c.tag = f
		c.tagMode = tagAlways
		return nil
	})
}

// WithoutHashTag makes the store write keys without a hash tag (6 bytes
// shorter, which Redis stores in every key) on a client it cannot identify
// as a single server, such as an autopipeliner passed to New or a wrapper.
// The store already leaves the tag out on a *redis.Client. Use it only when
// every key lives on one server: New refuses it (ratelimit.ErrInvalidOption)
// for a *redis.ClusterClient or a *redis.Ring, and with an unknown client a
// composite is then sent as is, so a Cluster behind it would answer
// CROSSSLOT (reported as ErrCrossSlot). It cannot be combined with
// WithHashTag.
func WithoutHashTag() Option {
	return optionFunc(func(c *config) error {
		if c.tagMode == tagAlways {
			return fmt.Errorf("%w: redisstore: WithHashTag and WithoutHashTag together", ratelimit.ErrInvalidOption)
		}
		c.tagMode = tagNever
		return nil
	})
}

// WithAutoPipeline makes the store send its scripts through the client's
// asynchronous autopipeliner (go-redis's AsyncAutoPipelineWithOptions),
// which coalesces the scripts of concurrent calls into pipelines: fewer
// system calls on both sides of the connection, so more decisions per
// second under many concurrent callers. opts nil selects the client's
// Options.AutoPipelineOptions when set, else full duplex (one held
// connection per server with a writer and a reader goroutine, at most
// apWindow scripts written but unanswered). A call made while 2 to
// apMinInFlight calls of the store (itself included) are under way goes to
// the client directly instead, where batching gains nothing, as does a
// lone call under half duplex. The client must be a *redis.Client or a
// *redis.ClusterClient (New refuses others with
// ratelimit.ErrInvalidOption). go-redis caches one autopipeliner per
// client and the first caller's options win; stores on one client share
// it, and the last of them to close closes it (see Store.Close). go-redis
// marks the API experimental; docs/redis.md has the measurements.
//
// Each call still waits for its own reply and runs its script at most
// once: the store's commands are no-retry, and go-redis never replays a
// pipeline holding one. The difference is at the deadline: the
// autopipeliner sends a queued command on its own context, so a call whose
// context ends first returns at once with ratelimit.ErrUnknownOutcome (the
// script may still run, up to the client's ReadTimeout later) where a plain
// client would say ratelimit.ErrUnavailable for a call that never got a
// connection. A stalled server delays every queued call, not only those
// holding a connection. Keep the client's ReadTimeout short. Under full
// duplex, process hooks that return without calling next do not stop the
// write (go-redis documents this); hooks that observe are unaffected.
func WithAutoPipeline(opts *redis.AutoPipelineOptions) Option {
	return optionFunc(func(c *config) error {
		if opts != nil {
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("%w: redisstore: %w", ratelimit.ErrInvalidOption, err)
			}
		}
		c.autoPipeline = true
		c.apOptions = opts
		return nil
	})
}

// apWindow is the full-duplex window of defaultAPOptions: scripts written
// but not yet answered on one connection before submitters wait. At
// 100,000 decisions per second it covers a 10 ms round trip, and it bounds
// how many calls a stalled server holds.
const apWindow = 1024

// defaultAPOptions returns the autopipeliner options WithAutoPipeline(nil)
// uses on a client without its own: go-redis's defaults in full duplex,
// which matched or beat half duplex at every concurrency measured.
func defaultAPOptions() *redis.AutoPipelineOptions {
	o := redis.DefaultAutoPipelineOptions()
	o.FullDuplex = true
	o.FullDuplexWindow = apWindow
	return o
}

// WithTTLMargin sets how long, beyond the TTL the algorithm reports, Redis
// keeps a state (PEXPIRE = TTL rounded up to a millisecond + margin); the
// default is DefaultTTLMargin. Expiry at the algorithm's TTL changes nothing
// by contract; the margin absorbs clock differences after a failover to a
// replica. It must be between 0 and one hour.
func WithTTLMargin(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 || d > time.Hour {
			return fmt.Errorf("%w: redisstore: TTL margin %s outside 0..1h", ratelimit.ErrInvalidOption, d)
		}
		c.ttlMargin = d
		return nil
	})
}

// WithCASAttempts sets how many compare-and-set rounds the generic path
// (algorithms without a Lua program) makes under contention before
// returning ErrContention; the default is DefaultCASAttempts. It must be
// between 1 and 1000.
func WithCASAttempts(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("%w: redisstore: %d CAS attempts outside 1..1000", ratelimit.ErrInvalidOption, n)
		}
		c.casAttempts = n
		return nil
	})
}

// WithoutCoalescing sends every call as a script invocation of its own
// (the plain path) instead of batching concurrent calls (see the package
// documentation). Both paths decide identically and report the same
// errors; coalescing gives more throughput under concurrency.
func WithoutCoalescing() Option {
	return optionFunc(func(c *config) error {
		c.coalesce = false
		return nil
	})
}

// withoutNativeScripts makes the store use the generic path (read, decide
// in Go, compare-and-set) for every algorithm, so tests and benchmarks can
// compare it with the native scripts.
func withoutNativeScripts() Option {
	return optionFunc(func(c *config) error {
		c.native = false
		return nil
	})
}

// WithoutClientCheck disables New's refusal of a go-redis client whose
// options do not set ContextTimeoutEnabled. Without that setting go-redis
// ignores context deadlines on the socket, so calls can outlast their
// deadline; use this option only when the client is wrapped by something
// that enforces deadlines itself.
func WithoutClientCheck() Option {
	return optionFunc(func(c *config) error {
		c.checkClient = false
		return nil
	})
}

// WithEvictionCheck makes New read maxmemory-policy with CONFIG GET and
// report through logf when the policy may evict limiter keys (any policy
// but noeviction: an evicted state comes back full, a free burst). The
// check is best effort: when CONFIG is denied (ACL, managed services) or
// fails, logf is told and New still succeeds. New calls logf synchronously,
// at most once; nil selects log.Printf. The check waits at most one second.
func WithEvictionCheck(logf func(format string, args ...any)) Option {
	return optionFunc(func(c *config) error {
		c.checkEviction = true
		c.logf = logf
		return nil
	})
}

// withTestClock makes the store take "now" from clock instead of the Redis
// server's TIME: the native scripts receive it as arguments and the
// generic path decides with it. Tests use it to compare outcomes at fixed
// instants; in production the server's single clock is what keeps several
// processes consistent. Redis still expires keys on its own clock.
func withTestClock(clock ratelimit.Clock) Option {
	return optionFunc(func(c *config) error {
		if clock == nil {
			return fmt.Errorf("%w: redisstore: nil clock", ratelimit.ErrInvalidOption)
		}
		c.clock = clock
		return nil
	})
}

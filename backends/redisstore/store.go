package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/redisslot"
)

// Client is the part of a go-redis client the store uses: *redis.Client,
// *redis.ClusterClient, *redis.Ring, *redis.AutoPipeliner and
// redis.UniversalClient implement it. The store sends every script through
// Process as a command marked no-retry, so go-redis never resends a script
// whose reply was lost; an asynchronous *redis.AutoPipeliner receives it
// through Submit instead (see WithAutoPipeline).
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

type clientKind uint8

const (
	kindOther clientKind = iota
	kindSingle
	kindCluster
	kindRing
)

// Store is a ratelimit.Store on Redis or Redis Cluster. Each state is one
// Redis string holding the algorithm's encoding, with a PEXPIRE of the TTL
// the algorithm reports plus a margin.
//
// Apply and ApplyAll run one Lua script per call for algorithms with a
// native program (see the package documentation) and, for any other
// algorithm, read the states with one script, decide in Go and write them
// back with a compare-and-set script.
//
// A Store is safe for concurrent use. It does not own the client: Close
// marks the store closed and leaves the client open. Create one with New;
// the zero value is not usable.
type Store struct {
	// client receives every command; base is the client given to New,
	// which answers EvictionPolicies. They differ under WithAutoPipeline.
	client, base Client
	// ap is client when it is an asynchronous autopipeliner: commands go
	// through Submit and the wait ends with the caller's context.
	ap *redis.AutoPipeliner
	// ownsAP is set when New obtained ap for WithAutoPipeline: Close
	// releases it.
	ownsAP bool
	// apMin is how many of the store's commands may be in flight, the new
	// one included, while they still go to base directly (see do):
	// apMinInFlight, or 0 under apAlways. apLone sends a lone command (one
	// in flight) through a full-duplex autopipeliner all the same.
	// inFlight counts the commands under way when apMin is not 0.
	apMin    int64
	apLone   bool
	inFlight atomic.Int64
	kind     clientKind
	tagged   bool
	cfg      config
	closed   atomic.Bool
	// Counters of native.lua calls and of those that fell back to the
	// generic path, read by tests.
	nativeCalls, nativeFallbacks atomic.Int64
	// headArgs holds native.lua's first argument without a test clock for
	// every mask of algorithm codes (see headArg).
	headArgs [1 << (numCodes - 1)]any
	// argsCache maps an argsKey to native.lua's argument for it;
	// argsCached counts its entries.
	argsCache  sync.Map
	argsCached atomic.Int64
	// turns serializes the store's generic-path calls per key.
	turns keyTurns
	// routes holds the coalescer's batchers (see coalesce.go); batches
	// and batchedCalls count the batches it sent and the calls in them,
	// read by tests.
	routes                routes
	batches, batchedCalls atomic.Int64
}

// New returns a Store sending its scripts through client.
//
// Configure the client with ContextTimeoutEnabled: true, so context
// deadlines bound every socket read and write; New refuses a
// *redis.Client, *redis.ClusterClient or *redis.Ring without it (wrapping
// ratelimit.ErrInvalidOption) unless WithoutClientCheck is given. go-redis
// retries (MaxRetries, MaxRedirects) do not apply to the store's scripts,
// which are marked no-retry; MaxRetries: -1 is still recommended for a
// client dedicated to the limiter.
//
// A *redis.AutoPipeliner is accepted when it is asynchronous (from
// AsyncAutoPipeline): the store submits each command and waits for its
// reply or the end of the call's context. Every call then goes through
// it, so a lone caller pays its hand-offs between goroutines; prefer
// WithAutoPipeline, which sends the calls of few concurrent callers
// directly and knows which key layout the client needs.
// New refuses a blocking autopipeliner (from AutoPipeline), whose Process
// waits for the reply whatever the context, unless WithoutClientCheck is
// given.
//
// New sends nothing to Redis unless WithEvictionCheck is given.
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil || isNilPointer(client) {
		return nil, fmt.Errorf("%w: redisstore: nil client", ratelimit.ErrInvalidOption)
	}
	s := &Store{client: client, base: client, cfg: defaultConfig()}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redisstore: nil option", ratelimit.ErrInvalidOption)
		}
		if err := o.apply(&s.cfg); err != nil {
			return nil, err
		}
	}
	for m := range s.headArgs {
		s.headArgs[m] = string(s.appendHead(nil, -1, 0, uint(m)))
	}
	ctxTimeouts := true
	switch c := client.(type) {
	case *redis.Client:
		s.kind, ctxTimeouts = kindSingle, c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.kind, ctxTimeouts = kindCluster, c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		s.kind, ctxTimeouts = kindRing, c.Options().ContextTimeoutEnabled
	case *redis.AutoPipeliner:
		s.kind, ctxTimeouts = kindOther, !c.IsBlocking()
		if !c.IsBlocking() {
			s.ap = c
		}
	default:
		s.kind = kindOther
	}
	if s.cfg.checkClient && !ctxTimeouts {
		if _, ok := client.(*redis.AutoPipeliner); ok {
			return nil, fmt.Errorf("%w: redisstore: a blocking AutoPipeliner waits for every reply whatever the context's deadline; pass client.AsyncAutoPipeline() or use WithAutoPipeline (see WithoutClientCheck)", ratelimit.ErrInvalidOption)
		}
		return nil, fmt.Errorf("%w: redisstore: the go-redis client must set ContextTimeoutEnabled: true, or calls can outlast their context deadline (see WithoutClientCheck)", ratelimit.ErrInvalidOption)
	}
	if s.kind == kindCluster {
		s.routes.slots = make([]atomic.Pointer[batcher], 16384)
	}
	switch s.cfg.tagMode {
	case tagAuto:
		s.tagged = s.kind != kindSingle
	case tagAlways:
		s.tagged = true
	case tagNever:
		if s.kind == kindCluster || s.kind == kindRing {
			return nil, fmt.Errorf("%w: redisstore: WithoutHashTag on a ClusterClient or a Ring", ratelimit.ErrInvalidOption)
		}
	}
	if s.cfg.autoPipeline {
		opts := apOptions(client, s.cfg.apOptions)
		ap, err := acquireAutoPipeliner(client, opts)
		if err != nil {
			return nil, err
		}
		s.client, s.ap, s.ownsAP = ap, ap, true
		s.apMin, s.apLone = apMinInFlight, opts.FullDuplex
		if s.cfg.apAlways {
			s.apMin = 0
		}
	}
	if s.cfg.checkEviction {
		logf := s.cfg.logf
		if logf == nil {
			logf = log.Printf
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.evictionTimeout)
		policies, err := s.EvictionPolicies(ctx)
		cancel()
		switch {
		case err != nil:
			logf("redisstore: could not read maxmemory-policy (limiter keys may be evicted unnoticed): %v", err)
		default:
			for _, p := range policies {
				if p != "noeviction" {
					logf("redisstore: maxmemory-policy is %q: Redis may evict limiter keys, and an evicted key comes back with its full burst; use noeviction for limiter state", p)
					break
				}
			}
		}
	}
	return s, nil
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// EvictionPolicies returns the maxmemory-policy of every server the client
// writes to (each master of a Cluster, each shard of a Ring), read with
// CONFIG GET. Any policy but "noeviction" may evict limiter keys. The
// error is the client's (for example NOPERM when an ACL denies CONFIG),
// unclassified.
func (s *Store) EvictionPolicies(ctx context.Context) ([]string, error) {
	if s.closed.Load() {
		return nil, ratelimit.ErrClosed
	}
	var (
		mu  sync.Mutex
		out []string
	)
	get := func(ctx context.Context, c *redis.Client) error {
		v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		out = append(out, v["maxmemory-policy"])
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.base.(type) {
	case *redis.Client:
		err = get(ctx, c)
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, get)
	case *redis.Ring:
		err = c.ForEachShard(ctx, get)
	default:
		cmd := redis.NewMapStringStringCmd(ctx, "config", "get", "maxmemory-policy")
		if s.ap != nil {
			// An asynchronous AutoPipeliner passed to New: wait for the
			// reply no longer than ctx.
			err = s.ap.Submit(ctx, cmd).WaitContext(ctx)
		} else {
			err = s.base.Process(ctx, cmd)
		}
		if err == nil {
			out = append(out, cmd.Val()["maxmemory-policy"])
		}
	}
	if err != nil {
		return out, fmt.Errorf("redisstore: CONFIG GET maxmemory-policy: %w", err)
	}
	return out, nil
}

func (s *Store) begin(ctx context.Context) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: redisstore: %w", ratelimit.ErrUnavailable, err)
	}
	return nil
}

// Apply applies c atomically with one script call for an algorithm with a
// native program, or with the generic read / compare-and-set path
// otherwise. Errors wrap the ratelimit sentinels: invalid input (nothing
// sent), ErrUnavailable (certainly not applied), ErrUnknownOutcome (sent,
// no reply: may have been applied), ErrCorruptState, ErrUnsupported,
// ErrClosed. Denial is not an error.
func (s *Store) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	return s.ApplyBefore(ctx, time.Time{}, c)
}

// ApplyBefore is Apply bounded by deadline as well as by ctx
// (ratelimit.DeadlineApplier; zero for none): a call the coalescer
// batches needs no context of its own for it.
func (s *Store) ApplyBefore(ctx context.Context, deadline time.Time, c ratelimit.Check) (ratelimit.Outcome, error) {
	if err := s.begin(ctx); err != nil {
		return ratelimit.Outcome{}, err
	}
	if err := c.Validate(); err != nil {
		return ratelimit.Outcome{}, err
	}
	var out [1]ratelimit.Outcome
	checks := [1]ratelimit.Check{c}
	if _, err := s.apply(ctx, deadline, checks[:], out[:]); err != nil {
		return ratelimit.Outcome{}, err
	}
	return out[0], nil
}

// ApplyAll applies checks as one atomic step, all or nothing, in one
// script call when every algorithm has a native program. On a
// ClusterClient every key must hash to one slot, and on a Ring every check
// must have the same hash tag (see WithHashTag); otherwise ApplyAll sends
// nothing and returns an error wrapping ErrCrossSlot. Other errors
// are those of Apply.
func (s *Store) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	return s.ApplyAllBefore(ctx, time.Time{}, checks, out)
}

// ApplyAllBefore is ApplyAll bounded by deadline as well as by ctx (see
// ApplyBefore).
func (s *Store) ApplyAllBefore(ctx context.Context, deadline time.Time, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	if len(out) < len(checks) {
		return false, fmt.Errorf("%w: redisstore: %d outcomes for %d checks", ratelimit.ErrInvalidOption, len(out), len(checks))
	}
	if len(checks) == 0 {
		return true, nil
	}
	for i := range checks {
		if err := checks[i].Validate(); err != nil {
			return false, fmt.Errorf("check %d: %w", i, err)
		}
	}
	return s.apply(ctx, deadline, checks, out[:len(checks)])
}

// apply runs validated checks on the native path when it covers all of
// them, else on the generic path, by deadline (none when zero).
func (s *Store) apply(ctx context.Context, deadline time.Time, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	keys, err := s.keys(checks)
	if err != nil {
		return false, err
	}
	if s.cfg.native && nativeCovers(checks) {
		return s.applyNative(ctx, deadline, checks, keys, out)
	}
	ctx, cancel := withDeadline(ctx, deadline)
	defer cancel()
	return s.applyGeneric(ctx, checks, keys, out)
}

// keys returns the Redis key of every check and refuses a set of keys the
// client cannot use in one script.
func (s *Store) keys(checks []ratelimit.Check) ([]string, error) {
	keys := make([]string, len(checks))
	var kb [128]byte
	buf := kb[:0]
	for i := range checks {
		buf = s.redisKey(buf[:0], checks[i].Namespace, checks[i].Key)
		keys[i] = string(buf)
	}
	if len(keys) < 2 || s.kind == kindSingle || !s.tagged {
		return keys, nil
	}
	if s.kind == kindRing {
		// A Ring picks a shard by the tag with its own hash: only equal tags
		// are sure to share one.
		t0 := tagOf(keys[0])
		for i := 1; i < len(keys); i++ {
			if tagOf(keys[i]) != t0 {
				return nil, fmt.Errorf("%w: redisstore: checks 0 and %d have different hash tags on a Ring", ErrCrossSlot, i)
			}
		}
		return keys, nil
	}
	slot := keySlot(keys[0])
	for i := 1; i < len(keys); i++ {
		if sl := keySlot(keys[i]); sl != slot {
			return nil, fmt.Errorf("%w: redisstore: check 0 is in cluster slot %d and check %d in slot %d (give the keys one hash tag, see WithHashTag)", ErrCrossSlot, slot, i, sl)
		}
	}
	return keys, nil
}

// tagOf returns the hash tag of a key built by redisKey.
func tagOf(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			return key[i+1 : i+1+redisslot.TagLen]
		}
	}
	return key
}

// Reset deletes the state of key in namespace, making it fully available
// again. Resetting a key without state is not an error. Errors wrap
// ratelimit.ErrInvalidKey, ErrUnavailable, ErrUnknownOutcome or ErrClosed.
func (s *Store) Reset(ctx context.Context, namespace, key string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if !ratelimit.ValidKey(key) || len(namespace) > ratelimit.MaxKeyLen {
		return fmt.Errorf("%w: redisstore: key of %d bytes or namespace of %d bytes", ratelimit.ErrInvalidKey, len(key), len(namespace))
	}
	k := string(s.redisKey(nil, namespace, key))
	_, _, err := s.do(ctx, noRetryCmd{redis.NewCmd(ctx, "del", k)})
	return err
}

// Close marks the store closed; it does not close the client. Under
// WithAutoPipeline, the last store to close on a client also closes the
// client's asynchronous autopipeliner, waiting for the commands it holds
// (at most the client's ReadTimeout); another user of that autopipeliner
// then gets redis.ErrClosed from it, and the client builds a new one on
// the next request. Closing twice is not an error; every other call after
// Close returns ratelimit.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) || !s.ownsAP {
		return nil
	}
	return releaseAutoPipeliner(s.ap)
}

// apUsers counts the open stores sharing each autopipeliner obtained for
// WithAutoPipeline (go-redis caches one per client). Obtaining and
// counting happen under one lock, as do uncounting and closing, so a store
// never receives an autopipeliner that another store's Close is about to
// close.
var apUsers = struct {
	sync.Mutex
	n map[*redis.AutoPipeliner]int
}{n: make(map[*redis.AutoPipeliner]int)}

// acquireAutoPipeliner returns client's asynchronous autopipeliner and
// counts one more store on it.
func acquireAutoPipeliner(client Client, opts *redis.AutoPipelineOptions) (*redis.AutoPipeliner, error) {
	apUsers.Lock()
	defer apUsers.Unlock()
	var (
		ap  *redis.AutoPipeliner
		err error
	)
	switch c := client.(type) {
	case *redis.Client:
		ap, err = c.AsyncAutoPipelineWithOptions(opts)
	case *redis.ClusterClient:
		ap, err = c.AsyncAutoPipelineWithOptions(opts)
	default:
		return nil, fmt.Errorf("%w: redisstore: WithAutoPipeline needs a *redis.Client or a *redis.ClusterClient, not %T", ratelimit.ErrInvalidOption, client)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: redisstore: autopipeliner: %w", ratelimit.ErrInvalidOption, err)
	}
	apUsers.n[ap]++
	return ap, nil
}

// apOptions returns the options WithAutoPipeline asks go-redis for: opts
// when given, else the client's own Options.AutoPipelineOptions, else
// full duplex (defaultAPOptions).
func apOptions(client Client, opts *redis.AutoPipelineOptions) *redis.AutoPipelineOptions {
	if opts != nil {
		return opts
	}
	var own *redis.AutoPipelineOptions
	switch c := client.(type) {
	case *redis.Client:
		own = c.Options().AutoPipelineOptions
	case *redis.ClusterClient:
		own = c.Options().AutoPipelineOptions
	}
	if own != nil {
		return own
	}
	return defaultAPOptions()
}

// releaseAutoPipeliner counts one store less on ap and closes it when
// none is left. An autopipeliner already closed (with its client) is not
// an error.
func releaseAutoPipeliner(ap *redis.AutoPipeliner) error {
	apUsers.Lock()
	defer apUsers.Unlock()
	if apUsers.n[ap]--; apUsers.n[ap] > 0 {
		return nil
	}
	delete(apUsers.n, ap)
	if err := ap.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redisstore: closing the autopipeliner: %w", err)
	}
	return nil
}

var _ ratelimit.Store = (*Store)(nil)

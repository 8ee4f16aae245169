// Package redisstore is a ratelimit.Store on Redis, Redis Cluster and a
// go-redis Ring: every process sharing the Redis shares its limits.
//
// Configure the go-redis client with context deadlines on and retries off,
// then give the store to the limiters:
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:                  "127.0.0.1:6379",
//		ContextTimeoutEnabled: true, // required: deadlines bound socket I/O
//		MaxRetries:            -1,
//	})
//	store, err := redisstore.New(rdb, redisstore.WithEvictionCheck(nil))
//	...
//	lim, err := sluice.New(rule, sluice.WithStore(store))
//
// New takes a *redis.Client, *redis.ClusterClient, *redis.Ring, an
// asynchronous *redis.AutoPipeliner or anything with go-redis's Process
// method, and never closes it. One option per concern: WithPrefix (key
// prefix), WithHashTag and WithoutHashTag (Cluster slots), WithoutCoalescing
// (one script per call), WithAutoPipeline (go-redis's pipelining),
// WithTTLMargin (expiry), WithCASAttempts
// (contention on the generic path), WithEvictionCheck (warn about a
// maxmemory-policy that evicts), WithoutClientCheck (skip New's check).
//
// # Guarantees
//
// Decisions are exact and atomic. For the in-repo algorithms a call, a
// composite included, is one Lua script; any other algorithm is read, decided
// in Go and written back by a compare-and-set script. The time is the
// server's TIME, so every process shares one clock. On a Client or a
// ClusterClient the native calls of concurrent callers are coalesced into
// one script invocation per server or slot, each call deciding exactly as
// alone; a call whose context ends before its batch is sent is dropped
// (ErrUnavailable). ApplyBefore and ApplyAllBefore take a deadline as a
// value (ratelimit.DeadlineApplier), which a sluice.Limiter uses for a
// rule's budget: the coalescer watches every call's with one timer, as a
// context would end it. A script runs at most
// once: go-redis never resends the store's commands, so a reply lost after
// sending is reported as ratelimit.ErrUnknownOutcome, never spent twice. On
// a ClusterClient or a Ring the keys of a composite must share a hash tag;
// DefaultTag takes it from the key, so one key under several rules does.
// Use maxmemory-policy noeviction: an evicted state comes back full.
//
// # Keys
//
// Each state is one Redis string, expiring after its TTL plus WithTTLMargin:
//
//	prefix rule ":" key                on a *redis.Client     rl:login:user:42
//	prefix "{" tag "}:" rule ":" key   on a Cluster or Ring   rl:{mYg}:login:user:42
//
// The prefix is WithPrefix ("rl:"), the tag 3 characters hashed from the
// TagFunc's source, the rule the rule name with '%', ':', '{', '}' and bytes
// outside printable ASCII percent-encoded, and the key verbatim. Changing
// the prefix, the tag function or the kind of client changes every key, so
// every limit starts again full.
//
// # Errors
//
// Denial is a decision, not an error. Errors wrap the ratelimit sentinels:
// ratelimit.ErrInvalid (bad checks or options, and ErrCrossSlot) before
// anything is sent; ratelimit.ErrUnavailable when the script certainly did
// not run (dial, pool, closed client, an error reply such as NOPERM or OOM,
// ErrContention); ratelimit.ErrUnknownOutcome when it was sent and no reply
// came (it may have run once); ratelimit.ErrCorruptState for undecodable
// state or WRONGTYPE (Reset clears it); ratelimit.ErrUnsupported and
// ratelimit.ErrClosed.
//
// The design notes (Lua arithmetic, the generic path, autopipelining,
// Cluster slots, eviction, memory per key) are in docs/redis.md.
package redisstore

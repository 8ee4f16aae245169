// Package redisstore is a ratelimit.Store on Redis and Redis Cluster,
// built on github.com/redis/go-redis/v9.
//
// # Usage
//
// Create the go-redis client with context deadlines enabled, then the
// store, then a limiter on it:
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:                  "127.0.0.1:6379",
//		ContextTimeoutEnabled: true, // required: deadlines bound socket I/O
//		MaxRetries:            -1,   // recommended for a limiter's client
//	})
//	store, err := redisstore.New(rdb, redisstore.WithEvictionCheck(nil))
//	if err != nil { … }
//
// New accepts anything with go-redis's Process method: *redis.Client,
// *redis.ClusterClient, *redis.Ring, an asynchronous *redis.AutoPipeliner
// or a redis.UniversalClient. It refuses (ratelimit.ErrInvalidOption) a
// client whose options leave ContextTimeoutEnabled false, because go-redis
// then ignores context deadlines on the socket and a call can outlast its
// deadline by the read timeout, and for the same reason a blocking
// AutoPipeliner; WithoutClientCheck overrides the refusal. The store never
// closes the client.
//
// # Autopipelining
//
// WithAutoPipeline sends the scripts through go-redis's asynchronous
// autopipeliner, by default in full duplex: one held connection per server
// whose writer streams the scripts of concurrent calls and whose reader
// completes them in order. Fewer system calls per decision when many
// goroutines call at once (1.4–1.7× the decisions per second of the plain
// client with 64 callers on loopback), and a lower latency for a lone
// caller when client and server share cores (1.04–1.20× the decisions per
// second; none on separate CPUs). A call made while 2 to 16 calls of the
// store are under way goes to the client directly, where the autopipeliner
// measured no gain. Each call still runs its script at most once
// (go-redis never replays a pipeline holding a no-retry command)
// and its outcome is the same. It is an option, not the default, because
// the autopipeliner sends a queued command on its own context: the store
// stops waiting when the call's context ends and reports
// ratelimit.ErrUnknownOutcome, but the script may still run afterwards, up
// to the client's ReadTimeout later; with a plain client a call that never
// got a connection reports ratelimit.ErrUnavailable and runs nothing. Keep
// ReadTimeout short on a client used this way. go-redis marks the
// autopipeliner experimental.
//
// # One script per decision
//
// Apply and ApplyAll send one Lua script (EVALSHA, and EVAL once when the
// server answers NOSCRIPT after a restart, a failover or SCRIPT FLUSH).
// The script reads the time with TIME, so every process shares the
// server's clock; with effects replication (the default since Redis 5, the
// only mode since Redis 7) a script that calls TIME before writing
// replicates safely. Keys and values travel as KEYS and ARGV; no request
// data is ever part of a script's source.
//
// The native script covers OpTake for the in-repo gcra, tokenbucket,
// leakybucket, fixedwindow, slidingwindow and slidinglog algorithms,
// OpReserve and OpRefund for gcra, tokenbucket and leakybucket, and
// OpCharge for all of them but slidinglog (which has no Charge), under
// limits whose Period and time to refill Burst (Limit.FillTime) are at
// most 2^51 ns, about 26 days, which includes per-second to per-day
// limits; contributed algorithms take the generic path. Lua numbers are
// doubles, exact only below 2^53, and Unix time in nanoseconds is near
// 2^61, so the script keeps instants as two 32-bit halves, computes only
// differences as numbers, and divides a product such as elapsed·Count
// directly when it is below 2^52, with an exact shift-and-add otherwise.
// The store precomputes each limit's spans (τ, the cost's and one unit's
// emission time, the debt bound) as exact quotient and remainder and sends
// them, with the limit, as one binary argument per check that the script
// decodes with a single struct.unpack; states are decoded and encoded with
// struct as well. Its decisions and stored states equal the Go algorithms'
// bit for bit (the package's differential tests compare them at injected
// instants). A charge is never denied: a call of charges only always
// writes, and charges beside takes or reservations apply only when those
// are allowed, as in every Store. When the script meets a state outside
// its exact range (one more than 2^51 ns in the future, a debt or a
// window count above Burst carried over by a Charge whose repayment takes
// longer, a gcra charge of 2^52 ns or more, a log entry with a count or
// gap of 2^52 or more, undecodable bytes) it writes nothing and the call
// is decided on the generic path. A composite whose checks all qualify is
// one script call too.
//
// Every other case takes the generic path, so any Algorithm, including a
// contributed one, works on Redis: one script returns the states and TIME,
// the store decides in Go with ratelimit.Evaluate, and a compare-and-set
// script writes the new states only if none changed meanwhile, all or
// nothing. On a conflict it returns a fresh snapshot and the store decides
// again after a short random backoff, up to WithCASAttempts times (then
// ErrContention). A decision that writes nothing (a denial, a peek) needs
// only the first round trip. OpReserve, OpRefund and OpCharge of
// algorithms without a native program for them always take this path
// (and report ratelimit.ErrUnsupported when the algorithm lacks the
// capability, as a slidinglog charge does).
//
// # Keys
//
// Each state is one Redis string holding the algorithm's encoding, with a
// PEXPIRE of the TTL the algorithm reports (rounded up to a millisecond)
// plus WithTTLMargin; a state whose TTL is 0 is deleted. By the Algorithm
// contract, expiry at the TTL changes nothing. The key is
//
//	prefix uvarint(len(namespace)) namespace key               on one server
//	prefix "{" tag "}" uvarint(len(namespace)) namespace key   otherwise
//
// where prefix is WithPrefix (default "rl:", no braces allowed) and tag is
// 3 base64url characters carrying 18 bits of a hash of the check's tag
// source (see TagFunc). The tag only matters where keys are spread over
// servers, so a store on a *redis.Client (directly or through
// WithAutoPipeline) leaves it out; a store on a *redis.ClusterClient, a
// *redis.Ring or a client it cannot identify (an AutoPipeliner passed to
// New, a wrapper) writes it. WithHashTag forces the tag on every client and
// WithoutHashTag leaves it out on an unidentified one. Namespace and key
// are opaque bytes: CR, LF, NUL, braces, quotes and invalid UTF-8 are data,
// and the length prefix keeps ("a:b", "c") and ("a", "b:c") apart. Keys
// longer than ratelimit.MaxKeyLen are refused with ratelimit.ErrInvalidKey.
//
// With the default prefix, a namespace (rule name) of n bytes and a key of
// k bytes make a Redis key of 4+n+k bytes on one server and 9+n+k bytes
// with a tag (n < 128): with a one-byte rule name, as long as
// go-redis/redis_rate's "rate:" + key. Redis 7 allocates a key of up to 30
// bytes in 32 bytes and one of 31 to 44 bytes in 48, so a short prefix and
// short rule names save memory on every key.
//
// The layout is part of the stored state: processes that share a Redis
// share limits only while they compute the same keys. Changing the prefix,
// the tag function, or the kind of client (a *redis.Client to a
// ClusterClient, or a *redis.Client to an AutoPipeliner passed to New,
// which adds the tag) changes every key, so every limit starts again from
// a full burst, as after a Reset; the old keys expire by their TTL. Pin the
// layout with WithHashTag (or WithoutHashTag) when a deployment may change
// client kinds. A change to the layout in this package is a breaking
// change.
//
// # Redis Cluster and Ring
//
// A key's Cluster slot is the slot of its tag. DefaultTag uses the content
// of the first "{…}" in the check's key when there is one, else the whole
// key, and ignores the namespace: the same key checked under several rules
// (per minute and per day for one user) shares a slot with no work, and
// keys such as "{tenant7}:ip:10.0.0.1" and "{tenant7}:user:42" share one by
// the usual Redis convention. A composite (ApplyAll) whose keys fall in
// different slots on a ClusterClient is refused before anything is sent,
// with an error wrapping ErrCrossSlot; on a Ring every check of a
// composite must have the same tag source. A global rule cannot share a
// slot with per-user keys; apply it in a separate call, or give every key
// of the composite one tag with WithHashTag (then they all live on one
// node). A standalone *redis.Client (or a store with WithoutHashTag)
// accepts any composite.
//
// # Errors
//
// Denial is a decision, not an error. Errors wrap the ratelimit sentinels:
//
//   - invalid checks (ErrInvalidKey, ErrInvalidLimit, ErrInvalidCost,
//     ErrInvalidRule) are refused before anything is sent;
//   - ErrUnavailable: the request certainly did not run — the client is
//     closed, the dial failed or was refused, no pooled connection came
//     before the deadline, the request could not be written in full, or
//     Redis answered with an error (NOPERM, OOM, BUSY, LOADING…): the
//     scripts read and decide before their first write, and Redis refuses
//     an out-of-memory write only when it is a script's first;
//   - ErrUnknownOutcome: the request was written but no reply was read (a
//     deadline or read timeout after sending, a reset connection, EOF), or,
//     under WithAutoPipeline, the call's context ended while the request was
//     queued or in flight; the script may have run once. It never runs twice: the store marks its
//     commands no-retry, so go-redis resends them under no MaxRetries or
//     MaxRedirects setting (MOVED and ASK redirections, which mean the
//     script did not run, still happen);
//   - ErrCorruptState: the key holds bytes the algorithm cannot decode, or
//     a non-string value (WRONGTYPE); nothing is changed and Reset clears
//     it;
//   - ErrCrossSlot, ErrUnsupported, ErrClosed as described above and in
//     package ratelimit.
//
// # Operations
//
// Use a Redis whose maxmemory-policy is noeviction for limiter state: an
// evicted state comes back with its full burst. WithEvictionCheck reads the
// policy at start (CONFIG GET on every master or shard) and reports a risky
// policy, or a denied CONFIG, through its logger without failing. An ACL
// user restricted to the prefix and to EVALSHA, EVAL, GET, SET, DEL and
// TIME (plus HELLO and PING for go-redis's handshake) is enough, for
// example
//
//	ACL SETUSER limiter on >secret resetkeys ~rl:* resetchannels -@all +evalsha +eval +get +set +del +time +ping +hello
//
// WithTestClock replaces the server's TIME with an injected clock. It
// exists for tests only.
package redisstore

// Package cluster is a ratelimit.Store made of in-memory nodes that decide
// locally and stay within a stated bound of one global limit, kept in step
// by gossip over github.com/hashicorp/memberlist. It needs no external
// store; for limits that must be exact, use pgstore or redisstore.
//
// Start one Node per process with New and a Config (start from
// DefaultLANConfig, or DefaultLocalConfig for nodes on one machine), give
// every node the others' addresses as Seeds, and use the Node wherever a
// ratelimit.Store goes. Leave then Close on shutdown.
//
//	cfg := cluster.DefaultLANConfig()
//	cfg.Name = "gw-1"
//	cfg.Seeds = []string{"10.0.0.2:7946"}
//	cfg.SecretKey = key // 16, 24 or 32 bytes, the same on every node
//	cfg.Label = "prod-ratelimit"
//	node, err := cluster.New(cfg)
//	lim, err := sluice.New(rule, sluice.WithStore(node))
//
// A node decides every check from its own copy of the key's state, with
// no network hop, and every SyncInterval sends what it admitted to every
// member; the others charge it to their copies, which may go into debt,
// so the long-run rate is exact. A key new to the cluster is split: each
// node takes only its share of the burst until its peers' use can reach it.
//
// The bound: with rate r = Count/Period, burst B, N live members, sync
// interval S, delivery delay d and Δ = S + d, the units A admitted by all
// nodes together over any interval of length T (stable membership) satisfy
//
//	A ≤ B + r·T + (N−1)·(b⁺ + r·Δ) + N
//
// where b⁺ is 0 for a key new to the cluster (or idle until every view
// refilled), about 0 under sustained demand, and up to B for a key whose
// views hold a high level when several nodes start spending it at once.
// Over long runs A stays within (N−1)·r·Δ + N of B + r·T from above and,
// while demand exceeds r, from below. Joins, crashes, pauses and
// partitions add terms (with FailedHold > 0, a partition into p sides at
// most (p−1)·r·F, F being memberlist's failure detection time), each
// derived in docs/cluster.md:
// https://github.com/sluicehq/sluice/blob/main/docs/cluster.md
// Stats.MaxSyncGap reports the real S of a busy machine.
//
// Algorithms: any ratelimit.Charger, which in package catalog is
// tokenbucket, gcra, leakybucket (meter and queue) and fixedwindow (the
// bound holds per window, B its quota); others return ErrUnsupported.
// Reserve and Refund work for algorithms that implement them. ApplyAll is
// atomic on the node that applies it; Reset resets the key on every live
// member; Outcome.Remaining and RetryAfter describe the node's own view.
//
// With SecretKey set, gossip is encrypted and authenticated (AES-GCM): a
// node without the key can neither join nor inject counters. Label keeps
// two clusters on one network apart. Implausible counter jumps are capped
// (Stats.Capped); malformed messages are dropped (Stats.Malformed).
//
// Errors wrap the ratelimit sentinels. New returns ErrInvalidOption for an
// unusable Config and ErrUnavailable when the port cannot be bound or no
// seed answers. Apply, ApplyAll and Reset never wait on the network, so
// they fail only with invalid input, ErrUnsupported, ErrCorruptState,
// ErrClosed or the context's error.
package cluster

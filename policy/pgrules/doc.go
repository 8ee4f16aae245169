// Package pgrules keeps a policy engine's rules in PostgreSQL: the
// RateLimitRule table, hot reload through LISTEN/NOTIFY with a polling
// fallback, and a violation Sink writing the RateLimitViolation table.
//
//	pool, err := pgxpool.New(ctx, "postgres://…")
//	if err := pgrules.Migrate(ctx, pool); err != nil { … } // idempotent, safe at every start
//	src, err := pgrules.NewSource(pool)
//	set, err := src.Load(ctx)
//	sink, err := pgrules.NewSink(pool)
//	engine, err := policy.New(set, policy.WithSink(sink))
//	go src.Watch(ctx, engine.Swap) // until ctx ends
//	defer engine.Close(ctx)        // writes the queued violations
//
// One row is one rule (or one plan variant of a rule): its descriptor
// column is the path of {"key", "value"} entries from the domain's root,
// the other columns are envoy's rate_limit fields and Sluice's extensions:
//
//	INSERT INTO "RateLimitRule" (domain, descriptor, requests_per_unit, unit, plan)
//	VALUES ('api', '[{"key": "user"}, {"key": "path", "value": "/login"}]', 5, 'minute', NULL);
//
// docs/policy-postgres.md maps every column onto policy.Config.
//
// Guarantees:
//
//   - All or nothing: Load and every reload read the active rows in one
//     query and validate them all with policy.NewSet before anything takes
//     effect. A bad row is refused with a *policy.ConfigError whose File is
//     "table RateLimitRule", Line the row's id and Field its column; the
//     rules in force stay in force.
//   - Changes arrive when their transaction commits: a statement trigger
//     NOTIFYs, and Watch reloads (about a millisecond here). When its
//     listening connection fails, Watch reloads every poll interval and
//     listens again; it reloads on every (re)connection, so no committed
//     change is missed. An unchanged rule keeps its buckets (policy's
//     Swap), whatever its new limit.
//   - The Sink never slows a decision: the engine queues violations and
//     drops (and counts) them when the queue is full; the Sink appends each
//     batch with one COPY.
//
// Errors wrap sluice.ErrInvalid (bad options, bad rows: *policy.ConfigError)
// or sluice.ErrUnavailable (the server failed).
package pgrules

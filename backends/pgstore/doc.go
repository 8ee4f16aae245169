// Package pgstore is a ratelimit.Store on PostgreSQL (pgx/v5): limiter
// state lives in one table, and every decision is one transaction that
// locks the rows it reads, so admission is exact across any number of
// processes sharing the database.
//
//	pool, err := pgxpool.New(ctx, "postgres://…")
//	store, err := pgstore.New(pool, pgstore.WithSweeper(time.Minute))
//	if err := store.Migrate(ctx); err != nil { … } // idempotent, safe at every start
//	lim, err := sluice.New(rule, sluice.WithStore(store))
//
// New accepts any Pool (a *pgxpool.Pool or a wrapper) and borrows one
// connection per call. Close the store before the pool: Close stops the
// sweeper and leaves the pool to its owner. Migrate creates the table
// below (for the default options; Store.SchemaSQL returns the SQL for
// teams that run migrations themselves):
//
//	CREATE TABLE IF NOT EXISTS "sluice_ratelimit" (
//	    namespace  bytea       NOT NULL,
//	    key        bytea       NOT NULL,
//	    algorithm  text        NOT NULL,
//	    state      bytea       NOT NULL,
//	    expires_at timestamptz NOT NULL,
//	    PRIMARY KEY (namespace, key)
//	) WITH (fillfactor = 80);
//
// Guarantees:
//
//   - Exact, all or nothing, any algorithm: Apply and ApplyAll run one
//     READ COMMITTED transaction that locks every row with SELECT … FOR
//     UPDATE in sorted (namespace, key) order (composites cannot
//     deadlock), decides in Go at the server's clock read after the locks,
//     and writes back: two round trips, single key or composite (three
//     when a row is missing and must be seeded).
//   - Callers of one key in one process queue in Go, without a
//     connection: at most two transactions per key are at the server at a
//     time (WithMaxLockWait bounds the whole wait).
//   - Keys are arbitrary bytes, always sent as parameters.
//   - Nothing is applied after the caller gives up: lock_timeout and
//     statement_timeout are set shorter than the time left before the
//     context's deadline (WithTimeoutMargins, WithMaxLockWait); a call
//     without a deadline gets DefaultTimeout. A sluice rule without a
//     Budget gets DefaultBudget (25 ms), long enough for a lock wait to
//     end on the server and keep its connection.
//   - Expired rows count as absent; Sweep (or WithSweeper) deletes them in
//     FOR UPDATE SKIP LOCKED batches that never wait for a decision.
//   - WithUnlogged is faster but not crash-safe: after a crash or a
//     failover every key is fully available again (one free burst).
//
// PostgreSQL 11 or later. It works behind PgBouncer in transaction mode
// (1.21 or later with max_prepared_statements for named statements).
//
// Errors wrap the ratelimit sentinels:
//
//   - invalid input, ErrUnsupported, ErrCorruptState: state unchanged;
//   - ErrClosed after Close;
//   - ErrUnavailable, certainly not applied: no connection, a lock or
//     statement timeout, any failure before COMMIT was sent, a COMMIT
//     that reports a rollback;
//   - ErrUnknownOutcome, may have been applied: COMMIT was sent and its
//     reply lost, or an error that proves no rollback; do not retry
//     blindly.
//
// The transaction statement by statement, how the timeouts are derived,
// why each failure falls in its class, the sweeper and UNLOGGED trade-offs
// are in docs/postgres.md:
// https://github.com/sluicehq/sluice/blob/main/docs/postgres.md
package pgstore

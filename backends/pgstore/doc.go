// Package pgstore is a ratelimit.Store on PostgreSQL (pgx/v5 and
// pgxpool): limiter state lives in one table, every decision is one
// transaction that locks the rows it reads, so admission is exact across
// any number of processes sharing the database.
//
// # Usage
//
//	pool, err := pgxpool.New(ctx, "postgres://…")
//	…
//	store, err := pgstore.New(pool, pgstore.WithTable("rate_limits"))
//	…
//	if err := store.Migrate(ctx); err != nil { … } // idempotent, safe at every start
//	limiter, err := sluice.New(rule, sluice.WithStore(store))
//
// New accepts any Pool (a *pgxpool.Pool or a wrapper); the store borrows
// one connection per call. Close the store before the pool: Close stops
// the background sweeper but leaves the pool to its owner.
//
// # Schema
//
// Migrate runs the SQL below (rendered for the configured schema, table and
// persistence; Store.SchemaSQL returns it for teams that run migrations
// themselves). With the default options it is:
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
// Namespace and key are bytea because keys are arbitrary bytes (text
// rejects NUL and invalid UTF-8); they are always sent as parameters, never
// spliced into SQL. state is the algorithm's own encoding and algorithm its
// name: state written by one algorithm is never handed to another
// (ratelimit.ErrCorruptState; Reset clears it). An empty state or an
// expires_at at or before the server's clock means "no state": the key is
// fully available, whether or not the sweeper has deleted the row yet.
// There is no index on expires_at on purpose: every decision rewrites it,
// and an index on it would rule out HOT updates of hot rows (fillfactor 80
// leaves them room on the page).
//
// # One transaction per call, two round trips
//
// Apply and ApplyAll run the same generic transaction for every algorithm,
// in-repo or contributed: the decision is made in Go with
// ratelimit.Evaluate, so there is no per-algorithm SQL. The statements go
// out in two pipelines on pgx's low-level connection (pgconn): each is one
// network write and one round trip, ending with one Sync:
//
//  1. read phase: BEGIN; the timeouts (one set_config statement); for
//     every key, a seed: INSERT … SELECT … WHERE NOT EXISTS (the row) ON
//     CONFLICT DO NOTHING, which creates a never-seen key's row before
//     any lock is requested (a concurrent first use waits for the other
//     seed and then does nothing, so no unique violation ever surfaces)
//     and leaves an existing row alone without waiting for a transaction
//     that is updating it; then, for every key, SELECT … FOR UPDATE in a
//     subquery whose outer query reads clock_timestamp() once the row is
//     locked. The clock of the last lock statement, read after every lock
//     is held, is the decision's "now" (the database server's clock: no
//     client skew, and never earlier than the previous writer's time as
//     the transaction-start now() could be). Keys go in sorted
//     (namespace, key) byte order everywhere, so that composites naming
//     the same keys in any order cannot deadlock;
//  2. write phase: one UPDATE per changed key and COMMIT, under the read
//     phase's timeouts (the UPDATEs never wait for a lock, and once this
//     phase is sent its failures are classified by where they happen, not
//     by which timeout fired), refused with nothing sent when less than
//     2ms is left. A state that may be dropped (TTL 0) is
//     written as an empty, expired row rather than deleted, so that a
//     concurrent caller that has already seeded the key still finds it.
//     When nothing changed (a denial, a peek) the phase is just ROLLBACK,
//     which also drops the seed of a never-seen key, and the decision
//     stands even if that rollback fails.
//
// So a decision costs 2 round trips, single key or composite (2 + 2 per
// key statements in the first, 1 + 1 per changed key in the second). The
// first time a Store uses a pooled connection it prepares these
// statements, by names derived from their text, in one more round trip;
// the names live with the connection (pgconn's CustomData), so a
// connection the pool opens to replace a broken one prepares again. If the
// server has lost them (DISCARD ALL, DEALLOCATE) or must plan them again
// for a changed table, the transaction rolls back and is retried after
// preparing again. Keys, states, times and the locked row travel in
// binary. The same statements sent one at a time are 6 round trips for
// one key (BenchmarkApply compares both). Reset and each sweep batch are 1
// round trip. A row swept between seeding and locking (possible only for an
// expired row), a serialization failure (40001) or a deadlock (40P01)
// rolls the transaction back; it is retried, up to 3 attempts in all,
// within the same deadline.
//
// A hot key is serialized by its row lock, held from the lock statement to
// the end of COMMIT: one network round trip plus the commit's WAL flush
// (a transaction that sends each statement on its own holds it for at
// least one round trip more): expect on the order of 1–3 thousand
// decisions per second on one key, more across many keys. Waiters queue on
// the lock, bounded by lock_timeout; WithMaxLockWait caps that wait below
// the deadline so that a queue behind a hot key fails fast instead of
// holding connections.
//
// # Timeouts that cannot betray the caller
//
// A statement the client has given up on may still run later on the
// server (a cancel request cannot cross a network partition). Every
// transaction therefore sets, with set_config(…, true) (SET LOCAL), values
// derived from the time left before the context's deadline:
//
//   - lock_timeout = time left − lock margin (default 10ms), or less with
//     WithMaxLockWait;
//   - statement_timeout = time left − statement margin (default 5ms);
//   - idle_in_transaction_session_timeout = time left, a backstop: a client
//     that vanishes between the two phases cannot keep rows locked past
//     its own deadline.
//
// Values are whole milliseconds, rounded down, never 0 (which would mean
// "no limit"). A call whose context has no deadline gets DefaultTimeout
// (WithDefaultTimeout). With less than twice the lock margin left, the
// margins shrink to half and a quarter of the time left, so that a short
// budget (sluice's 5 ms default) still reaches the server; a call with
// less than 2ms left is refused with ratelimit.ErrUnavailable before
// anything is sent, and acquiring a connection gives up when the lock
// margin plus 1ms is left. The margins (WithTimeoutMargins) should cover a
// network round trip so that the server's error, not the client's
// deadline, ends a wait: a wait the client's deadline ends costs pgx the
// connection. The server's
// timeouts apply per statement; with several keys the lock waits add up,
// which the client deadline still bounds (see the error classes: a
// read-phase timeout is harmless). A transaction the server aborted loses
// its SET LOCAL values, including the idle backstop, but an aborted
// transaction holds no locks; its orphaned session lasts until the server
// notices the dead peer (tune tcp_keepalives_* on the server to bound it).
//
// # Error classes
//
// Every error wraps a ratelimit sentinel (and the underlying cause):
//
//   - invalid input (ErrInvalidKey, ErrInvalidLimit, ErrInvalidCost,
//     ErrInvalidRule), ErrUnsupported and ErrCorruptState: nothing sent or
//     the transaction rolled back, state unchanged;
//   - ErrClosed: the Store was closed;
//   - ErrUnavailable, certainly not applied: no connection (pool exhausted
//     until the deadline, connect refused, pool closed); any failure of the
//     read phase, whether a server error (lock_timeout 55P03,
//     statement_timeout 57014, a terminated backend) or a client-side one
//     (deadline reached while waiting, lost connection), because the
//     locking transaction can only commit on the COMMIT that the write
//     phase sends, and it is never sent after a failure; a server error on
//     a statement before COMMIT in the write phase (the server skips the
//     rest of the pipeline, so COMMIT never runs); an error on COMMIT that
//     means it rolled back (class 40 except 40003, class 23); a write phase
//     that could not be sent at all;
//   - ErrUnknownOutcome, may have been applied: the write phase was sent
//     and its COMMIT's reply did not arrive (deadline reached, connection
//     lost), or COMMIT itself returned another error (a backend terminated
//     during the commit may report FATAL after it became durable). Do not
//     retry blindly: the decision may already be spent.
//
// # Expired rows
//
// Nothing deletes rows on its own in PostgreSQL. Store.Sweep deletes rows
// whose expires_at has passed, in batches (WithSweepBatch, default 1000),
// each one short transaction that picks its rows with FOR UPDATE SKIP
// LOCKED: it never waits for a decision, and a decision on an expired key
// waits for at most one batch. WithSweeper runs it in the background every
// interval until Close. Sweeping is an optimisation of space only: expired
// rows are ignored by decisions either way.
//
// # UNLOGGED tables
//
// WithUnlogged creates the table UNLOGGED: its rows skip the write-ahead
// log, and a transaction that touched only it does not wait for a WAL
// flush at commit, so decisions are cheaper, at a price: PostgreSQL empties an UNLOGGED table
// when it restarts after a crash or an immediate shutdown
// (pg_ctl stop -m immediate), and standbys never see its contents. After
// such an event every key is fully available again: each one gets one
// free burst, and a failover to a standby starts from an empty table.
// That is often an acceptable trade for rate limiting; it is not for
// quotas that bill. A clean shutdown keeps the contents. A milder
// alternative is synchronous_commit = off for the store's role: the table
// stays crash-safe and replicated, commits stop waiting for the WAL flush,
// and a crash loses at most the last few hundred milliseconds of
// decisions. Migrate refuses a
// table whose persistence differs from the option (convert it with ALTER
// TABLE … SET LOGGED or SET UNLOGGED).
//
// # Requirements and connection poolers
//
// PostgreSQL 11 or later (ON CONFLICT, SKIP LOCKED, hashtextextended for
// Migrate's advisory lock); the tests run against PostgreSQL 15. Every
// transaction starts with BEGIN ISOLATION LEVEL READ COMMITTED, whatever
// default_transaction_isolation says, since the seeding argument above
// relies on it.
//
// The store keeps one connection for the two phases of a transaction, so it
// works behind PgBouncer in transaction mode. Its statements are named
// prepared statements, which need PgBouncer 1.21 or later with
// max_prepared_statements set; with any pgx DefaultQueryExecMode other
// than the default QueryExecModeCacheStatement (for instance
// QueryExecModeExec) the store sends them unnamed instead, parsed by the
// server on every use, in the same round trips.
package pgstore

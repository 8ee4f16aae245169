-- The raw ceiling of one rate-limit decision on PostgreSQL: the same work
-- as pgstore and the naive benchmark (lock one row, read the server clock,
-- write it back, commit), hand-written for pgbench.
\set k random(1, :keys)
BEGIN;
SELECT tokens, ts FROM bench_pgbench WHERE key = :k FOR UPDATE;
UPDATE bench_pgbench SET tokens = tokens, ts = (extract(epoch from clock_timestamp()) * 1e9)::bigint WHERE key = :k;
COMMIT;

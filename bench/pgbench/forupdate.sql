-- The raw ceiling of one pgstore decision, hand-written for pgbench: the
-- same table schema and keys as BenchmarkPostgres, and the same work per
-- decision minus what pgstore adds for safety (the server-side timeouts
-- and the seed of never-seen keys): lock the row and read the server clock
-- once it is locked (pgstore's lock statement), write a 17-byte state
-- (GCRA's size) and an expiry, commit. 4 round trips (BEGIN, SELECT,
-- UPDATE, COMMIT; -M prepared), against pgstore's 2.
\set k random(0, :keys - 1)
BEGIN;
SELECT algorithm, state, expires_at, clock_timestamp() FROM (SELECT algorithm, state, expires_at FROM bench_pgbench WHERE namespace = '\x67637261' AND key = convert_to(CASE WHEN :keys = 1 THEN 'hot' ELSE 'user:' || lpad(:k::text, 7, '0') END, 'UTF8') FOR UPDATE) locked;
UPDATE bench_pgbench SET algorithm = 'gcra', state = '\x01'::bytea || int8send((extract(epoch FROM clock_timestamp()) * 1e6)::int8) || int8send(:k), expires_at = clock_timestamp() + interval '1 microsecond' WHERE namespace = '\x67637261' AND key = convert_to(CASE WHEN :keys = 1 THEN 'hot' ELSE 'user:' || lpad(:k::text, 7, '0') END, 'UTF8');
COMMIT;

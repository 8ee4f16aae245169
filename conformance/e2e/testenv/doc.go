// Package testenv gives end-to-end tests real Redis, Redis Cluster and
// PostgreSQL servers, started once per test binary and shared by its tests.
//
// Each server is found in this order, and the choice is logged:
//
//  1. an address in the environment: SLUICE_REDIS_ADDR (host:port),
//     SLUICE_REDIS_CLUSTER_ADDRS (comma-separated host:port of the
//     cluster's nodes), SLUICE_POSTGRES_DSN (a libpq URL);
//  2. a container started with testcontainers-go when a Docker engine
//     answers, from the image named by SLUICE_REDIS_IMAGE or
//     SLUICE_POSTGRES_IMAGE (default the official "redis:7" and
//     "postgres:15", or their locally built stand-ins sluice/redis:7 and
//     sluice/postgres:15 when the engine already has them, so that no
//     registry is asked);
//  3. redis-server or the PostgreSQL binaries (PATH, then
//     /usr/lib/postgresql/15/bin) run as child processes on random
//     loopback ports;
//  4. none: the test is skipped with the reason, except when CI=true, where
//     it fails, so a broken CI cannot pass by skipping.
//
// With CI=true a container that fails to start is a failure, never a
// silent fallback to child processes. When SLUICE_TESTENV_REPORT names a
// file, one line per server started is appended to it, so a CI script can
// prove which path ran.
//
// A test binary using the package calls Main from its TestMain, which
// defaults TESTCONTAINERS_RYUK_DISABLED=true and
// TESTCONTAINERS_HOST_OVERRIDE=localhost and stops every server when the
// tests end:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// Servers started by the package bind loopback ports only. The shared
// servers above serve every test of the binary and are never stopped.
// NewRedis, NewRedisCluster and NewPostgres start a private server for one
// test, removed when it ends; only that test and its subtests may take it
// away with Server.Stop and bring it back on the same port with
// Server.Start, so store-down tests never disturb tests running in
// parallel. Child processes are reaped synchronously by Stop (no goroutine
// waits on them), so a goroutine-leak check around a restart sees nothing
// of the package's.
package testenv

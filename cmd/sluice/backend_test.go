package main

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/policy/pgrules"
)

// TestMain provides real Redis and PostgreSQL servers through testenv
// (environment, testcontainers, or child processes; a missing server
// skips, or fails under CI=true).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// backendRules count per year, so that no window ends during a test on a
// store that keeps the server's time, and fail closed with a generous
// budget: on this shared machine the default 5 ms budget can run out, and
// a failure policy's answer would hide what the store decided.
const backendRules = `
domain: backend
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 3, budget: 2s, on_failure: closed}
  - key: plan
    rate_limit: {unit: year, requests_per_unit: 100, budget: 2s, on_failure: closed}
`

// decideThreeThenDeny checks a store end to end: three requests pass, the
// fourth is denied, and the denial took nothing from the other rule.
func decideThreeThenDeny(t *testing.T, srv *server, user string) {
	t.Helper()
	c := rlsClient(t, srv)
	// The first call on a fresh connection may outlast the rules' store
	// budget (dial, script load on a busy machine) and be answered by the
	// failure policy; warm the store up with a key of its own.
	for range 2 {
		if _, err := c.ShouldRateLimit(t.Context(), rlsReq("backend", rd("user", "warmup-"+user), rd("plan", "warmup-"+user))); err != nil {
			t.Fatal(err)
		}
	}
	req := rlsReq("backend", rd("user", user), rd("plan", user))
	for i := range 4 {
		resp, err := c.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; (resp.GetOverallCode() == ok) != want {
			t.Fatalf("call %d: %v", i, codesOf(resp))
		}
	}
	resp, err := c.ShouldRateLimit(t.Context(), rlsReq("backend", rd("plan", user)))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 96 {
		t.Fatalf("plan remaining %d, want 96 (3 admitted + this one; the denial took nothing)", got)
	}
}

func readyStatus(t *testing.T, srv *server) int {
	t.Helper()
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestBackendRedis(t *testing.T) {
	redis := testenv.NewRedis(t)
	cfg := testConfig(t, backendRules)
	cfg.backend, cfg.redisAddrs = "redis", listFlag{redis.Addr()}
	srv := startServer(t, cfg)
	decideThreeThenDeny(t, srv, fmt.Sprint("u", time.Now().UnixNano()))
	if got := readyStatus(t, srv); got != http.StatusOK {
		t.Fatalf("/readyz with Redis up: %d", got)
	}
	if !redis.CanStop() {
		return // a server from the environment: not ours to stop
	}
	redis.Stop(t)
	if got := readyStatus(t, srv); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with Redis down: %d, want 503", got)
	}
	redis.Start(t)
	waitFor(t, func() bool { return readyStatus(t, srv) == http.StatusOK })
}

func TestBackendRedisCluster(t *testing.T) {
	rc := testenv.RedisCluster(t)
	cfg := testConfig(t, backendRules)
	cfg.backend, cfg.redisAddrs = "redis-cluster", listFlag(rc.Addrs)
	srv := startServer(t, cfg)
	decideThreeThenDeny(t, srv, fmt.Sprint("u", time.Now().UnixNano()))
}

func TestBackendPostgres(t *testing.T) {
	pg := testenv.Postgres(t)
	cfg := testConfig(t, backendRules)
	cfg.backend, cfg.postgresDSN = "postgres", pg.DSN
	srv := startServer(t, cfg)
	decideThreeThenDeny(t, srv, fmt.Sprint("u", time.Now().UnixNano()))
	if got := readyStatus(t, srv); got != http.StatusOK {
		t.Fatalf("/readyz: %d", got)
	}
}

func TestBackendGossipCluster(t *testing.T) {
	first := testConfig(t, backendRules)
	first.backend, first.clusterBind, first.clusterName = "cluster", "127.0.0.1:0", "node-a"
	a := startServer(t, first)
	decideThreeThenDeny(t, a, "gossip")
	node := a.store.(interface{ Addr() string })
	second := testConfig(t, backendRules)
	second.backend, second.clusterBind, second.clusterName = "cluster", "127.0.0.1:0", "node-b"
	second.clusterSeeds = listFlag{node.Addr()}
	b := startServer(t, second)
	// The joiner holds what the cluster counted: the user is used up.
	resp, err := rlsClient(t, b).ShouldRateLimit(t.Context(), rlsReq("backend", rd("user", "gossip")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != over {
		t.Fatalf("node-b admitted a user node-a had used up: %v", codesOf(resp))
	}
}

// TestRulesFromPostgresTable serves the rules of the RateLimitRule table
// and follows a change of a row: the new limit takes effect and the
// bucket keeps what it had counted.
func TestRulesFromPostgresTable(t *testing.T) {
	pg := testenv.Postgres(t)
	pool, err := pgxpool.New(t.Context(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgrules.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	domain := fmt.Sprint("table", time.Now().UnixNano())
	var id int64
	if err := pool.QueryRow(t.Context(), `INSERT INTO "RateLimitRule" (domain, descriptor, requests_per_unit, unit, algorithm)
		VALUES ($1, '[{"key":"user"}]', 2, 'year', 'fixedwindow') RETURNING id`, domain).Scan(&id); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.rules, cfg.rulesPG, cfg.watch = "", pg.DSN, true
	srv := startServer(t, cfg)
	c := rlsClient(t, srv)
	req := rlsReq(domain, rd("user", "ann"))
	want := []rlsv3.RateLimitResponse_Code{ok, ok, over}
	for i, code := range want {
		resp, err := c.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != code {
			t.Fatalf("request %d under 2/year: %v, want %v", i+1, resp.GetOverallCode(), code)
		}
	}

	if _, err := pool.Exec(t.Context(), `UPDATE "RateLimitRule" SET requests_per_unit = 5 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	peek := []policy.Descriptor{{{Key: "user", Value: "ann"}}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := srv.engine.Decide(t.Context(), domain, peek, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Statuses[0].Decision.Limit.Count == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table's new limit is not in force after 20s: %+v", res.Statuses[0].Decision.Limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The window's count carries over the change (the window, a year,
	// is the same under both limits): 2 of 5 used, exactly 3 more pass.
	want = []rlsv3.RateLimitResponse_Code{ok, ok, ok, over}
	for i, code := range want {
		resp, err := c.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != code {
			t.Fatalf("request %d after raising to 5/year: %v, want %v", i+1, resp.GetOverallCode(), code)
		}
	}
}

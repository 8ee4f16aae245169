package redisstore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestACLLeastPrivilege runs the store as a Redis user allowed only keys
// under the prefix and the commands the store and its scripts send
// (EVALSHA, EVAL, GET, SET, DEL, TIME) plus the handshake (HELLO, PING). CONFIG is denied, so the eviction check
// reports that it could not read the policy and New still succeeds.
func TestACLLeastPrivilege(t *testing.T) {
	srv := startServer(t)
	admin := newClient(t, srv.addr())
	prefix := randomPrefix(t)
	rules := []any{"acl", "setuser", "limiter", "on", ">secret", "resetkeys", "~" + prefix + "*", "resetchannels",
		"-@all", "+evalsha", "+eval", "+get", "+set", "+del", "+time", "+ping", "+hello"}
	if err := admin.Do(t.Context(), rules...).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv.addr(), func(o *redis.Options) { o.Username, o.Password = "limiter", "secret" })
	var (
		mu   sync.Mutex
		logs []string
	)
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithEvictionCheck(logf))
	if err != nil {
		t.Fatalf("New with CONFIG denied: %v", err)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "could not read maxmemory-policy") {
		t.Fatalf("eviction check logs %q, want one line saying CONFIG could not be read", logs)
	}
	for _, alg := range testAlgorithms() {
		checks := []ratelimit.Check{
			{Namespace: alg.Name(), Key: "a", Algorithm: alg, Limit: ratelimit.PerHour(1), Cost: 1},
			{Namespace: alg.Name(), Key: "b", Algorithm: alg, Limit: ratelimit.PerHour(1), Cost: 1},
		}
		if o, err := st.Apply(t.Context(), checks[0]); err != nil || !o.Allowed {
			t.Fatalf("%s Apply as limited user: %+v %v", alg.Name(), o, err)
		}
		if ok, err := st.ApplyAll(t.Context(), checks, make([]ratelimit.Outcome, 2)); err != nil || ok {
			t.Fatalf("%s ApplyAll as limited user: %v %v (want denied: a is spent)", alg.Name(), ok, err)
		}
		if err := st.Reset(t.Context(), alg.Name(), "a"); err != nil {
			t.Fatalf("%s Reset as limited user: %v", alg.Name(), err)
		}
	}
	// The same user cannot touch keys outside the prefix: the ACL is real.
	other, err := redisstore.New(c, redisstore.WithPrefix("elsewhere:"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Apply(t.Context(), ratelimit.Check{Namespace: "n", Key: "k", Algorithm: testAlgorithms()[1], Limit: ratelimit.PerHour(1), Cost: 1})
	if !errors.Is(err, ratelimit.ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Apply outside the ACL's key pattern = %v, want ErrUnavailable wrapping NOPERM", err)
	}
}

// TestEvictionCheck warns when maxmemory-policy may evict limiter keys
// and stays silent under noeviction.
func TestEvictionCheck(t *testing.T) {
	srv := startServer(t)
	admin := newClient(t, srv.addr())
	for _, tt := range []struct {
		policy string
		warn   bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true},
		{"volatile-ttl", true},
	} {
		t.Run("policy="+tt.policy, func(t *testing.T) {
			if err := admin.ConfigSet(t.Context(), "maxmemory-policy", tt.policy).Err(); err != nil {
				t.Fatal(err)
			}
			var logs []string
			_, err := redisstore.New(admin, redisstore.WithEvictionCheck(func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }))
			if err != nil {
				t.Fatal(err)
			}
			warned := len(logs) == 1 && strings.Contains(logs[0], tt.policy)
			if warned != tt.warn || (!tt.warn && len(logs) != 0) {
				t.Fatalf("logs %q, want a warning: %v", logs, tt.warn)
			}
		})
	}
}

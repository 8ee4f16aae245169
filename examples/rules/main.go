// Command rules loads rules.yaml (per-IP, per-user with plans,
// per-user-and-endpoint, and global rules) and decides a few requests
// against it on the embedded memory store, printing which rule decided.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/policy"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// request is one API call: who makes it, on which plan, to which endpoint.
type request struct {
	ip, user, plan, endpoint string
}

// descriptors derives the request's descriptors, as an HTTP middleware
// would: one per rule family, anonymous callers having no user ones.
func (r request) descriptors() []policy.Descriptor {
	ds := []policy.Descriptor{
		{{Key: "remote_address", Value: r.ip}},
		{{Key: "generic_key", Value: "global"}},
	}
	if r.user != "" {
		user := policy.Descriptor{{Key: "user", Value: r.user}}
		if r.plan != "" {
			user = append(policy.Descriptor{{Key: policy.PlanKey, Value: r.plan}}, user...)
		}
		ds = append(ds, user, append(user[:len(user):len(user)], policy.Entry{Key: "endpoint", Value: r.endpoint}))
	}
	return ds
}

func run(ctx context.Context) error {
	set, err := policy.Load(rulesPath())
	if err != nil {
		return err
	}
	engine, err := policy.New(set)
	if err != nil {
		return err
	}
	calls := []struct {
		who string
		req request
		n   int
	}{
		{"anonymous 10.0.0.1", request{ip: "10.0.0.1"}, 3},
		{"alice (free) on /search", request{ip: "10.0.0.2", user: "alice", endpoint: "/search"}, 4},
		{"bob (free) on /login", request{ip: "10.0.0.3", user: "bob", endpoint: "/login"}, 3},
		{"carol (pro) on /search", request{ip: "10.0.0.4", user: "carol", plan: "pro", endpoint: "/search"}, 4},
		{"dave (enterprise) on /search", request{ip: "10.0.0.5", user: "dave", plan: "enterprise", endpoint: "/search"}, 3},
		{"erin (pro) on /search", request{ip: "10.0.0.6", user: "erin", plan: "pro", endpoint: "/search"}, 1},
	}
	for _, c := range calls {
		for i := range c.n {
			res, err := engine.Decide(ctx, "api", c.req.descriptors(), 1)
			if err != nil {
				return err
			}
			fmt.Printf("%-30s call %d: %s\n", c.who, i+1, verdict(res))
		}
	}
	return nil
}

// verdict names the rule that decided: the one that denied, or the one
// with the fewest requests left.
func verdict(res policy.Result) string {
	st, ok := res.Strictest()
	switch {
	case !ok:
		return "allowed (no limited rule applies)"
	case !res.Allowed:
		return fmt.Sprintf("denied by %s, retry in %s", st.Decision.Rule, st.Decision.RetryAfter.Round(time.Second))
	}
	return fmt.Sprintf("allowed, %d left on %s", st.Decision.Remaining, st.Decision.Rule)
}

// rulesPath finds rules.yaml beside this file, wherever go run starts.
func rulesPath() string {
	if _, err := os.Stat("rules.yaml"); err == nil {
		return "rules.yaml"
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "rules.yaml")
}

package policy_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/policy"
)

func Example() {
	config, err := policy.Parse("rules.yaml", []byte(`
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: year
      requests_per_unit: 2
      plans:
        pro: 3/year
    descriptors:
      - key: endpoint
        value: /login
        rate_limit: 1/year
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	set, err := policy.NewSet(config)
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New()
	defer store.Close()
	engine, err := policy.New(set, policy.WithStore(store))
	if err != nil {
		fmt.Println(err)
		return
	}
	login := []policy.Descriptor{
		{{Key: "user", Value: "alice"}},
		{{Key: "user", Value: "alice"}, {Key: "endpoint", Value: "/login"}},
	}
	for range 2 {
		res, _ := engine.Decide(context.Background(), "api", login, 1)
		st, _ := res.Strictest()
		fmt.Println(res.Allowed, st.Decision.Rule, st.Decision.Remaining)
	}
	pro := []policy.Descriptor{{{Key: "plan", Value: "pro"}, {Key: "user", Value: "alice"}}}
	res, _ := engine.Decide(context.Background(), "api", pro, 1)
	fmt.Println(res.Allowed, res.Statuses[0].Plan, res.Statuses[0].Decision.Remaining)
	// Output:
	// true api.user.endpoint_/login 0
	// false api.user.endpoint_/login 0
	// true pro 1
}

package policy_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/policy"
)

func newEngine(t *testing.T, yamlText string) *policy.Engine {
	t.Helper()
	c, err := policy.Parse("test.yaml", []byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.NewSet(c)
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := policy.New(set, policy.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func desc(kv ...string) policy.Descriptor {
	var d policy.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d = append(d, policy.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestSmoke(t *testing.T) {
	e := newEngine(t, `
domain: api
descriptors:
  - key: user_id
    descriptors:
      - key: endpoint
        value: /login
        rate_limit: 2/minute
`)
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		res, err := e.Decide(ctx, "api", []policy.Descriptor{desc("user_id", "u1", "endpoint", "/login")}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != want {
			t.Fatalf("call %d: allowed %v, want %v (%+v)", i, res.Allowed, want, res)
		}
	}
}

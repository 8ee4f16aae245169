package policy_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	sluice "github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/policy"
)

const benchRules = `
domain: api
descriptors:
  - key: remote_address
    rate_limit: 1000000000/second
  - key: user
    rate_limit: 1000000000/second
    descriptors:
      - key: endpoint
        rate_limit: 1000000000/second
  - key: generic_key
    value: global
    rate_limit: 1000000000/second
`

// BenchmarkFourRules decides a request of four rules (per IP, per user,
// per user and endpoint, global) through the policy engine and through a
// hand-built Composite of the same rules, on the memory store. Besides
// sec/op it reports cpu-sec/op, the process's CPU time per decision
// (garbage collection included): on a shared machine the wall time of a
// benchmark mostly measures the other tenants, its CPU time much less.
func BenchmarkFourRules(b *testing.B) {
	const keys = 1024
	ips, users := make([]string, keys), make([]string, keys)
	for i := range keys {
		ips[i], users[i] = "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), "user-"+strconv.Itoa(i)
	}
	ctx := context.Background()
	b.Run("via=policy", func(b *testing.B) {
		st, err := memstore.New()
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		e, err := policy.New(mustSet(b, benchRules), policy.WithStore(st))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			i = (i + 1) % keys
			res, err := e.Decide(ctx, "api", []policy.Descriptor{
				{{Key: "remote_address", Value: ips[i]}},
				{{Key: "user", Value: users[i]}},
				{{Key: "user", Value: users[i]}, {Key: "endpoint", Value: "/login"}},
				{{Key: "generic_key", Value: "global"}},
			}, 1)
			if err != nil || !res.Allowed {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("via=composite", func(b *testing.B) {
		st, err := memstore.New()
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		l := sluice.Limit{Count: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
		c, err := sluice.NewComposite([]sluice.Rule{
			{Name: "api.remote_address", Algorithm: fixedwindow.New(), Limit: l, FailOpen: true},
			{Name: "api.user", Algorithm: fixedwindow.New(), Limit: l, FailOpen: true},
			{Name: "api.user.endpoint", Algorithm: fixedwindow.New(), Limit: l, FailOpen: true},
			{Name: "api.generic_key_global", Algorithm: fixedwindow.New(), Limit: l, FailOpen: true},
		}, sluice.WithStore(st))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			i = (i + 1) % keys
			d, err := c.AllowN(ctx, 1, ips[i], users[i], users[i]+"\x00/login", "*")
			if err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}

// reportCPU starts measuring the process's CPU time; the function it
// returns reports it per op as cpu-sec/op.
func reportCPU(b *testing.B) func() {
	start := cputime.Process()
	return func() {
		if cpu := cputime.Process() - start; cpu > 0 && b.N > 0 {
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-sec/op")
		}
	}
}

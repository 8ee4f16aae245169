package policy_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	sluice "github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/fakeclock"
	"github.com/sluicehq/sluice/internal/faultstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/policy/policytest"
)

// memEngine returns an engine for the YAML texts on a private memory
// store reading clk.
func memEngine(t testing.TB, clk ratelimit.Clock, texts ...string) *policy.Engine {
	t.Helper()
	st, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e, err := policy.New(mustSet(t, texts...), policy.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The helpers policytest exports, under short names.
var (
	mustSet  = policytest.MustSet
	desc     = policytest.Desc
	decide   = policytest.Decide
	admitted = policytest.Admitted
)

// messaging is the envoyproxy/ratelimit README's messaging example.
const messaging = policytest.EnvoyMessaging

func TestEnvoyNestedDescriptors(t *testing.T) {
	e := memEngine(t, fakeclock.New(), messaging)
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	if got := admitted(t, e, "messaging", 7, marketing, number); got != 5 {
		t.Fatalf("marketing to one number: %d admitted, want 5", got)
	}
	res := decide(t, e, "messaging", 0, marketing, number)
	if !res.Statuses[0].Matched || res.Statuses[0].Decision.Rule != "messaging.message_type_marketing.to_number" ||
		res.Statuses[1].Decision.Rule != "messaging.to_number" || res.Statuses[1].Decision.Remaining != 95 {
		t.Fatalf("statuses %+v: want derived names and 95 left per number (denials took nothing)", res.Statuses)
	}
	// Another number has its own buckets.
	if got := admitted(t, e, "messaging", 5, desc("message_type", "marketing", "to_number", "2062222222")); got != 5 {
		t.Fatalf("another number: %d admitted, want 5", got)
	}
	// Depth must match: a longer request descriptor, a level without a
	// rule, an unknown key, all match nothing and are admitted.
	for _, d := range []policy.Descriptor{
		desc("to_number", "2061111111", "extra", "x"),
		desc("message_type", "marketing"),
		desc("message_type", "transactional", "to_number", "2061111111"),
		desc("nope", "x"),
	} {
		res := decide(t, e, "messaging", 1, d)
		if !res.Allowed || res.Statuses[0].Matched {
			t.Errorf("%v: %+v, want admitted, unmatched", d, res)
		}
	}
}

func TestEnvoyDenyListAndExactOverride(t *testing.T) {
	e := memEngine(t, fakeclock.New(), policytest.EnvoyPerIP+`
  - key: remote_address
    value: 10.0.0.1
    rate_limit: 1000/second
`)
	if got := admitted(t, e, "edge_proxy_per_ip", 12, desc("remote_address", "50.0.0.1")); got != 10 {
		t.Fatalf("an IP: %d admitted, want 10", got)
	}
	res := decide(t, e, "edge_proxy_per_ip", 1, desc("remote_address", "50.0.0.5"))
	if res.Allowed || res.Statuses[0].Decision.RetryAfter != sluice.Never {
		t.Fatalf("the denied IP: %+v, want denied, RetryAfter Never", res)
	}
	if got := admitted(t, e, "edge_proxy_per_ip", 50, desc("remote_address", "10.0.0.1")); got != 50 {
		t.Fatalf("the trusted IP: %d admitted, want 50 (its exact rule wins)", got)
	}
}

func TestWildcardsMostSpecificAndShared(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: files
descriptors:
  - key: path
    value: /files/*
    rate_limit: 2/minute
  - key: path
    value: /files/big/*
    share_threshold: true
    rate_limit: 3/minute
  - key: path
    value: /files/big/exact
    rate_limit: 1/minute
  - key: path
    rate_limit: 100/minute
`)
	if got := admitted(t, e, "files", 3, desc("path", "/files/a.pdf")); got != 2 {
		t.Fatalf("/files/a.pdf: %d, want 2", got)
	}
	if got := admitted(t, e, "files", 3, desc("path", "/files/b.csv")); got != 2 {
		t.Fatalf("/files/b.csv: %d, want 2 (a bucket per value without share_threshold)", got)
	}
	big := admitted(t, e, "files", 2, desc("path", "/files/big/1")) + admitted(t, e, "files", 2, desc("path", "/files/big/2"))
	if big != 3 {
		t.Fatalf("/files/big/*: %d admitted over two values, want 3 (one shared bucket)", big)
	}
	res := decide(t, e, "files", 1, desc("path", "/files/big/exact"))
	if res.Statuses[0].Decision.Rule != "files.path_/files/big/exact" {
		t.Fatalf("exact value: rule %q, want the exact one", res.Statuses[0].Decision.Rule)
	}
	if res := decide(t, e, "files", 1, desc("path", "/other")); res.Statuses[0].Decision.Rule != "files.path" {
		t.Fatalf("other path: rule %q, want the key-only one", res.Statuses[0].Decision.Rule)
	}
}

func TestReplacesUnlimitedShadow(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: category
    value: read
    descriptors:
      - key: user
        rate_limit:
          name: read
          unit: minute
          requests_per_unit: 2
  - key: path
    value: /reports
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 5
          replaces:
            - name: read
  - key: user
    value: vip
    rate_limit:
      unlimited: true
  - key: user
    shadow_mode: true
    rate_limit: 3/minute
`)
	read := func(user string) policy.Descriptor { return desc("category", "read", "user", user) }
	reports := func(user string) policy.Descriptor { return desc("path", "/reports", "user", user) }
	// /reports replaces the read category's limit: 5, not 2, and read's
	// bucket is untouched.
	if got := admitted(t, e, "api", 6, read("ann"), reports("ann")); got != 5 {
		t.Fatalf("reports: %d admitted, want 5", got)
	}
	res := decide(t, e, "api", 1, read("ann"))
	if !res.Allowed || res.Statuses[0].Decision.Remaining != 1 {
		t.Fatalf("read after replaced calls: %+v, want allowed with 1 left (nothing taken before)", res)
	}
	res = decide(t, e, "api", 1, read("ann"), reports("ann"))
	if res.Statuses[0].Matched || !res.Statuses[1].Matched {
		t.Fatalf("statuses %+v: want read unmatched (replaced)", res.Statuses)
	}
	// unlimited: no store, Remaining max.
	res = decide(t, e, "api", 1000, desc("user", "vip"))
	if !res.Allowed || !res.Statuses[0].Unlimited || res.Statuses[0].Decision.Remaining != 1<<63-1 {
		t.Fatalf("vip: %+v", res)
	}
	// shadow_mode: decided, reported, never denies; a shadow denial takes
	// nothing from the shadow rule.
	for i := range 5 {
		res := decide(t, e, "api", 1, desc("user", "bob"))
		st := res.Statuses[0]
		if !res.Allowed || !st.Shadow || st.Decision.Allowed != (i < 3) {
			t.Fatalf("shadow call %d: %+v", i, res)
		}
	}
}

// TestShadowAtomicity pins how shadow rules take part in the composite:
// an enforced denial takes nothing from anyone; a shadow denial lets the
// request through and takes it from the enforced rules only.
func TestStrictest(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: user
    rate_limit: 3/minute
  - key: ip
    rate_limit: 5/minute
  - key: shadow
    shadow_mode: true
    rate_limit: 1/minute
  - key: vip
    rate_limit: {unlimited: true}
`)
	if _, ok := decide(t, e, "api", 1, desc("vip", "v"), desc("nope", "x")).Strictest(); ok {
		t.Fatal("a strictest rule among unlimited and unmatched ones")
	}
	ds := []policy.Descriptor{desc("ip", "i"), desc("user", "u"), desc("shadow", "s"), desc("vip", "v")}
	for i, want := range []int64{2, 1, 0} {
		st, ok := decide(t, e, "api", 1, ds...).Strictest()
		if !ok || st.Decision.Rule != "api.user" || st.Decision.Remaining != want {
			t.Fatalf("call %d: strictest %+v, want api.user with %d left (the shadow rule never decides)", i, st, want)
		}
	}
	res := decide(t, e, "api", 1, ds...)
	st, ok := res.Strictest()
	if res.Allowed || !ok || st.Decision.Allowed || st.Decision.Rule != "api.user" {
		t.Fatalf("4th call: %+v, strictest %+v, want denied by api.user", res, st)
	}
}

func TestShadowAtomicity(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: user
    rate_limit: 3/minute
  - key: ip
    shadow_mode: true
    rate_limit: 2/minute
`)
	user, ip := desc("user", "u"), desc("ip", "1.1.1.1")
	for i := range 3 {
		res := decide(t, e, "api", 1, user, ip)
		if !res.Allowed || res.Statuses[1].Decision.Allowed != (i < 2) {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	res := decide(t, e, "api", 1, user, ip)
	if res.Allowed || res.Statuses[0].Decision.Allowed {
		t.Fatalf("4th: %+v, want denied by user", res)
	}
	res = decide(t, e, "api", 0, desc("user", "v"), ip)
	if res.Statuses[1].Decision.Remaining != 0 || res.Statuses[0].Decision.Remaining != 3 {
		t.Fatalf("peek: %+v, want ip 0 left, a fresh user 3", res)
	}
}

func TestPlansKeepOneBucket(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
      plans:
        pro: 5/minute
        enterprise:
          unlimited: true
  - key: plan
    value: legacy
    descriptors:
      - key: user
        rate_limit: 1/minute
`)
	if got := admitted(t, e, "api", 3, desc("user", "a")); got != 2 {
		t.Fatalf("no plan: %d, want the base 2", got)
	}
	if got := admitted(t, e, "api", 3, desc("plan", "free", "user", "b")); got != 2 {
		t.Fatalf("an unknown plan: %d, want the base 2", got)
	}
	res := decide(t, e, "api", 1, desc("plan", "pro", "user", "a"))
	if !res.Allowed || res.Statuses[0].Plan != "pro" || res.Statuses[0].Decision.Remaining != 2 {
		t.Fatalf("a upgraded to pro: %+v, want allowed with 2 left (its 2 taken carry over)", res)
	}
	res = decide(t, e, "api", 1, desc("user", "c", "plan", "enterprise"))
	if !res.Allowed || !res.Statuses[0].Unlimited || res.Statuses[0].Plan != "enterprise" {
		t.Fatalf("enterprise (plan entry last): %+v", res)
	}
	// A level keyed plan is matched natively, envoy style.
	if got := admitted(t, e, "api", 2, desc("plan", "legacy", "user", "d")); got != 1 {
		t.Fatalf("native plan level: %d, want 1", got)
	}
}

func TestGlobalAndPerUserEndpoint(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: generic_key
    value: global
    rate_limit: 4/minute
  - key: user_id
    descriptors:
      - key: endpoint
        value: /login
        rate_limit: 5/minute
`)
	global := desc("generic_key", "global")
	if got := admitted(t, e, "api", 2, global, desc("user_id", "a", "endpoint", "/login")) +
		admitted(t, e, "api", 3, global, desc("user_id", "b", "endpoint", "/login")); got != 4 {
		t.Fatalf("global across users: %d, want 4", got)
	}
	res := decide(t, e, "api", 0, desc("user_id", "a", "endpoint", "/login"))
	if res.Statuses[0].Decision.Remaining != 3 {
		t.Fatalf("user a: %+v, want 3 left (2 taken)", res)
	}
}

func TestSwapKeepsBucketsByIdentity(t *testing.T) {
	clk := fakeclock.New()
	e := memEngine(t, clk, `
domain: api
descriptors:
  - key: user
    rate_limit: 5/minute
  - key: ip
    rate_limit:
      name: per-ip
      unit: minute
      requests_per_unit: 5
  - key: gone
    rate_limit: 1/minute
`)
	if admitted(t, e, "api", 3, desc("user", "u"), desc("ip", "i")) != 3 {
		t.Fatal("setup")
	}
	// Limits change; per-ip moves under a parent level but keeps its name.
	if err := e.Swap(mustSet(t, `
domain: api
descriptors:
  - key: user
    rate_limit: 4/minute
  - key: zone
    value: eu
    descriptors:
      - key: ip
        rate_limit:
          name: per-ip
          unit: minute
          requests_per_unit: 6
`)); err != nil {
		t.Fatal(err)
	}
	res := decide(t, e, "api", 0, desc("user", "u"), desc("zone", "eu", "ip", "i"), desc("gone", "x"))
	if res.Statuses[0].Decision.Remaining != 1 || res.Statuses[1].Decision.Remaining != 3 || res.Statuses[2].Matched {
		t.Fatalf("after swap: %+v; want user 1 left, per-ip 3 left (kept), gone unmatched", res.Statuses)
	}
	// An algorithm change converts: 3 of 4 used stays 3 used.
	if err := e.Swap(mustSet(t, `
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 4
      algorithm: tokenbucket
`)); err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, e, "api", 3, desc("user", "u")); got != 1 {
		t.Fatalf("after switching to a token bucket: %d admitted, want 1", got)
	}
	if _, err := e.Decide(context.Background(), "api", []policy.Descriptor{desc("ip", "i")}, 1); err != nil {
		t.Fatal(err)
	}
	if e.Set() == nil || len(e.Set().Rules()) != 1 {
		t.Fatalf("Set() after the swaps: %v", e.Set().Rules())
	}
	if err := e.Swap(nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("Swap(nil) = %v", err)
	}
}

func TestDecideErrors(t *testing.T) {
	e := memEngine(t, fakeclock.New(), messaging)
	ctx := context.Background()
	cases := []struct {
		domain string
		ds     []policy.Descriptor
		hits   int64
		want   error
	}{
		{"nope", []policy.Descriptor{desc("to_number", "1")}, 1, policy.ErrUnknownDomain},
		{"messaging", nil, 1, sluice.ErrInvalid},
		{"messaging", []policy.Descriptor{{}}, 1, sluice.ErrInvalid},
		{"messaging", []policy.Descriptor{{{Key: "", Value: "x"}}}, 1, sluice.ErrInvalid},
		{"messaging", []policy.Descriptor{{{Key: "to_number", Value: ""}}}, 1, sluice.ErrInvalid},
		{"messaging", []policy.Descriptor{desc("to_number", "1")}, -1, sluice.ErrInvalid},
		{"messaging", []policy.Descriptor{desc("to_number", "1")}, ratelimit.MaxCost + 1, sluice.ErrInvalid},
		{"messaging", []policy.Descriptor{desc("to_number", strings.Repeat("x", ratelimit.MaxKeyLen+1))}, 1, sluice.ErrInvalid},
	}
	for _, c := range cases {
		if _, err := e.Decide(ctx, c.domain, c.ds, c.hits); !errors.Is(err, c.want) {
			t.Errorf("Decide(%q, %v, %d) = %v, want %v", c.domain, c.ds, c.hits, err, c.want)
		}
	}
}

func TestFailurePolicies(t *testing.T) {
	set := mustSet(t, `
domain: api
descriptors:
  - key: open
    rate_limit: 5/minute
  - key: closed
    rate_limit:
      unit: minute
      requests_per_unit: 5
      on_failure: closed
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 5
      on_failure: closed
`)
	e, err := policy.New(set, policy.WithStore(faultstore.Down()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := e.Decide(ctx, "api", []policy.Descriptor{desc("open", "x"), desc("shadow", "x")}, 1)
	if err != nil || !res.Allowed || !res.Statuses[0].Decision.ByPolicy || res.Statuses[1].Decision.Allowed {
		t.Fatalf("open + closed shadow: %+v %v, want allowed (shadow never denies)", res, err)
	}
	res, err = e.Decide(ctx, "api", []policy.Descriptor{desc("open", "x"), desc("closed", "x")}, 1)
	if !errors.Is(err, sluice.ErrUnavailable) || res.Allowed {
		t.Fatalf("open + closed: %+v %v, want denied with ErrUnavailable", res, err)
	}
}

func TestNewAndWatchValidate(t *testing.T) {
	set := mustSet(t, messaging)
	for name, opts := range map[string][]policy.Option{
		"nil option":   {nil},
		"nil store":    {policy.WithStore(nil)},
		"nil sink":     {policy.WithSink(nil)},
		"queue 0":      {policy.WithQueueSize(0)},
		"nil logger":   {policy.WithLogger(nil)},
		"nil observer": {policy.WithObserver(nil)},
	} {
		if _, err := policy.New(set, opts...); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := policy.New(nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("New(nil) = %v", err)
	}
	empty, err := policy.NewSet()
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.New(empty)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Decide(context.Background(), "messaging", []policy.Descriptor{desc("to_number", "1")}, 1); !errors.Is(err, policy.ErrUnknownDomain) {
		t.Fatalf("empty set: %v", err)
	}
	if err := e.Swap(set); err != nil {
		t.Fatal(err)
	}
	if res := decide(t, e, "messaging", 1, desc("to_number", "1")); !res.Statuses[0].Matched {
		t.Fatalf("after swapping rules into an empty engine: %+v", res)
	}
	ctx := context.Background()
	if _, err := policy.Watch(ctx, t.TempDir(), nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("Watch(nil engine) = %v", err)
	}
	if _, err := policy.Watch(ctx, "/nonexistent/rules", e); err == nil {
		t.Error("Watch of a missing path: no error")
	}
	if _, err := loadText(t, "domain: [\n"); err == nil {
		t.Fatal("setup")
	}
	var ce *policy.ConfigError
	if _, err := policy.Watch(ctx, "bad.yaml", e); !errors.As(err, &ce) {
		t.Errorf("Watch of a bad file = %v, want its ConfigError", err)
	}
}

func TestWildcardMiddleAndNested(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: path
    value: /v*/users/*
    descriptors:
      - key: method
        value: POST
        rate_limit: 1/minute
  - key: tenant
    value: acme-*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: 2/minute
`)
	post := func(path string) policy.Descriptor { return desc("path", path, "method", "POST") }
	if got := admitted(t, e, "api", 2, post("/v1/users/7")); got != 1 {
		t.Fatalf("/v1/users/7: %d, want 1", got)
	}
	if got := admitted(t, e, "api", 2, post("/v2/users/7")); got != 1 {
		t.Fatalf("/v2/users/7: %d, want 1 (its own bucket)", got)
	}
	if res := decide(t, e, "api", 1, post("/v1/groups/7")); res.Statuses[0].Matched {
		t.Fatalf("/v1/groups/7 matched %q", res.Statuses[0].Decision.Rule)
	}
	// The shared wildcard adds nothing to the key: one bucket per user
	// across every acme-* tenant.
	if got := admitted(t, e, "api", 2, desc("tenant", "acme-eu", "user", "u")) + admitted(t, e, "api", 2, desc("tenant", "acme-us", "user", "u")); got != 2 {
		t.Fatalf("user u across acme tenants: %d, want 2", got)
	}
	if got := admitted(t, e, "api", 2, desc("tenant", "acme-eu", "user", "v")); got != 2 {
		t.Fatalf("user v: %d, want 2 (a bucket per user)", got)
	}
}

// TestReplacedRulesStillReplace pins envoy's rule that a replaced rule's
// own replaces still apply, whatever the order of the descriptors.
func TestReplacedRulesStillReplace(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: a
    rate_limit: {name: a, unit: minute, requests_per_unit: 1, replaces: [c]}
  - key: b
    rate_limit: {name: b, unit: minute, requests_per_unit: 5}
  - key: c
    rate_limit: {name: c, unit: minute, requests_per_unit: 5, replaces: [a]}
`)
	res := decide(t, e, "api", 1, desc("a", "x"), desc("b", "x"), desc("c", "x"))
	if res.Statuses[0].Matched || !res.Statuses[1].Matched || res.Statuses[2].Matched {
		t.Fatalf("statuses %+v: want a and c replaced by each other, b decided", res.Statuses)
	}
}

// TestKeysOfSeveralValuesNeverCollide checks that values joined into one
// bucket key cannot be confused by moving a separator between them.
func TestKeysOfSeveralValuesNeverCollide(t *testing.T) {
	e := memEngine(t, fakeclock.New(), `
domain: api
descriptors:
  - key: user
    descriptors:
      - key: endpoint
        rate_limit: 1/minute
        descriptors:
          - key: method
            rate_limit: 1/minute
`)
	for _, d := range []policy.Descriptor{
		desc("user", "a:1", "endpoint", "b"),
		desc("user", "a", "endpoint", "1:b"),
		desc("user", "3:a", "endpoint", "b"),
		desc("user", "a", "endpoint", "b", "method", "GET"),
		desc("user", "a", "endpoint", "b", "method", "POST"),
		desc("user", "a", "endpoint", "bmethod", "method", "GET"),
	} {
		if got := admitted(t, e, "api", 2, d); got != 1 {
			t.Errorf("%v: %d admitted, want 1 (a bucket of its own)", d, got)
		}
	}
}

func TestManyKeysAtOneLevel(t *testing.T) {
	text := "domain: api\ndescriptors:\n"
	for i := range 12 {
		text += "  - key: k" + strconv.Itoa(i) + "\n    rate_limit: " + strconv.Itoa(i+1) + "/minute\n"
	}
	e := memEngine(t, fakeclock.New(), text)
	for i := range 12 {
		res := decide(t, e, "api", 0, desc("k"+strconv.Itoa(i), "v"))
		if st := res.Statuses[0]; !st.Matched || st.Decision.Limit.Count != int64(i+1) {
			t.Fatalf("k%d: %+v, want its %d/minute rule", i, st, i+1)
		}
	}
	if res := decide(t, e, "api", 0, desc("k12", "v")); res.Statuses[0].Matched {
		t.Fatal("k12 matched")
	}
}

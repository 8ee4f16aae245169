// Package policytest checks that a store decides policy rule sets exactly
// as docs/policy.md states: envoyproxy/ratelimit configurations (nested
// descriptors, wildcards, replaces, unlimited, shadow mode, deny lists),
// the seeds' YAML, plans, a global limit, and a reload under 64
// concurrent callers that keeps every bucket.
//
// A store's tests call Run with a function returning a fresh store (or a
// fresh namespace of a shared server) for each scenario:
//
//	policytest.Run(t, func(t *testing.T) ratelimit.Store { return newStore(t) })
//
// The scenarios use the store's clock. Limits are per month or year, so
// that no window boundary falls inside a scenario, except the seeds' 5 per
// minute, which is retried if a minute boundary passes while it runs. The
// counts are exact only if the store answers within the rules' budgets:
// most rules set 2 s, but the seeds' short form sets none, so give a
// remote store a generous default budget (ratelimit.Budgeter) on a loaded
// machine, as conformance/e2e does.
package policytest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sluice "github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/policy"
)

// Run runs every scenario as a subtest, each on a store from newStore.
func Run(t *testing.T, newStore func(t *testing.T) ratelimit.Store) {
	t.Run("EnvoyNested", func(t *testing.T) { envoyNested(t, newStore(t)) })
	t.Run("DenyListWildcards", func(t *testing.T) { denyListWildcards(t, newStore(t)) })
	t.Run("ReplacesUnlimitedShadow", func(t *testing.T) { replacesUnlimitedShadow(t, newStore(t)) })
	t.Run("SeedsYAML", func(t *testing.T) { seedsYAML(t, newStore) })
	t.Run("Plans", func(t *testing.T) { plans(t, newStore(t)) })
	t.Run("ReloadUnderLoad", func(t *testing.T) { reloadUnderLoad(t, newStore(t)) })
}

// MustSet parses the YAML texts, one domain each, into a Set, failing t
// on an error.
func MustSet(t testing.TB, texts ...string) *policy.Set {
	t.Helper()
	var cs []policy.Config
	for _, text := range texts {
		c, err := policy.Parse("policytest.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	set, err := policy.NewSet(cs...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func newEngine(t *testing.T, st ratelimit.Store, text string) *policy.Engine {
	t.Helper()
	e, err := policy.New(MustSet(t, text), policy.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Desc builds a request descriptor from key, value pairs.
func Desc(kv ...string) policy.Descriptor {
	var out policy.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, policy.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// Decide calls e.Decide, failing t on an error or on a status count other
// than one per descriptor.
func Decide(t testing.TB, e *policy.Engine, domain string, hits int64, ds ...policy.Descriptor) policy.Result {
	t.Helper()
	res, err := e.Decide(t.Context(), domain, ds, hits)
	if err != nil {
		t.Fatalf("Decide(%v): %v", ds, err)
	}
	if len(res.Statuses) != len(ds) {
		t.Fatalf("Decide(%v): %d statuses", ds, len(res.Statuses))
	}
	return res
}

// Admitted makes tries calls of one hit each and counts the admitted ones.
func Admitted(t testing.TB, e *policy.Engine, domain string, tries int, ds ...policy.Descriptor) int {
	t.Helper()
	n := 0
	for range tries {
		if Decide(t, e, domain, 1, ds...).Allowed {
			n++
		}
	}
	return n
}

// EnvoyMessaging is the envoyproxy/ratelimit README's messaging example
// (its example 2): a nested rule for marketing messages to one number
// under a general per-number rule. The metadata, which Sluice accepts and
// ignores, is not the README's.
const EnvoyMessaging = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    metadata: {owner: messaging-team}
    rate_limit:
      unit: day
      requests_per_unit: 100
`

// EnvoyPerIP is the README's per-IP example (its example 3): 10 a second
// per remote address, and a deny list of one address (0 a second). It
// ends in its descriptor list, so rules appended to it join that list.
const EnvoyPerIP = `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`

func envoyNested(t *testing.T, st ratelimit.Store) {
	e := newEngine(t, st, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: month, requests_per_unit: 5, budget: 2s}
  - key: to_number
    rate_limit: {unit: month, requests_per_unit: 100, budget: 2s}
`)
	marketing := Desc("message_type", "marketing", "to_number", "2061111111")
	number := Desc("to_number", "2061111111")
	if got := Admitted(t, e, "messaging", 7, marketing, number); got != 5 {
		t.Fatalf("marketing to one number: %d admitted, want 5", got)
	}
	res := Decide(t, e, "messaging", 0, marketing, number)
	if res.Statuses[1].Decision.Remaining != 95 {
		t.Fatalf("per number: %+v, want 95 left (the 2 denials took nothing)", res.Statuses[1])
	}
	if res := Decide(t, e, "messaging", 1, Desc("to_number", "2061111111", "extra", "x")); !res.Allowed || res.Statuses[0].Matched {
		t.Fatalf("a deeper request descriptor: %+v, want unmatched", res)
	}
}

func denyListWildcards(t *testing.T, st ratelimit.Store) {
	e := newEngine(t, st, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: year, requests_per_unit: 3, budget: 2s}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /files/*
    rate_limit: {unit: year, requests_per_unit: 2, budget: 2s}
  - key: path
    value: /files/big/*
    share_threshold: true
    rate_limit: {unit: year, requests_per_unit: 3, budget: 2s}
`)
	if got := Admitted(t, e, "edge", 5, Desc("remote_address", "50.0.0.1")); got != 3 {
		t.Fatalf("an IP: %d, want 3", got)
	}
	if res := Decide(t, e, "edge", 1, Desc("remote_address", "50.0.0.5")); res.Allowed || res.Statuses[0].Decision.RetryAfter != sluice.Never {
		t.Fatalf("the denied IP: %+v", res)
	}
	if got := Admitted(t, e, "edge", 3, Desc("path", "/files/a")) + Admitted(t, e, "edge", 3, Desc("path", "/files/b")); got != 4 {
		t.Fatalf("/files/*: %d over two values, want 2 each", got)
	}
	if got := Admitted(t, e, "edge", 2, Desc("path", "/files/big/a")) + Admitted(t, e, "edge", 2, Desc("path", "/files/big/b")); got != 3 {
		t.Fatalf("/files/big/* shared: %d over two values, want 3", got)
	}
}

func replacesUnlimitedShadow(t *testing.T, st ratelimit.Store) {
	e := newEngine(t, st, `
domain: api
descriptors:
  - key: category
    value: read
    descriptors:
      - key: user
        rate_limit: {name: read, unit: year, requests_per_unit: 2, budget: 2s}
  - key: path
    value: /reports
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 5, budget: 2s, replaces: [{name: read}]}
  - key: user
    value: vip
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {unit: year, requests_per_unit: 3, budget: 2s}
  - key: ip
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 2, budget: 2s}
`)
	read, reports := Desc("category", "read", "user", "ann"), Desc("path", "/reports", "user", "ann")
	if got := Admitted(t, e, "api", 6, read, reports); got != 5 {
		t.Fatalf("reports replacing read: %d, want 5", got)
	}
	if res := Decide(t, e, "api", 0, read); res.Statuses[0].Decision.Remaining != 2 {
		t.Fatalf("read after being replaced: %+v, want untouched (2 left)", res.Statuses[0])
	}
	if res := Decide(t, e, "api", 1_000_000, Desc("user", "vip")); !res.Allowed || !res.Statuses[0].Unlimited {
		t.Fatalf("vip: %+v", res)
	}
	// user 3 enforced, ip 2 in shadow: 3 admitted, ip's third is a shadow
	// denial that takes nothing from ip, and the 4th is denied by user.
	user, ip := Desc("user", "bob"), Desc("ip", "1.1.1.1")
	for i, want := range []bool{true, true, true, false} {
		res := Decide(t, e, "api", 1, user, ip)
		if res.Allowed != want || res.Statuses[1].Decision.Allowed != (i < 2) || !res.Statuses[1].Shadow {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	res := Decide(t, e, "api", 0, Desc("user", "carol"), ip)
	if res.Statuses[0].Decision.Remaining != 3 || res.Statuses[1].Decision.Remaining != 0 {
		t.Fatalf("peek: %+v, want a fresh user 3 left, ip 0 left", res)
	}
}

// seedsYAML is the seeds' form, per user and endpoint at 5 per minute and
// a global limit, retried when a minute boundary passes during a try.
func seedsYAML(t *testing.T, newStore func(t *testing.T) ratelimit.Store) {
	short := `
domain: api
descriptors:
  - key: generic_key
    value: global
    rate_limit: 8/year
  - key: user_id
    descriptors:
      - key: endpoint
        value: /login
        rate_limit: 5/minute
`
	for attempt := range 3 {
		st := newStore(t)
		e := newEngine(t, st, short)
		start := time.Now()
		a := Admitted(t, e, "api", 6, Desc("generic_key", "global"), Desc("user_id", "a", "endpoint", "/login"))
		b := Admitted(t, e, "api", 6, Desc("generic_key", "global"), Desc("user_id", "b", "endpoint", "/login"))
		res := Decide(t, e, "api", 0, Desc("user_id", "c", "endpoint", "/login"))
		if start.Truncate(time.Minute) != time.Now().Truncate(time.Minute) {
			t.Logf("attempt %d crossed a minute boundary; again", attempt)
			continue
		}
		if a != 5 || b != 3 || res.Statuses[0].Decision.Remaining != 5 {
			t.Fatalf("user a %d (want 5), user b %d (want 3: the global 8 ran out), a fresh user %d left (want 5)", a, b, res.Statuses[0].Decision.Remaining)
		}
		return
	}
	t.Fatal("three attempts crossed minute boundaries")
}

func plans(t *testing.T, st ratelimit.Store) {
	e := newEngine(t, st, `
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: year
      requests_per_unit: 2
      budget: 2s
      plans:
        pro: 5/year
        enterprise: {unlimited: true}
`)
	if got := Admitted(t, e, "api", 3, Desc("user", "a")); got != 2 {
		t.Fatalf("free: %d, want 2", got)
	}
	if got := Admitted(t, e, "api", 4, Desc("plan", "pro", "user", "a")); got != 3 {
		t.Fatalf("after upgrading to pro: %d, want 3 (5 less the 2 taken)", got)
	}
	if res := Decide(t, e, "api", 100, Desc("plan", "enterprise", "user", "a")); !res.Allowed || !res.Statuses[0].Unlimited {
		t.Fatalf("enterprise: %+v", res)
	}
	if got := Admitted(t, e, "api", 1, Desc("user", "a")); got != 0 {
		t.Fatalf("back on free: %d, want 0", got)
	}
}

// reloadUnderLoad runs 64 callers on one key while the limit is raised,
// then lowered: the bucket is never reset, so exactly the raised limit is
// admitted in all, and no decision fails.
func reloadUnderLoad(t *testing.T, st ratelimit.Store) {
	const callers = 64
	rules := func(n int) string {
		return "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: year, requests_per_unit: " + strconv.Itoa(n) + ", budget: 2s, on_failure: closed}\n"
	}
	e := newEngine(t, st, rules(100))
	// phase counts the swaps done: a call that reads phase p after the
	// p-th Swap returned decides under the p-th set.
	var phase, admittedN, calls atomic.Int64
	var denied [3]atomic.Int64 // denials of calls begun in each phase
	var failed atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			ds := []policy.Descriptor{Desc("tenant", "t1")}
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := phase.Load()
				res, err := e.Decide(context.Background(), "api", ds, 1)
				calls.Add(1)
				if err != nil {
					failed.Store(err)
					return
				}
				if res.Allowed {
					admittedN.Add(1)
				} else {
					denied[p].Add(1)
				}
			}
		})
	}
	// exhausted waits until calls begun in phase p have been denied once
	// per caller: the bucket is then empty under that phase's limit.
	exhausted := func(p int) {
		deadline := time.Now().Add(time.Minute)
		for denied[p].Load() < callers && failed.Load() == nil {
			if time.Now().After(deadline) {
				t.Fatalf("phase %d: no %d denials within a minute (%d calls)", p, callers, calls.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	swap := func(n int) {
		if err := e.Swap(MustSet(t, rules(n))); err != nil {
			t.Fatal(err)
		}
		phase.Add(1)
	}
	exhausted(0)
	before := admittedN.Load()
	swap(150)
	exhausted(1)
	raised := admittedN.Load()
	swap(120)
	exhausted(2)
	close(stop)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("a decision failed during the reloads: %v", err)
	}
	total := admittedN.Load()
	t.Logf("%d callers, %d calls: admitted %d under 100/year, %d after raising to 150, %d after lowering to 120", callers, calls.Load(), before, raised, total)
	if before != 100 || raised != 150 || total != 150 {
		t.Fatalf("admitted %d, %d, %d; want exactly 100 before, 150 after raising (no reset), 150 after lowering", before, raised, total)
	}
}

// Package policy enforces rate-limit rules written as data: the YAML
// format of envoyproxy/ratelimit (domains of nested descriptors), extended
// with Sluice's algorithms, bursts, failure policies, budgets, plans and
// longer units, and reloaded without losing state.
//
// Load a file or a directory of them, build an Engine, and decide requests
// by their descriptors:
//
//	set, err := policy.Load("/etc/sluice/rules")
//	engine, err := policy.New(set, policy.WithStore(store))
//	res, err := engine.Decide(ctx, "api", []policy.Descriptor{
//		{{Key: "remote_address", Value: ip}},
//		{{Key: "user", Value: user}, {Key: "path", Value: "/login"}},
//	}, 1)
//	if !res.Allowed { /* 429 */ }
//
// # Guarantees
//
// Each request descriptor selects at most one rule: the level its entries
// reach in the domain's tree, if that level has a rule (exact value before
// wildcard before any value; see docs/policy.md). The selected rules of
// one Decide are decided as one atomic step on the store: the strictest
// wins and nothing is taken from any rule when the request is denied.
// Rules that do not apply are absent. Shadow-mode rules are decided and
// reported but never deny.
//
// Swap (and Watch, which calls it on file changes) replaces the rule set
// atomically; a rule whose identity (its name, or its domain and path)
// stays keeps its buckets even when its limit changes.
//
// # Errors
//
// Configuration errors are a *ConfigError with file, line and field; a
// set with an error is never built, so the set in force stays. Decide's
// errors wrap ErrUnknownDomain, sluice.ErrInvalid, or for rules that fail
// closed, sluice.ErrUnavailable or sluice.ErrUnknownOutcome. A denial is
// a Result with Allowed false, not an error.
package policy

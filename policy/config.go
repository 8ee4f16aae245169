package policy

import "time"

// Entry is one entry of a request descriptor: a key such as
// "remote_address", "user", "path" or "plan", and its value.
type Entry struct{ Key, Value string }

// Descriptor is one request descriptor: ordered entries, matched level by
// level against a domain's nested descriptors, for example
// {{"remote_address", "1.2.3.4"}, {"path", "/login"}}.
type Descriptor []Entry

// Config is one domain's rules as Go values: what one YAML file decodes
// into. NewSet validates it.
type Config struct {
	// Domain names the rule set; requests name it. Required.
	Domain string
	// Descriptors are the top-level descriptors.
	Descriptors []DescriptorConfig
	// File is where the config was read from, for errors; empty for Go
	// values.
	File string
	// Line is the line of the domain field, for errors; 0 when unknown.
	Line int
}

// DescriptorConfig is one level of a domain's descriptor tree: it matches
// a request entry by Key and, when set, Value, and may carry a rule.
type DescriptorConfig struct {
	// Key is matched against the entry's key. Required.
	Key string
	// Value, when set, must equal the entry's value; "*" in it matches any
	// run of characters (envoy wildcards: "/api/*"). Empty matches any
	// value, and then every value has its own bucket.
	Value string
	// RateLimit is the rule of this level, nil for none: a level without a
	// rule and without children admits (envoy's allow-list entry).
	RateLimit *RateLimit
	// Name names the rule for Replaces and is its stable identity: its
	// buckets' namespace in the store. Empty derives the identity from the
	// domain and the path of keys and values (envoy's "domain.key_value.key").
	Name string
	// Replaces lists the names of rules this rule switches off when both
	// apply to one request.
	Replaces []string
	// ShadowMode makes the rule decide and report, never deny.
	ShadowMode bool
	// ShareThreshold makes every value matching a wildcard Value share one
	// bucket instead of one bucket per value.
	ShareThreshold bool
	// DetailedMetric asks metrics to name the request's values; reported
	// in Status through the rule name only.
	DetailedMetric bool
	// Descriptors are the nested levels, matched against the next entry.
	Descriptors []DescriptorConfig
	// Line is the source line of the descriptor, for errors; 0 when unknown.
	Line int
	// lines are the source lines of its fields and of its rate_limit's,
	// by field path relative to the descriptor ("rate_limit.unit").
	lines map[string]int
}

// RateLimit is a rule's limit: envoy's rate_limit block and Sluice's
// extensions. All extensions are optional.
type RateLimit struct {
	// Unit is second, minute, hour, day, week (7 days), month (30 days) or
	// year (365 days): fixed lengths, as envoy's windows.
	Unit string
	// RequestsPerUnit is the number of requests per Unit. 0 denies every
	// request (envoy's deny list); negative is invalid.
	RequestsPerUnit int64
	// Unlimited admits every request without touching the store; Unit and
	// RequestsPerUnit must then be unset.
	Unlimited bool

	// Algorithm is a name from algorithms/catalog; empty is fixedwindow,
	// envoy's windows aligned to the epoch.
	Algorithm string
	// Burst is the most admitted at once; 0 is RequestsPerUnit.
	Burst int64
	// OnFailure is "open" (default: allow when the store fails) or "closed".
	OnFailure string
	// Budget is how long one decision may wait for the store before
	// OnFailure answers; 0 is the store's default.
	Budget time.Duration
	// Plans are variants of the limit selected by the request's "plan"
	// entry (see PlanKey): same rule, same buckets, another limit. A plan
	// sets Unit, RequestsPerUnit, Burst or Unlimited only.
	Plans map[string]RateLimit
}

// PlanKey is the entry key that selects a rule's plan variant. An entry
// with this key that no descriptor level matches is taken as the
// request's plan rather than as a level to match; see docs/policy.md.
const PlanKey = "plan"

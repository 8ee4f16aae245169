package policy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	sluice "github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// DefaultAlgorithm is the algorithm of rules that name none: fixed windows
// aligned to the Unix epoch, as envoyproxy/ratelimit counts.
const DefaultAlgorithm = "fixedwindow"

// Units are the lengths of the rate_limit units. A month is 30 days and a
// year 365 days, fixed lengths as in envoyproxy/ratelimit, not calendar
// months.
var Units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// Set is a validated, immutable rule set of one or more domains: what an
// Engine enforces. Build one with Load or NewSet. A Set is safe for
// concurrent use and may be given to several engines.
type Set struct {
	domains map[string]*node
	rules   []*rule // every rule, in domain then tree order
}

// Domains returns the set's domain names, sorted.
func (s *Set) Domains() []string {
	names := make([]string, 0, len(s.domains))
	for d := range s.domains {
		names = append(names, d)
	}
	slices.Sort(names)
	return names
}

// Rules returns the identities of the set's rules (their names), in
// domain then declaration order.
func (s *Set) Rules() []string {
	names := make([]string, len(s.rules))
	for i, r := range s.rules {
		names[i] = r.name
	}
	return names
}

// rule is one rate_limit block, compiled.
type rule struct {
	index    int    // in Set.rules and in the engine's composite
	name     string // identity: the store namespace of its buckets
	domain   string
	named    bool // Name was given: Replaces may point at it
	replaces []string
	shadow   bool
	base     variant
	plans    map[string]variant
	sluice   sluice.Rule
}

// variant is a limit a request may get from a rule: the base one or a
// plan's.
type variant struct {
	limit   sluice.Limit // sluice.Unlimited() for unlimited
	blocked bool         // requests_per_unit 0: deny everything
	plan    string       // the plan's name, empty for the base
}

// node is one level of a domain's descriptor tree.
type node struct {
	children map[string]*keyLevels // by entry key
	variable bool                  // the entry's value is part of the bucket key
	rule     *rule
}

// keyLevels are the levels under one node for one entry key.
type keyLevels struct {
	exact map[string]*node // by value
	wild  []wildcard       // most specific first
	any   *node            // the level without a value
}

type wildcard struct {
	pattern string
	parts   []string // the pattern split at '*'
	literal int      // characters outside '*': more is more specific
	node    *node
}

func (w *wildcard) matches(v string) bool {
	p := w.parts
	if len(v) < w.literal || !strings.HasPrefix(v, p[0]) || !strings.HasSuffix(v, p[len(p)-1]) {
		return false
	}
	rest := v[len(p[0]) : len(v)-len(p[len(p)-1])]
	for _, mid := range p[1 : len(p)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return true
}

// child returns the level e matches under n: the exact key and value,
// else the most specific wildcard, else the key alone.
func (n *node) child(e Entry) *node {
	k := n.children[e.Key]
	if k == nil {
		return nil
	}
	if c := k.exact[e.Value]; c != nil {
		return c
	}
	for i := range k.wild {
		if w := &k.wild[i]; w.matches(e.Value) {
			return w.node
		}
	}
	return k.any
}

// match returns the rule desc selects in the domain rooted at root, its
// bucket key and the request's plan; nil when no rule applies. Every
// entry must match a level, the last one a level with a rule (envoy's
// depth rule), except entries keyed PlanKey that no level matches.
func match(root *node, desc Descriptor) (r *rule, key, plan string) {
	n := root
	vars, first := 0, ""
	var buf [128]byte
	b := buf[:0]
	for _, e := range desc {
		c := n.child(e)
		if c == nil {
			if e.Key == PlanKey {
				plan = e.Value
				continue
			}
			return nil, "", ""
		}
		n = c
		if !c.variable {
			continue
		}
		switch vars {
		case 0:
			first = e.Value
		case 1:
			b = appendKeyPart(b, first)
			b = appendKeyPart(b, e.Value)
		default:
			b = appendKeyPart(b, e.Value)
		}
		vars++
	}
	if n.rule == nil {
		return nil, "", ""
	}
	switch vars {
	case 0:
		return n.rule, "*", plan // a global bucket: one for every request
	case 1:
		return n.rule, first, plan
	}
	return n.rule, string(b), plan
}

// appendKeyPart appends v length-prefixed, so that keys of several values
// never collide ("a:b"+"c" vs "a"+"b:c").
func appendKeyPart(b []byte, v string) []byte {
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, ':')
	return append(b, v...)
}

// NewSet validates configs, one per domain, and returns their rule set.
// Errors are a *ConfigError naming the first problem.
func NewSet(configs ...Config) (*Set, error) {
	b := &setBuilder{set: &Set{domains: map[string]*node{}}, files: map[string]string{}, names: map[string]string{}}
	for i := range configs {
		if err := b.addDomain(&configs[i]); err != nil {
			return nil, err
		}
	}
	return b.set, nil
}

type setBuilder struct {
	set   *Set
	files map[string]string // domain -> file that defined it
	names map[string]string // rule identity -> where it was defined
	cfg   *Config
	// named are the explicit names of the current domain, for replaces.
	named map[string]bool
	// pending are the replaces to check once the domain is complete.
	pending []pendingReplace
}

type pendingReplace struct {
	name, target string
	line         int
	field        string
}

func (b *setBuilder) errorf(line int, field, format string, args ...any) error {
	return &ConfigError{File: b.cfg.File, Line: line, Field: field, Err: fmt.Errorf(format, args...)}
}

func (b *setBuilder) addDomain(c *Config) error {
	b.cfg, b.named, b.pending = c, map[string]bool{}, nil
	if c.Domain == "" {
		return b.errorf(c.Line, "domain", "empty domain")
	}
	if prev, ok := b.files[c.Domain]; ok {
		if prev == "" {
			prev = "another config"
		}
		return b.errorf(c.Line, "domain", "duplicate domain %q (also in %s)", c.Domain, prev)
	}
	b.files[c.Domain] = c.File
	root := &node{}
	if err := b.addLevel(root, c.Descriptors, c.Domain, "descriptors"); err != nil {
		return err
	}
	for _, p := range b.pending {
		if !b.named[p.target] {
			return b.errorf(p.line, p.field, "replaces %q: no rule of domain %q has that name", p.target, c.Domain)
		}
	}
	b.set.domains[c.Domain] = root
	return nil
}

func (b *setBuilder) addLevel(parent *node, ds []DescriptorConfig, path, field string) error {
	for i := range ds {
		d := &ds[i]
		f := fmt.Sprintf("%s[%d]", field, i)
		if d.Key == "" {
			return b.errorf(d.Line, f+".key", "empty key")
		}
		if d.Key == PlanKey && d.RateLimit != nil && len(d.RateLimit.Plans) > 0 {
			return b.errorf(d.line("rate_limit.plans"), f+".rate_limit.plans", "a level keyed %q cannot have plans", PlanKey)
		}
		n := &node{}
		ident := path + "." + d.Key
		if parent.children == nil {
			parent.children = map[string]*keyLevels{}
		}
		k := parent.children[d.Key]
		if k == nil {
			k = &keyLevels{}
			parent.children[d.Key] = k
		}
		switch {
		case strings.Contains(d.Value, "*"):
			for _, o := range k.wild {
				if o.pattern == d.Value {
					return b.errorf(d.Line, f, "duplicate descriptor key %q value %q", d.Key, d.Value)
				}
			}
			parts := strings.Split(d.Value, "*")
			k.wild = append(k.wild, wildcard{pattern: d.Value, parts: parts, literal: len(d.Value) - len(parts) + 1, node: n})
			slices.SortStableFunc(k.wild, func(a, b wildcard) int { return b.literal - a.literal })
			n.variable = !d.ShareThreshold
			ident += "_" + d.Value
		case d.Value != "":
			if k.exact[d.Value] != nil {
				return b.errorf(d.Line, f, "duplicate descriptor key %q value %q", d.Key, d.Value)
			}
			if k.exact == nil {
				k.exact = map[string]*node{}
			}
			k.exact[d.Value] = n
			ident += "_" + d.Value
		default:
			if k.any != nil {
				return b.errorf(d.Line, f, "duplicate descriptor key %q", d.Key)
			}
			k.any = n
			n.variable = true
		}
		if d.ShareThreshold && !strings.Contains(d.Value, "*") {
			return b.errorf(d.line("share_threshold"), f+".share_threshold", "share_threshold needs a wildcard value (one with '*')")
		}
		if d.RateLimit == nil {
			switch {
			case d.Name != "":
				return b.errorf(d.line("rate_limit.name"), f+".name", "a name without rate_limit")
			case len(d.Replaces) > 0:
				return b.errorf(d.line("rate_limit.replaces"), f+".replaces", "replaces without rate_limit")
			}
		} else {
			r, err := b.rule(d, ident, f)
			if err != nil {
				return err
			}
			n.rule = r
		}
		if err := b.addLevel(n, d.Descriptors, ident, f+".descriptors"); err != nil {
			return err
		}
	}
	return nil
}

// line returns the source line of field, else of its closest enclosing
// field, else the descriptor's.
func (d *DescriptorConfig) line(field string) int {
	for field != "" {
		if l, ok := d.lines[field]; ok {
			return l
		}
		i := strings.LastIndexByte(field, '.')
		if i < 0 {
			break
		}
		field = field[:i]
	}
	return d.Line
}

func (b *setBuilder) rule(d *DescriptorConfig, ident, f string) (*rule, error) {
	rl := d.RateLimit
	r := &rule{name: ident, domain: b.cfg.Domain, shadow: d.ShadowMode, replaces: d.Replaces}
	if d.Name != "" {
		r.name, r.named = d.Name, true
		b.named[d.Name] = true
	}
	if len(r.name) > ratelimit.MaxKeyLen {
		return nil, b.errorf(d.line("rate_limit.name"), f+".name", "rule name of %d bytes exceeds %d", len(r.name), ratelimit.MaxKeyLen)
	}
	where := fmt.Sprintf("%s:%d", b.cfg.File, d.Line)
	if b.cfg.File == "" {
		where = fmt.Sprintf("domain %q %s", b.cfg.Domain, f)
	}
	if prev, ok := b.names[r.name]; ok {
		return nil, b.errorf(d.line("rate_limit.name"), f+".name", "duplicate rule name %q (also at %s)", r.name, prev)
	}
	b.names[r.name] = where
	for j, target := range d.Replaces {
		rf := fmt.Sprintf("%s.replaces[%d]", f, j)
		switch {
		case target == "":
			return nil, b.errorf(d.line("rate_limit.replaces"), rf, "empty name")
		case target == d.Name:
			return nil, b.errorf(d.line("rate_limit.replaces"), rf, "a rule cannot replace itself (%q)", target)
		}
		b.pending = append(b.pending, pendingReplace{name: r.name, target: target, line: d.line("rate_limit.replaces"), field: rf})
	}
	algName := rl.Algorithm
	if algName == "" {
		algName = DefaultAlgorithm
	}
	alg, ok := catalog.ByName(algName)
	if !ok {
		return nil, b.errorf(d.line("rate_limit.algorithm"), f+".rate_limit.algorithm", "unknown algorithm %q", rl.Algorithm)
	}
	failOpen := true
	switch rl.OnFailure {
	case "", "open":
	case "closed":
		failOpen = false
	default:
		return nil, b.errorf(d.line("rate_limit.on_failure"), f+".rate_limit.on_failure", "on_failure %q is neither open nor closed", rl.OnFailure)
	}
	if rl.Budget < 0 {
		return nil, b.errorf(d.line("rate_limit.budget"), f+".rate_limit.budget", "negative budget %s", rl.Budget)
	}
	var err error
	if r.base, err = b.variant(d, rl, alg, f+".rate_limit", "rate_limit"); err != nil {
		return nil, err
	}
	for _, plan := range slices.Sorted(maps.Keys(rl.Plans)) {
		pl := rl.Plans[plan]
		pf := f + ".rate_limit.plans." + plan
		lf := "rate_limit.plans." + plan
		if plan == "" {
			return nil, b.errorf(d.line("rate_limit.plans"), f+".rate_limit.plans", "empty plan name")
		}
		switch {
		case pl.Algorithm != "":
			return nil, b.errorf(d.line(lf), pf+".algorithm", "a plan cannot change the rule's algorithm")
		case pl.OnFailure != "":
			return nil, b.errorf(d.line(lf), pf+".on_failure", "a plan cannot change the rule's on_failure")
		case pl.Budget != 0:
			return nil, b.errorf(d.line(lf), pf+".budget", "a plan cannot change the rule's budget")
		case len(pl.Plans) > 0:
			return nil, b.errorf(d.line(lf), pf+".plans", "plans cannot nest")
		}
		v, err := b.variant(d, &pl, alg, pf, lf)
		if err != nil {
			return nil, err
		}
		v.plan = plan
		if r.plans == nil {
			r.plans = map[string]variant{}
		}
		r.plans[plan] = v
	}
	limit := r.base.limit
	if r.base.blocked {
		limit = sluice.Unlimited() // never sent to the store
	}
	r.sluice = sluice.Rule{Name: r.name, Algorithm: alg, Limit: limit, FailOpen: failOpen, Budget: rl.Budget}
	r.index = len(b.set.rules)
	b.set.rules = append(b.set.rules, r)
	return r, nil
}

// variant validates one limit of a rule; f is its field path for errors
// and lf its path for source lines.
func (b *setBuilder) variant(d *DescriptorConfig, rl *RateLimit, alg ratelimit.Algorithm, f, lf string) (variant, error) {
	if rl.Unlimited {
		if rl.Unit != "" || rl.RequestsPerUnit != 0 || rl.Burst != 0 {
			return variant{}, b.errorf(d.line(lf+".unlimited"), f+".unlimited", "an unlimited rate_limit sets no unit, requests_per_unit or burst")
		}
		return variant{limit: sluice.Unlimited()}, nil
	}
	period, ok := Units[rl.Unit]
	if !ok {
		return variant{}, b.errorf(d.line(lf+".unit"), f+".unit", "unit %q is not one of second, minute, hour, day, week, month, year", rl.Unit)
	}
	switch {
	case rl.RequestsPerUnit < 0:
		return variant{}, b.errorf(d.line(lf+".requests_per_unit"), f+".requests_per_unit", "negative requests_per_unit %d", rl.RequestsPerUnit)
	case rl.Burst < 0:
		return variant{}, b.errorf(d.line(lf+".burst"), f+".burst", "negative burst %d", rl.Burst)
	case rl.RequestsPerUnit == 0 && rl.Burst != 0:
		return variant{}, b.errorf(d.line(lf+".burst"), f+".burst", "a burst on a rule that denies everything (requests_per_unit 0)")
	case rl.RequestsPerUnit == 0:
		return variant{blocked: true}, nil
	}
	l := sluice.Limit{Count: rl.RequestsPerUnit, Period: period, Burst: rl.RequestsPerUnit}
	if rl.Burst != 0 {
		l.Burst = rl.Burst
	}
	err := l.Validate()
	if v, ok := alg.(ratelimit.LimitValidator); ok && err == nil {
		err = v.ValidateLimit(l)
	}
	if err != nil {
		field := ".requests_per_unit"
		if rl.Burst != 0 {
			field = ".burst"
		}
		return variant{}, b.errorf(d.line(lf+field), f+field, "%s under %s: %w", l, alg.Name(), err)
	}
	return variant{limit: l}, nil
}

package pgrules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// ErrorFile is the File of every ConfigError about a row: Line is the
// row's id and Field its column.
const ErrorFile = "table " + RuleTable

// entryJSON is one element of the descriptor column.
type entryJSON struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

// node is a descriptor level being built, with the rows that define it.
type node struct {
	cfg      policy.DescriptorConfig
	children []*node
	path     string   // policy's field path of the level, "descriptors[0].descriptors[2]"
	viaRow   int64    // the first row whose descriptor passes through or ends here
	base     *ruleRow // the row with plan NULL, if any
	rule     *ruleRow // the first row of the rule, base or plan variant
	plans    map[string]*ruleRow
}

// convert builds one policy.Config per domain from rows (sorted by domain
// and id) and validates them with policy.NewSet, reporting any error
// against the row and column it came from.
func (s *Source) convert(rows []ruleRow) (*policy.Set, error) {
	var configs []policy.Config
	var all []map[string]*node
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].Domain == rows[i].Domain {
			j++
		}
		top, err := buildDomain(rows[i:j])
		if err != nil {
			return nil, err
		}
		nodes := map[string]*node{}
		var walk func(ns []*node, prefix string)
		walk = func(ns []*node, prefix string) {
			for k, n := range ns {
				n.path = fmt.Sprintf("%sdescriptors[%d]", prefix, k)
				nodes[n.path] = n
				walk(n.children, n.path+".")
			}
		}
		walk(top, "")
		cfg := policy.Config{Domain: rows[i].Domain, Descriptors: finish(top), File: ErrorFile, Line: int(rows[i].ID)}
		// Validating each domain alone tells which domain an error is in.
		if _, err := policy.NewSet(cfg); err != nil {
			return nil, rowError(err, nodes)
		}
		configs = append(configs, cfg)
		all = append(all, nodes)
		i = j
	}
	set, err := policy.NewSet(configs...)
	if err != nil {
		// A conflict between domains (a rule name used in two): find
		// the level by its field path and its line, the row id.
		var ce *policy.ConfigError
		if errors.As(err, &ce) {
			for _, nodes := range all {
				if n, _ := deepest(nodes, ce.Field); n != nil && n.cfg.Line == ce.Line {
					return nil, rowError(err, nodes)
				}
			}
		}
		return nil, rowError(err, nil)
	}
	return set, nil
}

// buildDomain arranges one domain's rows into its descriptor tree.
func buildDomain(rows []ruleRow) ([]*node, error) {
	var top []*node
	for k := range rows {
		r := &rows[k]
		path, err := decodeDescriptor(r.Descriptor)
		if err != nil {
			return nil, fieldError(r.ID, "descriptor", err)
		}
		if r.Budget.Valid && r.Budget.Months != 0 {
			return nil, fieldError(r.ID, "budget", errors.New("months in a budget; use seconds or milliseconds"))
		}
		level := &top
		var n *node
		for _, e := range path {
			i := slices.IndexFunc(*level, func(c *node) bool {
				return c.cfg.Key == e.Key && c.cfg.Value == deref(e.Value)
			})
			if i < 0 {
				*level = append(*level, &node{cfg: policy.DescriptorConfig{Key: e.Key, Value: deref(e.Value), Line: int(r.ID)},
					viaRow: r.ID})
				i = len(*level) - 1
			}
			n = (*level)[i]
			level = &n.children
		}
		if err := n.add(r); err != nil {
			return nil, err
		}
	}
	return top, nil
}

// add makes r the rule of n (plan NULL) or one of its plan variants.
func (n *node) add(r *ruleRow) error {
	if n.rule != nil {
		if col, ok := sameRule(n.rule, r); !ok {
			return fieldError(r.ID, col, fmt.Errorf("differs from row %d of the same descriptor: "+
				"the column belongs to the rule, not to a plan variant", n.rule.ID))
		}
	}
	if r.Plan == nil {
		if n.base != nil {
			return fieldError(r.ID, "descriptor", fmt.Errorf("row %d already has this descriptor with plan NULL", n.base.ID))
		}
		n.base = r
	} else {
		if *r.Plan == "" {
			return fieldError(r.ID, "plan", errors.New("empty; NULL means every plan"))
		}
		if prev, ok := n.plans[*r.Plan]; ok {
			return fieldError(r.ID, "plan", fmt.Errorf("row %d already has this descriptor with plan %q", prev.ID, *r.Plan))
		}
		if n.plans == nil {
			n.plans = map[string]*ruleRow{}
		}
		n.plans[*r.Plan] = r
	}
	if n.rule == nil {
		n.rule = r
		n.cfg.Line = int(r.ID)
	}
	return nil
}

// sameRule reports whether b agrees with a on every column that belongs to
// the rule rather than to a plan variant, and the first that differs.
func sameRule(a, b *ruleRow) (string, bool) {
	switch {
	case deref(a.Name) != deref(b.Name):
		return "name", false
	case deref(a.Algorithm) != deref(b.Algorithm):
		return "algorithm", false
	case deref(a.OnFailure) != deref(b.OnFailure):
		return "on_failure", false
	case a.Budget != b.Budget:
		return "budget", false
	case !slices.Equal(a.Replaces, b.Replaces):
		return "replaces", false
	case a.ShadowMode != b.ShadowMode:
		return "shadow_mode", false
	case a.ShareThreshold != b.ShareThreshold:
		return "share_threshold", false
	case a.DetailedMetric != b.DetailedMetric:
		return "detailed_metric", false
	}
	return "", true
}

// finish turns built nodes into policy values.
func finish(ns []*node) []policy.DescriptorConfig {
	var out []policy.DescriptorConfig
	for _, n := range ns {
		c := n.cfg
		if r := n.rule; r != nil {
			c.Name = deref(r.Name)
			c.Replaces = r.Replaces
			c.ShadowMode = r.ShadowMode
			c.ShareThreshold = r.ShareThreshold
			c.DetailedMetric = r.DetailedMetric
			var rl policy.RateLimit
			if n.base != nil {
				rl = limitOf(n.base)
			} else {
				// Only plan variants: a request of any other plan, or
				// of none, is not limited by this rule.
				rl = policy.RateLimit{Unlimited: true}
			}
			rl.Algorithm = deref(r.Algorithm)
			rl.OnFailure = deref(r.OnFailure)
			rl.Budget = budgetOf(r)
			for plan, pr := range n.plans {
				if rl.Plans == nil {
					rl.Plans = map[string]policy.RateLimit{}
				}
				rl.Plans[plan] = limitOf(pr)
			}
			c.RateLimit = &rl
		}
		c.Descriptors = finish(n.children)
		out = append(out, c)
	}
	return out
}

// limitOf is the plan-variable part of a row's limit.
func limitOf(r *ruleRow) policy.RateLimit {
	rl := policy.RateLimit{Unit: deref(r.Unit), Unlimited: r.Unlimited}
	if r.RequestsPerUnit != nil {
		rl.RequestsPerUnit = *r.RequestsPerUnit
	}
	if r.Burst != nil {
		rl.Burst = *r.Burst
	}
	return rl
}

// budgetOf converts the budget column; decodeBudget has vetted it.
func budgetOf(r *ruleRow) time.Duration {
	if !r.Budget.Valid {
		return 0
	}
	return time.Duration(r.Budget.Microseconds)*time.Microsecond + time.Duration(r.Budget.Days)*24*time.Hour
}

// decodeDescriptor parses the descriptor column: a non-empty JSON array of
// {"key": string, "value": string} objects, value optional.
func decodeDescriptor(raw []byte) ([]entryJSON, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var path []entryJSON
	if err := dec.Decode(&path); err != nil {
		return nil, fmt.Errorf(`want a JSON array of {"key": …, "value": …}: %w`, err)
	}
	if len(path) == 0 {
		return nil, errors.New("empty array")
	}
	return path, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func fieldError(id int64, column string, err error) *policy.ConfigError {
	return &policy.ConfigError{File: ErrorFile, Line: int(id), Field: column, Err: err}
}

// rowError rewrites a ConfigError of policy.NewSet about a generated
// config into one about the row and column that produced the field.
func rowError(err error, nodes map[string]*node) error {
	var ce *policy.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	out := &policy.ConfigError{File: ErrorFile, Line: ce.Line, Field: ce.Field, Err: ce.Err}
	n, rest := deepest(nodes, ce.Field)
	if n == nil {
		return out
	}
	row := n.viaRow
	if n.rule != nil {
		row = n.rule.ID
		if n.base != nil {
			row = n.base.ID
		}
	}
	column := "descriptor"
	if r, ok := strings.CutPrefix(rest, "rate_limit."); ok {
		for plan, pr := range n.plans {
			if rest, ok := strings.CutPrefix(r, "plans."+plan); ok && (rest == "" || rest[0] == '.') {
				row, r = pr.ID, strings.TrimPrefix(rest, ".")
				if r == "" {
					r = "plans"
				}
			}
		}
		column = columnOf(r)
	} else if rest != "" && rest != "key" && rest != "value" {
		column = columnOf(rest)
	}
	out.Line, out.Field = int(row), column
	return out
}

// deepest returns the deepest level a policy field path names, and the
// rest of the path after it.
func deepest(nodes map[string]*node, field string) (n *node, rest string) {
	for path, m := range nodes {
		if (field == path || strings.HasPrefix(field, path+".")) && (n == nil || len(path) > len(n.path)) {
			n = m
			rest = strings.TrimPrefix(strings.TrimPrefix(field, path), ".")
		}
	}
	return n, rest
}

// columnOf maps a field name of the YAML format to its column.
func columnOf(field string) string {
	name, _, _ := strings.Cut(field, "[")
	name, _, _ = strings.Cut(name, ".")
	switch name {
	case "", "rate_limit":
		return "requests_per_unit"
	case "unit", "requests_per_unit", "unlimited", "algorithm", "burst", "on_failure", "budget",
		"name", "replaces", "shadow_mode", "share_threshold", "detailed_metric":
		return name
	case "plans":
		return "plan"
	}
	return strconv.Quote(field)
}

package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load reads the rule set at path: one YAML file, or a directory whose
// *.yaml and *.yml files (not its subdirectories, not names starting with
// '.') each hold one domain, as envoyproxy/ratelimit lays them out. A
// domain defined twice is an error, and so is a directory without such
// files. Errors are a *ConfigError, or the file system's error.
func Load(path string) (*Set, error) {
	set, _, err := load(path)
	return set, err
}

// load is Load returning also a digest of the files' names and contents,
// by which Watch skips reloads that change nothing.
func load(path string) (*Set, [sha256.Size]byte, error) {
	var digest [sha256.Size]byte
	files, err := Files(path)
	if err != nil {
		return nil, digest, err
	}
	h := sha256.New()
	configs := make([]Config, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, digest, err
		}
		fmt.Fprintf(h, "%d:%s%d:", len(f), f, len(data))
		h.Write(data)
		c, err := Parse(f, data)
		if err != nil {
			return nil, digest, err
		}
		configs = append(configs, c)
	}
	set, err := NewSet(configs...)
	h.Sum(digest[:0])
	return set, digest, err
}

// Files lists the files Load reads at path, sorted: path itself, or a
// directory's regular *.yaml and *.yml files not starting with '.'
// (links followed). A directory without one is a *ConfigError.
func Files(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		yamlName := strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
		if strings.HasPrefix(name, ".") || !yamlName {
			continue
		}
		full := filepath.Join(path, name)
		st, err := os.Stat(full) // follows symlinks, as ConfigMap mounts use
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling link mid-swap
			}
			return nil, err
		}
		if st.Mode().IsRegular() {
			files = append(files, full)
		}
	}
	if len(files) == 0 {
		// Refused rather than read as no rules: a directory caught between
		// a delete and a write must not switch every limit off.
		return nil, &ConfigError{File: path, Err: errors.New("no *.yaml or *.yml file in the directory")}
	}
	slices.Sort(files)
	return files, nil
}

// Parse decodes one domain's YAML; file names it in errors. It checks the
// form (fields, types); NewSet checks the meaning.
func Parse(file string, data []byte) (Config, error) {
	p := parser{file: file}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, &ConfigError{File: file, Line: yamlErrorLine(err), Err: fmt.Errorf("bad YAML: %w", err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return Config{}, &ConfigError{File: file, Err: errors.New("empty document")}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return Config{}, &ConfigError{File: file, Line: next.Line, Err: errors.New("a second YAML document: a file holds one domain")}
	case !errors.Is(err, io.EOF):
		return Config{}, &ConfigError{File: file, Line: yamlErrorLine(err), Err: fmt.Errorf("bad YAML: %w", err)}
	}
	c := Config{File: file}
	err := p.mapping(doc.Content[0], "", func(field string, k, v *yaml.Node) error {
		switch k.Value {
		case "domain":
			c.Line = k.Line
			return p.str(v, field, &c.Domain)
		case "descriptors":
			return p.descriptors(v, field, &c.Descriptors)
		}
		return p.unknown(k, field)
	})
	if err == nil && c.Line == 0 {
		err = &ConfigError{File: file, Line: doc.Content[0].Line, Field: "domain", Err: errors.New("empty domain")}
	}
	return c, err
}

type parser struct{ file string }

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Field: field, Err: fmt.Errorf(format, args...)}
}

func (p *parser) unknown(k *yaml.Node, field string) error {
	return p.errorf(k, field, "unknown field")
}

// mapping calls fn for each key of the mapping n, with the key's field
// path; duplicate keys are errors.
func (p *parser) mapping(n *yaml.Node, path string, fn func(field string, k, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, strings.TrimPrefix(path, "."), "want a mapping, have %s", kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := strings.TrimPrefix(path+"."+k.Value, ".")
		if seen[k.Value] {
			return p.errorf(k, field, "duplicate field")
		}
		seen[k.Value] = true
		if err := fn(field, k, v); err != nil {
			return err
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}

func (p *parser) str(n *yaml.Node, field string, dst *string) error {
	if n.Kind != yaml.ScalarNode {
		return p.errorf(n, field, "want a string, have %s", kindName(n))
	}
	*dst = n.Value
	return nil
}

func (p *parser) boolean(n *yaml.Node, field string, dst *bool) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return p.errorf(n, field, "want true or false, have %s", kindName(n))
	}
	*dst = n.Value == "true"
	return nil
}

func (p *parser) integer(n *yaml.Node, field string, dst *int64) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
			*dst = v
			return nil
		}
	}
	return p.errorf(n, field, "want an integer, have %s", kindName(n))
}

func (p *parser) duration(n *yaml.Node, field string, dst *time.Duration) error {
	if n.Kind == yaml.ScalarNode {
		if v, err := time.ParseDuration(n.Value); err == nil {
			*dst = v
			return nil
		}
	}
	return p.errorf(n, field, "want a duration such as 5ms, have %s", kindName(n))
}

func (p *parser) descriptors(n *yaml.Node, path string, dst *[]DescriptorConfig) error {
	if n.Kind != yaml.SequenceNode {
		return p.errorf(n, path, "want a list, have %s", kindName(n))
	}
	for i, item := range n.Content {
		field := fmt.Sprintf("%s[%d]", path, i)
		d := DescriptorConfig{Line: item.Line, lines: map[string]int{}}
		err := p.mapping(item, field, func(f string, k, v *yaml.Node) error {
			d.lines[strings.TrimPrefix(f, field+".")] = k.Line
			switch k.Value {
			case "key":
				return p.str(v, f, &d.Key)
			case "value":
				return p.str(v, f, &d.Value)
			case "rate_limit":
				d.RateLimit = &RateLimit{}
				return p.rateLimit(v, f, &d, d.RateLimit, true)
			case "shadow_mode":
				return p.boolean(v, f, &d.ShadowMode)
			case "share_threshold":
				return p.boolean(v, f, &d.ShareThreshold)
			case "detailed_metric":
				return p.boolean(v, f, &d.DetailedMetric)
			case "value_to_metric":
				var ignored bool // metric naming only: no effect on decisions
				return p.boolean(v, f, &ignored)
			case "metadata":
				return nil // envoy returns it with responses; no effect on decisions
			case "quota_mode":
				return p.errorf(k, f, "quota_mode is not supported")
			case "descriptors":
				return p.descriptors(v, f, &d.Descriptors)
			}
			return p.unknown(k, f)
		})
		if err != nil {
			return err
		}
		*dst = append(*dst, d)
	}
	return nil
}

// rateLimit decodes a rate_limit block, or a plan's when top is false,
// into rl; name and replaces go to d.
func (p *parser) rateLimit(n *yaml.Node, path string, d *DescriptorConfig, rl *RateLimit, top bool) error {
	rel := func(f string) string {
		if i := strings.Index(f, "rate_limit"); i >= 0 {
			return f[i:]
		}
		return f
	}
	if n.Kind == yaml.ScalarNode {
		d.lines[rel(path)+".unit"] = n.Line
		d.lines[rel(path)+".requests_per_unit"] = n.Line
		return p.shortForm(n, path, rl)
	}
	return p.mapping(n, path, func(f string, k, v *yaml.Node) error {
		d.lines[rel(f)] = k.Line
		switch k.Value {
		case "unit":
			return p.str(v, f, &rl.Unit)
		case "requests_per_unit":
			return p.integer(v, f, &rl.RequestsPerUnit)
		case "unlimited":
			return p.boolean(v, f, &rl.Unlimited)
		case "burst":
			return p.integer(v, f, &rl.Burst)
		}
		if !top {
			return p.unknown(k, f)
		}
		switch k.Value {
		case "name":
			return p.str(v, f, &d.Name)
		case "replaces":
			return p.replaces(v, f, &d.Replaces)
		case "algorithm":
			return p.str(v, f, &rl.Algorithm)
		case "on_failure":
			return p.str(v, f, &rl.OnFailure)
		case "budget":
			return p.duration(v, f, &rl.Budget)
		case "plans":
			return p.mapping(v, f, func(pf string, pk, pv *yaml.Node) error {
				var pl RateLimit
				if err := p.rateLimit(pv, pf, d, &pl, false); err != nil {
					return err
				}
				if rl.Plans == nil {
					rl.Plans = map[string]RateLimit{}
				}
				rl.Plans[pk.Value] = pl
				d.lines[rel(pf)] = pk.Line
				return nil
			})
		}
		return p.unknown(k, f)
	})
}

// shortForm decodes "5/minute".
func (p *parser) shortForm(n *yaml.Node, field string, rl *RateLimit) error {
	count, unit, ok := strings.Cut(n.Value, "/")
	v, err := strconv.ParseInt(strings.TrimSpace(count), 10, 64)
	if !ok || err != nil {
		return p.errorf(n, field, "want a rate such as 5/minute, have %q", n.Value)
	}
	rl.RequestsPerUnit, rl.Unit = v, strings.TrimSpace(unit)
	return nil
}

// replaces decodes envoy's list of {name: x}, or plain names.
func (p *parser) replaces(n *yaml.Node, path string, dst *[]string) error {
	if n.Kind != yaml.SequenceNode {
		return p.errorf(n, path, "want a list, have %s", kindName(n))
	}
	for i, item := range n.Content {
		field := fmt.Sprintf("%s[%d]", path, i)
		if item.Kind == yaml.ScalarNode {
			*dst = append(*dst, item.Value)
			continue
		}
		var name string
		err := p.mapping(item, field, func(f string, k, v *yaml.Node) error {
			if k.Value != "name" {
				return p.unknown(k, f)
			}
			return p.str(v, f, &name)
		})
		if err != nil {
			return err
		}
		*dst = append(*dst, name)
	}
	return nil
}

// yamlErrorLine digs the line out of a yaml error ("yaml: line 3: ...").
func yamlErrorLine(err error) int {
	msg := err.Error()
	i := strings.Index(msg, "line ")
	if i < 0 {
		return 0
	}
	rest := msg[i+5:]
	j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if j <= 0 {
		return 0
	}
	line, _ := strconv.Atoi(rest[:j])
	return line
}

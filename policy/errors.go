package policy

import (
	"errors"
	"fmt"

	sluice "github.com/sluicehq/sluice"
)

// ErrUnknownDomain reports a Decide for a domain the rule set does not
// have.
var ErrUnknownDomain = errors.New("policy: unknown domain")

// ConfigError reports a configuration that cannot be used: where, which
// field, and why. It matches sluice.ErrInvalid with errors.Is; find it
// with errors.As. A Set is never built from a configuration with an error,
// so the rules in force stay in force.
type ConfigError struct {
	File  string // the file, empty for Go values
	Line  int    // 1-based line, 0 when unknown
	Field string // the field's path, e.g. "descriptors[0].rate_limit.unit"
	Err   error  // what is wrong
}

func (e *ConfigError) Error() string {
	where := e.File
	if where == "" {
		where = "config"
	}
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", where, e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("policy: %s: %s: %v", where, e.Field, e.Err)
	}
	return fmt.Sprintf("policy: %s: %v", where, e.Err)
}

// Unwrap returns Err and sluice.ErrInvalid.
func (e *ConfigError) Unwrap() []error { return []error{e.Err, sluice.ErrInvalid} }

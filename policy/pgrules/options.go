package pgrules

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Table names and defaults. The table names are the seeds' and fixed; the
// schema is an option.
const (
	// RuleTable holds the rules, one row each.
	RuleTable = "RateLimitRule"
	// ViolationTable is the violation log the Sink appends to.
	ViolationTable = "RateLimitViolation"
	// DefaultChannel is the NOTIFY channel the rule table's trigger signals.
	DefaultChannel = "sluice_rules"
	// DefaultPollInterval is how often Watch reloads while it cannot
	// listen, and how often it checks a listening connection is alive.
	DefaultPollInterval = 10 * time.Second
	// DefaultTimeout bounds each statement the package sends.
	DefaultTimeout = 5 * time.Second
)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names are truncated by
// the server, so they are refused instead.
const maxIdentLen = 63

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Option configures Migrate, SchemaSQL, NewSource and NewSink. Each
// constructor uses the options that concern it and ignores the others, so
// one option list can be shared; the schema must be the same everywhere.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	schema       string
	channel      string
	pollInterval time.Duration
	timeout      time.Duration
	logger       *slog.Logger
	onReload     func(policy.Reload)
}

// WithSchema places both tables (and the trigger functions) in schema name
// instead of the first schema of the connection's search_path. The name
// must match [A-Za-z_][A-Za-z0-9_]* and be at most 63 bytes; it is quoted,
// so it is case-sensitive. Migrate creates the schema if needed.
func WithSchema(name string) Option { return optionFunc(func(c *config) { c.schema = name }) }

// WithChannel sets the NOTIFY channel (default DefaultChannel), same
// naming rules as WithSchema. Migrate writes it into the trigger, so run
// Migrate again after changing it.
func WithChannel(name string) Option { return optionFunc(func(c *config) { c.channel = name }) }

// WithPollInterval sets how often Watch reloads the rules while its
// listening connection is down, and how often it pings that connection
// while it is up (default DefaultPollInterval, at least 10ms).
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.pollInterval = d })
}

// WithTimeout bounds every exchange with the server (migration, load,
// LISTEN, ping, one COPY) that has no earlier deadline (default
// DefaultTimeout).
func WithTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.timeout = d }) }

// WithLogger sets where Watch logs reloads and lost connections (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// OnReload makes Watch call fn after every reload attempt that found the
// rows changed, or could not read them: with the set put in force, or
// the error that kept the rules in force as they were. Delay runs from
// the notification (or poll) to the set in force, reading and validating
// included. fn runs on Watch's goroutine and must not block.
func OnReload(fn func(policy.Reload)) Option { return optionFunc(func(c *config) { c.onReload = fn }) }

func newConfig(opts []Option) (config, error) {
	c := config{
		channel:      DefaultChannel,
		pollInterval: DefaultPollInterval,
		timeout:      DefaultTimeout,
	}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: pgrules: nil option", sluice.ErrInvalid)
		}
		o.apply(&c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.schema != "" {
		if err := validIdent("schema", c.schema); err != nil {
			return c, err
		}
	}
	if err := validIdent("channel", c.channel); err != nil {
		return c, err
	}
	switch {
	case c.pollInterval < 10*time.Millisecond:
		return c, fmt.Errorf("%w: pgrules: poll interval %s < 10ms", sluice.ErrInvalid, c.pollInterval)
	case c.timeout <= 0:
		return c, fmt.Errorf("%w: pgrules: timeout %s <= 0", sluice.ErrInvalid, c.timeout)
	}
	return c, nil
}

func validIdent(what, name string) error {
	if len(name) > maxIdentLen || !identRE.MatchString(name) {
		return fmt.Errorf("%w: pgrules: %s name %q: want 1..%d of [A-Za-z0-9_], not starting with a digit",
			sluice.ErrInvalid, what, name, maxIdentLen)
	}
	return nil
}

// ident quotes name, qualified with the configured schema.
func (c *config) ident(name string) string {
	if c.schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{c.schema, name}.Sanitize()
}

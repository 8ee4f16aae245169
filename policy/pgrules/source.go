package pgrules

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Source reads rules from the RateLimitRule table. Load reads them once;
// Watch keeps an engine up to date. A Source is safe for concurrent use.
type Source struct {
	pool Pool
	cfg  config
	sql  string // the SELECT of the active rows
	// listenConn returns a connection that LISTENs; tests replace it.
	listenConn func(ctx context.Context) (*pgx.Conn, error)

	mu           sync.Mutex // serializes reloads and guards the fields below
	tried        bool
	lastTried    [sha256.Size]byte // fingerprint of the rows last converted
	readFailures int               // consecutive reloads that could not read
}

// NewSource returns a Source reading the rule table through pool. It sends
// nothing until Load or Watch. Errors wrap sluice.ErrInvalid.
func NewSource(pool Pool, opts ...Option) (*Source, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pgrules: nil pool", sluice.ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Source{pool: pool, cfg: cfg, sql: "SELECT " + ruleColumns + " FROM " + cfg.ident(RuleTable) +
		" WHERE is_active ORDER BY domain, id"}
	s.listenConn = s.dialListener
	return s, nil
}

// Load reads every active row, converts the rows to one policy.Config per
// domain and validates them all with policy.NewSet. A bad row makes it
// return a *policy.ConfigError naming the table, the row's id and the
// column; a failed query wraps sluice.ErrUnavailable.
func (s *Source) Load(ctx context.Context) (*policy.Set, error) {
	rows, err := s.readRows(ctx)
	if err != nil {
		return nil, err
	}
	return s.convert(rows)
}

// ruleColumns are read in the order of ruleRow's fields.
const ruleColumns = "id, domain, descriptor, name, requests_per_unit, unit, unlimited, burst, algorithm, plan, " +
	"on_failure, budget, replaces, shadow_mode, share_threshold, detailed_metric"

// ruleRow is one active row as read, before any validation.
type ruleRow struct {
	ID              int64
	Domain          string
	Descriptor      []byte // jsonb text
	Name            *string
	RequestsPerUnit *int64
	Unit            *string
	Unlimited       bool
	Burst           *int64
	Algorithm       *string
	Plan            *string
	OnFailure       *string
	Budget          pgtype.Interval
	Replaces        []string
	ShadowMode      bool
	ShareThreshold  bool
	DetailedMetric  bool
}

func (s *Source) readRows(ctx context.Context) ([]ruleRow, error) {
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgrules: load %s: %w: %w", RuleTable, sluice.ErrUnavailable, err)
	}
	defer conn.Release()
	rows, _ := conn.Query(ctx, s.sql)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ruleRow, error) {
		var x ruleRow
		err := r.Scan(&x.ID, &x.Domain, &x.Descriptor, &x.Name, &x.RequestsPerUnit, &x.Unit, &x.Unlimited,
			&x.Burst, &x.Algorithm, &x.Plan, &x.OnFailure, &x.Budget, &x.Replaces, &x.ShadowMode, &x.ShareThreshold, &x.DetailedMetric)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgrules: load %s: %w: %w", RuleTable, sluice.ErrUnavailable, err)
	}
	return out, nil
}

// fingerprint identifies a list of rows by content, so an unchanged table
// is not converted and swapped again.
func fingerprint(rows []ruleRow) [sha256.Size]byte {
	h := sha256.New()
	for _, r := range rows {
		fmt.Fprintf(h, "%d\x00%q\x00%q\x00%s\x00%s\x00%s\x00%t\x00%s\x00%s\x00%s\x00%s\x00%v\x00%q\x00%t\x00%t\x00%t\n",
			r.ID, r.Domain, r.Descriptor, str(r.Name), num(r.RequestsPerUnit), str(r.Unit), r.Unlimited, num(r.Burst),
			str(r.Algorithm), str(r.Plan), str(r.OnFailure), r.Budget, r.Replaces, r.ShadowMode, r.ShareThreshold, r.DetailedMetric)
	}
	var fp [sha256.Size]byte
	h.Sum(fp[:0])
	return fp
}

func str(p *string) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprintf("%q", *p)
}

func num(p *int64) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

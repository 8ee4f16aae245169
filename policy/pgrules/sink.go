package pgrules

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Sink is a policy.Sink that appends violations to the RateLimitViolation
// table, one COPY per batch. Give it to the engine, which queues
// violations off the decision path, drops and counts them when the queue
// is full (Engine.DroppedViolations), and hands what it holds to the Sink
// when it is closed:
//
//	sink, err := pgrules.NewSink(pool)
//	engine, err := policy.New(set, policy.WithSink(sink))
//	defer engine.Close(ctx) // flushes the queue into the table
//
// A Sink is safe for concurrent use.
type Sink struct {
	pool    Pool
	cfg     config
	table   pgx.Identifier
	written atomic.Uint64
}

var _ policy.Sink = (*Sink)(nil)

// violationColumns are written in the order of violationRow.
var violationColumns = []string{"occurred_at", "domain", "rule", "key", "descriptor", "plan", "hits",
	"limit_count", "limit_period", "limit_burst", "remaining", "retry_after", "shadow", "by_policy", "denied"}

// NewSink returns a Sink writing through pool. It sends nothing before
// the first batch. Errors wrap sluice.ErrInvalid.
func NewSink(pool Pool, opts ...Option) (*Sink, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pgrules: nil pool", sluice.ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	table := pgx.Identifier{ViolationTable}
	if cfg.schema != "" {
		table = pgx.Identifier{cfg.schema, ViolationTable}
	}
	return &Sink{pool: pool, cfg: cfg, table: table}, nil
}

// WriteViolations appends batch with one COPY on one connection: all of it
// or, on error, none. The engine logs an error and does not retry. Errors
// wrap sluice.ErrUnavailable.
func (s *Sink) WriteViolations(ctx context.Context, batch []policy.Violation) error {
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgrules: write %d violations: %w: %w", len(batch), sluice.ErrUnavailable, err)
	}
	defer conn.Release()
	n, err := conn.CopyFrom(ctx, s.table, violationColumns, pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) {
		return violationRow(&batch[i])
	}))
	if err != nil {
		return fmt.Errorf("pgrules: write %d violations: %w: %w", len(batch), sluice.ErrUnavailable, err)
	}
	s.written.Add(uint64(n))
	return nil
}

// Written returns how many violations the Sink has written.
func (s *Sink) Written() uint64 { return s.written.Load() }

func violationRow(v *policy.Violation) ([]any, error) {
	desc := make([]entryJSON, len(v.Descriptor))
	for i, e := range v.Descriptor {
		value := pgText(e.Value)
		desc[i] = entryJSON{Key: pgText(e.Key), Value: &value}
	}
	descJSON, err := json.Marshal(desc)
	if err != nil {
		return nil, err
	}
	var plan *string
	if v.Plan != "" {
		p := pgText(v.Plan)
		plan = &p
	}
	retryAfter := pgtype.Interval{}
	if v.RetryAfter != sluice.Never {
		retryAfter = interval(v.RetryAfter)
	}
	return []any{v.Time, pgText(v.Domain), pgText(v.Rule), pgText(v.Key), descJSON, plan, v.Hits,
		v.Limit.Count, interval(v.Limit.Period), v.Limit.Burst, v.Remaining, retryAfter, v.Shadow, v.ByPolicy, v.Denied}, nil
}

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// pgText makes s storable as PostgreSQL text and jsonb strings, which
// hold neither NUL nor invalid UTF-8: both become U+FFFD.
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

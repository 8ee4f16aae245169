package policy

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sluice "github.com/sluicehq/sluice"
)

// Violation is one rule's denial of a request: the seeds'
// RateLimitViolation. Shadow denials are violations too, with Denied
// false when the request went through.
type Violation struct {
	Time       time.Time
	Domain     string
	Rule       string     // the rule's name (identity)
	Key        string     // the bucket key within the rule
	Descriptor Descriptor // the request descriptor that selected the rule
	Plan       string     // the plan variant, empty for the base limit
	Hits       int64
	Limit      sluice.Limit
	Remaining  int64
	RetryAfter time.Duration
	Shadow     bool // the rule is in shadow mode
	ByPolicy   bool // the store failed and the rule's failure policy denied
	Denied     bool // the request was denied (by this rule or another)
}

// Sink receives violations in batches from one goroutine at a time. The
// batch is the sink's only until WriteViolations returns: copy what must
// outlive the call. An error is logged; the batch is not retried.
type Sink interface {
	WriteViolations(ctx context.Context, batch []Violation) error
}

// SlogSink is a Sink that logs each violation at level Warn.
type SlogSink struct{ Logger *slog.Logger }

// WriteViolations logs batch.
func (s SlogSink) WriteViolations(ctx context.Context, batch []Violation) error {
	l := s.Logger
	if l == nil {
		l = slog.Default()
	}
	for i := range batch {
		v := &batch[i]
		l.LogAttrs(ctx, slog.LevelWarn, "rate limit violation",
			slog.Time("at", v.Time),
			slog.String("domain", v.Domain),
			slog.String("rule", v.Rule),
			slog.String("key", v.Key),
			slog.String("plan", v.Plan),
			slog.Int64("hits", v.Hits),
			slog.String("limit", v.Limit.String()),
			slog.Duration("retry_after", v.RetryAfter),
			slog.Bool("shadow", v.Shadow),
			slog.Bool("by_policy", v.ByPolicy),
			slog.Bool("denied", v.Denied),
		)
	}
	return nil
}

// sinkTimeout bounds one WriteViolations call.
const sinkTimeout = 10 * time.Second

// maxBatch is the most violations handed to a sink at once.
const maxBatch = 256

// violationQueue decouples the decision path from the sink: push never
// blocks, a full queue drops.
type violationQueue struct {
	ch      chan Violation
	dropped atomic.Uint64
	sink    Sink
	logger  *slog.Logger
	done    chan struct{}
	ctx     context.Context // the sink's; cancelled when close gives up
	cancel  context.CancelFunc
	once    sync.Once
	mu      sync.RWMutex // push holds it shared; close takes it to close ch safely
	closed  bool
}

func newViolationQueue(s Sink, size int, logger *slog.Logger) *violationQueue {
	if size == 0 {
		size = 4096
	}
	q := &violationQueue{ch: make(chan Violation, size), sink: s, logger: logger, done: make(chan struct{})}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	go q.run()
	return q
}

func (q *violationQueue) push(v Violation) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		q.dropped.Add(1)
		return
	}
	select {
	case q.ch <- v:
	default:
		q.dropped.Add(1)
	}
}

func (q *violationQueue) run() {
	defer close(q.done)
	batch := make([]Violation, 0, maxBatch)
	for v := range q.ch {
		batch = append(batch[:0], v)
	fill:
		for len(batch) < maxBatch {
			select {
			case v, ok := <-q.ch:
				if !ok {
					break fill
				}
				batch = append(batch, v)
			default:
				break fill
			}
		}
		ctx, cancel := context.WithTimeout(q.ctx, sinkTimeout)
		if err := q.sink.WriteViolations(ctx, batch); err != nil {
			q.logger.Warn("policy: violation sink failed", slog.Int("violations", len(batch)), slog.Any("err", err))
		}
		cancel()
	}
}

func (q *violationQueue) close(ctx context.Context) error {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		close(q.ch)
		q.mu.Unlock()
	})
	select {
	case <-q.done:
		q.cancel()
		return nil
	case <-ctx.Done():
		q.cancel() // a sink stuck past close gives up with it
		return ctx.Err()
	}
}

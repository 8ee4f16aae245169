package policy_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/internal/fakeclock"
	"github.com/sluicehq/sluice/policy"
)

// gatedSink records violations, blocking in WriteViolations until open.
type gatedSink struct {
	open chan struct{}
	mu   sync.Mutex
	got  []policy.Violation
}

func (s *gatedSink) WriteViolations(ctx context.Context, batch []policy.Violation) error {
	select {
	case <-s.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, batch...)
	return nil
}

func sinkEngine(t *testing.T, s policy.Sink, queue int) *policy.Engine {
	t.Helper()
	st, err := memstore.New(memstore.WithClock(fakeclock.New()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e, err := policy.New(mustSet(t, `
domain: api
descriptors:
  - key: user
    rate_limit: 1/minute
  - key: ip
    shadow_mode: true
    rate_limit: 1/minute
  - key: ip
    value: 6.6.6.6
    rate_limit: 0/second
`), policy.WithStore(st), policy.WithSink(s), policy.WithQueueSize(queue))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestSinkNeverBlocksAndCountsDrops(t *testing.T) {
	s := &gatedSink{open: make(chan struct{})}
	e := sinkEngine(t, s, 2)
	const calls = 20
	for range calls { // the first is admitted, the others are 19 violations
		decide(t, e, "api", 1, desc("user", "u"))
	}
	close(s.open)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	dropped := e.DroppedViolations()
	if dropped == 0 || uint64(len(s.got))+dropped != calls-1 {
		t.Fatalf("delivered %d + dropped %d, want some dropped and %d in all", len(s.got), dropped, calls-1)
	}
	v := s.got[0]
	if v.Domain != "api" || v.Rule != "api.user" || v.Key != "u" || v.Hits != 1 || !v.Denied || v.Shadow || v.Limit.Count != 1 {
		t.Fatalf("violation %+v", v)
	}
}

func TestSlogSinkReportsShadowDenials(t *testing.T) {
	var buf bytes.Buffer
	e := sinkEngine(t, policy.SlogSink{Logger: slog.New(slog.NewTextHandler(&buf, nil))}, 64)
	decide(t, e, "api", 1, desc("user", "a"), desc("ip", "1.1.1.1"))
	decide(t, e, "api", 1, desc("user", "b"), desc("ip", "1.1.1.1")) // admitted; ip's shadow rule denies
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "rate limit violation") != 1 || !strings.Contains(out, "rule=api.ip") ||
		!strings.Contains(out, "shadow=true") || !strings.Contains(out, "denied=false") {
		t.Fatalf("log:\n%s\nwant one shadow violation of api.ip, request not denied", out)
	}
}

func TestDenyListReportsOnlyItself(t *testing.T) {
	s := &gatedSink{open: make(chan struct{})}
	close(s.open)
	e := sinkEngine(t, s, 16)
	res := decide(t, e, "api", 1, desc("user", "u"), desc("ip", "6.6.6.6"))
	if res.Allowed || res.Statuses[1].Decision.Limit.Count != 0 || res.Statuses[1].Decision.Limit.Period != time.Second {
		t.Fatalf("deny-listed IP: %+v, want denied under 0/1s", res)
	}
	if res := decide(t, e, "api", 0, desc("user", "u")); res.Statuses[0].Decision.Remaining != 1 {
		t.Fatalf("user after a deny-listed request: %+v, want 1 left (nothing taken)", res)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.got) != 1 || s.got[0].Rule != "api.ip_6.6.6.6" {
		t.Fatalf("violations %+v, want the deny-list rule's only", s.got)
	}
}

package policy_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/core/memstore"
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
	st, err := memstore.New(memstore.WithClock(newClock()))
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
`), policy.WithStore(st), policy.WithSink(s, queue))
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
	e := sinkEngine(t, policy.SlogSink{Logger: slog.New(slog.NewTextHandler(&buf, nil))}, 0)
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

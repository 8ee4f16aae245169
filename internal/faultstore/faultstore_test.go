package faultstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/faultstore"
)

func TestDownFailsUntilUp(t *testing.T) {
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	st := faultstore.Wrap(mem)
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	// An invalid check reaches the wrapped store, which rejects it: the
	// wrapper forwarded it.
	if _, err := st.Apply(ctx, ratelimit.Check{}); err == nil || errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Apply while up = %v, want the memory store's own error", err)
	}
	st.SetDown(true)
	if _, err := st.Apply(ctx, ratelimit.Check{}); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Apply while down = %v, want ErrUnavailable", err)
	}
	if _, err := st.ApplyAll(ctx, nil, nil); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("ApplyAll while down = %v, want ErrUnavailable", err)
	}

	always := faultstore.Down()
	always.SetDown(false)
	if _, err := always.Apply(ctx, ratelimit.Check{}); !errors.Is(err, faultstore.ErrDown) {
		t.Fatalf("Apply on Down() after SetDown(false) = %v, want ErrDown", err)
	}
	if err := always.Reset(ctx, "ns", "k"); err != nil {
		t.Fatalf("Reset on Down() = %v, want nil", err)
	}
}

package pgrules

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

func TestConstructorsRefuseBadInput(t *testing.T) {
	t.Parallel()
	if _, err := NewSource(nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("NewSource(nil): %v, want ErrInvalid", err)
	}
	if _, err := NewSink(nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("NewSink(nil): %v, want ErrInvalid", err)
	}
	if err := Migrate(t.Context(), nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("Migrate(nil): %v, want ErrInvalid", err)
	}
	pool := &gatedPool{} // never used: every call below fails first
	for _, o := range []Option{nil, WithSchema("1x"), WithChannel("bad channel"), WithPollInterval(0), WithTimeout(0)} {
		if _, err := NewSource(pool, o); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("NewSource with a bad option: %v, want ErrInvalid", err)
		}
	}
	src, err := NewSource(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Watch(t.Context(), nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("Watch with a nil apply: %v, want ErrInvalid", err)
	}
}

package keyfmt_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/keyfmt"
)

func TestQuote(t *testing.T) {
	long := strings.Repeat("k", 100)
	tests := []struct{ key, want string }{
		{"user:1", `"user:1"`},
		{"a\r\nb\x00", `"a\r\nb\x00"`},
		{"\xff\xfe", "fffe"},
		{long, `"` + long[:64] + `"…(100 bytes)`},
		{"", `""`},
	}
	for _, tt := range tests {
		if got := keyfmt.Quote(tt.key); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.key, got, tt.want)
		}
	}
}

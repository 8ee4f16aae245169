package redisslot_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redisslot"
)

func TestCRC16(t *testing.T) {
	// The check value of CRC-16/XMODEM.
	if got := redisslot.CRC16("123456789"); got != 0x31C3 {
		t.Fatalf("CRC16(123456789) = %#04x, want 0x31c3", got)
	}
	if got := redisslot.CRC16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("CRC16([]byte(123456789)) = %#04x, want 0x31c3", got)
	}
	if got := redisslot.CRC16(""); got != 0 {
		t.Fatalf("CRC16(\"\") = %#04x, want 0", got)
	}
}

// TestSlot compares with what CLUSTER KEYSLOT of Redis 7 answers; the
// cluster test of redisstore checks many more keys against a live server.
func TestSlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo":                  12182,
		"hello":                866,
		"somekey":              11058,
		"123456789":            12739,
		"{user1000}.following": 3443, // the tag's slot
		"user1000":             3443,
		"foo{}{bar}":           8363, // an empty first tag: the whole key
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"{bar":                 4015,
		"foo{bar}{zap}":        5061, // only the first tag counts
		"bar":                  5061,
	} {
		if got := redisslot.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{"{a}b": "a", "x{ab}{c}": "ab", "{}a": "", "a{": "", "ab": "", "{{a}}": "{a"} {
		tag, ok := redisslot.HashTag(key)
		if tag != want || ok != (want != "") {
			t.Errorf("HashTag(%q) = %q, %v; want %q, %v", key, tag, ok, want, want != "")
		}
	}
}

// TestTagSlot: the slot of a key tagged by AppendTag is TagSlot of its
// source, and the tag never holds a brace.
func TestTagSlot(t *testing.T) {
	for i := range 1000 {
		src := "user:" + strconv.Itoa(i)
		tag := redisslot.AppendTag(nil, src)
		if len(tag) != redisslot.TagLen || strings.ContainsAny(string(tag), "{}") {
			t.Fatalf("tag %q of %q: length %d, want %d", tag, src, len(tag), redisslot.TagLen)
		}
		key := "p{" + string(tag) + "}:rule:" + src
		if got, want := redisslot.Slot(key), redisslot.TagSlot(src); got != want {
			t.Fatalf("Slot(%q) = %d, TagSlot(%q) = %d", key, got, src, want)
		}
	}
}

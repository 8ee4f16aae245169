package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestBucketBounds checks that every value lies in a bucket whose upper
// bound is at least the value and exceeds it by at most 1/64.
func TestBucketBounds(t *testing.T) {
	vals := []int64{0, 1, 127, 128, 129, 255, 256, 1000, 65_535, 1 << 40, 1<<62 + 12345, 1<<63 - 1}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		vals = append(vals, r.Int64N(1<<uint(r.IntN(62)+1)))
	}
	for _, v := range vals {
		b := bucket(v)
		up := upper(b)
		if up < v || up-v > v/64 {
			t.Fatalf("value %d: bucket %d has upper bound %d", v, b, up)
		}
		if b > 0 && upper(b-1) >= v {
			t.Fatalf("value %d: bucket %d, but bucket %d already ends at %d", v, b, b-1, upper(b-1))
		}
	}
}

func TestQuantile(t *testing.T) {
	var h histogram
	for v := int64(1); v <= 1000; v++ {
		h.add(v * 1000) // 1 µs to 1 ms
	}
	tests := []struct {
		q    float64
		want int64
	}{
		{0.5, 500_000},
		{0.99, 990_000},
		{0.999, 999_000},
		{1, 1_000_000},
	}
	for _, tt := range tests {
		got := h.quantile(tt.q)
		if got < tt.want || got-tt.want > tt.want/64 {
			t.Errorf("quantile(%v) = %d, want %d within 1/64 above", tt.q, got, tt.want)
		}
	}
	var empty histogram
	if q := empty.quantile(0.5); q != 0 {
		t.Errorf("empty histogram: quantile 0.5 = %d, want 0", q)
	}
}

// TestNativeAllowed reads native.lua's reply, status then allowed as
// little-endian doubles, from a string and from bytes alike.
func TestNativeAllowed(t *testing.T) {
	reply := func(vs ...float64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
		return b
	}
	tests := []struct {
		rep     []byte
		allowed bool
		bad     bool
	}{
		{reply(1, 1, 5), true, false},
		{reply(1, 0, 5), false, false},
		{reply(0, 1), false, true},
		{reply(1)[:8], false, true},
	}
	for _, tt := range tests {
		for name, got := range map[string]func() (bool, error){
			"bytes":  func() (bool, error) { return nativeAllowed(tt.rep) },
			"string": func() (bool, error) { return nativeAllowed(string(tt.rep)) },
		} {
			allowed, err := got()
			if (err != nil) != tt.bad || allowed != tt.allowed {
				t.Errorf("%s %x: allowed %v, error %v; want allowed %v, error %v", name, tt.rep, allowed, err, tt.allowed, tt.bad)
			}
		}
	}
}

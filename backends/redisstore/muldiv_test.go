package redisstore_test

import (
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestLuaMulDiv checks native.lua's muldiv and idiv, run by Redis, against
// big.Int on random and edge inputs: powers of two, divisors whose double
// equals the running remainder, results at the 2^51 cap.
func TestLuaMulDiv(t *testing.T) {
	src, err := os.ReadFile("lua/native.lua")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	start := strings.Index(text, "local floor")
	end := strings.Index(text, "-- The flags say")
	if start < 0 || end < start {
		t.Fatal("native.lua no longer has the expected layout (local floor … The flags say)")
	}
	script := text[start:end] + `
local r = {}
for i = 1, #ARGV, 4 do
  local q, rem = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i+1]), tonumber(ARGV[i+2]), tonumber(ARGV[i+3]))
  if q == nil then r[#r+1] = -1; r[#r+1] = -1 else r[#r+1] = q; r[#r+1] = rem end
end
return r
`
	srv := startServer(t)
	c := newClient(t, srv.addr())
	const lim = int64(1) << 52
	r := rand.New(rand.NewPCG(rand.Uint64(), 4))
	pick := func() int64 {
		switch r.IntN(6) {
		case 0:
			return int64(1) << r.IntN(52)
		case 1:
			return (int64(1) << r.IntN(52)) - 1
		case 2:
			return r.Int64N(1000)
		default:
			return r.Int64N(lim)
		}
	}
	var args []any
	var in [][4]int64
	for range 2000 {
		x, y, add, z := pick(), pick(), pick(), max(1, min(pick(), 1<<51))
		if r.IntN(4) == 0 { // keep the quotient in range
			y = r.Int64N(1 << 20)
			x = r.Int64N(1 << 30)
		}
		in = append(in, [4]int64{x, y, add, z})
		for _, v := range []int64{x, y, add, z} {
			args = append(args, strconv.FormatInt(v, 10))
		}
	}
	res, err := c.Eval(t.Context(), script, nil, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	capQ := big.NewInt(1 << 51)
	checked := 0
	for i, v := range in {
		x, y, add, z := big.NewInt(v[0]), big.NewInt(v[1]), big.NewInt(v[2]), big.NewInt(v[3])
		num := new(big.Int).Add(new(big.Int).Mul(x, y), add)
		q, m := new(big.Int).QuoRem(num, z, new(big.Int))
		gotQ, gotR := res[2*i], res[2*i+1]
		if q.Cmp(capQ) > 0 {
			if gotQ != -1 {
				t.Fatalf("muldiv(%d, %d, %d, %d) = %d, want nil (quotient %s over 2^51)", v[0], v[1], v[2], v[3], gotQ, q)
			}
			continue
		}
		checked++
		if gotQ != q.Int64() || gotR != m.Int64() {
			t.Fatalf("muldiv(%d, %d, %d, %d) = %d r %d, want %s r %s", v[0], v[1], v[2], v[3], gotQ, gotR, q, m)
		}
	}
	if checked < 400 {
		t.Fatalf("only %d of %d cases had an in-range quotient", checked, len(in))
	}
}

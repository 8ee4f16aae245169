-- native.lua: the native path. Applies one or several checks of the
-- in-repo algorithms (gcra, tokenbucket) atomically, all or nothing,
-- reproducing their Go Decide bit for bit with integer arithmetic.
--
-- Lua numbers are doubles: integers are exact below 2^53. The store sends
-- a check here only when Period and the time to refill Burst are at most
-- 2^51 ns (about 26 days), so every span fits; products such as
-- elapsed*Count, which do not, go through muldiv (exact shift-and-add with
-- a running quotient and remainder). Absolute instants (~1.8e18 ns) are
-- kept as two 32-bit halves (hi, lo) and only differences are taken as
-- numbers. Any case outside these bounds (a state far in the future, debt,
-- corrupt state) makes the script return {-1} before writing anything, and
-- the store then decides that call on its generic path.
--
-- KEYS: one state key per check (a key may repeat; checks apply in order).
-- ARGV[1], ARGV[2]: '' and '' to use TIME, or Unix seconds and nanoseconds
--   injected by tests (WithTestClock).
-- ARGV[3]: milliseconds added to every PEXPIRE.
-- Then STRIDE values per check: algorithm ('g' or 't'), cost, burst, count,
-- period, then for gcra the spans (q + r/count ns) tau, units(cost),
-- units(1) and debt as q, r pairs; for tokenbucket, zeros.
-- Returns {status, then per check: allowed, changed, remaining,
-- retry_after (-1 for never), reset_after, ttl} with status 1 (all allowed,
-- written), 0 (denied, nothing written) or -1 (use the generic path).

local TWO32 = 4294967296
local LIMIT = 1048576 -- 2^20: |hi difference| below it keeps a difference exact
local STRIDE = 13
local floor = math.floor

-- idiv returns floor(x/y) and x mod y exactly for 0 <= x < 2^52, 0 < y.
local function idiv(x, y)
  local q = floor(x / y)
  local r = x - q * y
  while r < 0 do q = q - 1; r = r + y end
  while r >= y do q = q + 1; r = r - y end
  return q, r
end

-- muldiv returns floor((x*y + add)/z) and the remainder, exactly, for
-- integers 0 <= x, y, add < 2^52 and 0 < z <= 2^51, or nil when the
-- quotient exceeds 2^51. A product below 2^52 is exact in a double and
-- divided directly. Otherwise y is consumed in digits of k bits from the
-- top, the partial product kept as a quotient and a remainder of z, with k
-- chosen so that z*2^k <= 2^52: no intermediate passes 2^53.
local CAP = 2251799813685248 -- 2^51
local LN2 = 0.6931471805599453
local function muldiv(x, y, add, z)
  local prod = x * y
  if prod < 4503599627370496 and add < 4503599627370496 then -- 2^52
    local q, r = idiv(prod, z)
    local aq, ar = idiv(add, z)
    q, r = q + aq, r + ar
    if r >= z then r = r - z; q = q + 1 end
    if q > CAP then return nil end
    return q, r
  end
  local xq, xr = idiv(x, z)
  local aq, ar = 0, 0
  local k = 50 - floor(math.log(z) / LN2)
  if k < 1 then k = 1 end
  local base = 2 ^ k
  local p = 1
  while p * base <= y do p = p * base end
  while p >= 1 do
    local d = floor(y / p)
    y = y - d * p
    local hq, hr = idiv(ar * base, z)
    local dq, dr = idiv(d * xr, z)
    aq = aq * base + hq + d * xq + dq
    ar = hr + dr
    if ar >= z then ar = ar - z; aq = aq + 1 end
    if aq > CAP then return nil end
    p = p / base
  end
  local q, r = idiv(add, z)
  q, r = q + aq, r + ar
  if r >= z then r = r - z; q = q + 1 end
  if q > CAP then return nil end
  return q, r
end

local function ceildiv(x, y)
  local q, r = idiv(x, y)
  if r > 0 then q = q + 1 end
  return q
end

-- instant returns sec*1e9 + sub*scale as (hi, lo), lo in 0..2^32-1.
local function instant(sec, sub, scale)
  local a = floor(sec / 65536)
  local b = sec - a * 65536
  local m = a * 1000000000
  local hi = floor(m / 65536)
  local lo = (m - hi * 65536) * 65536 + b * 1000000000 + sub * scale
  local c = floor(lo / TWO32)
  return hi + c, lo - c * TWO32
end

-- get64 reads 8 big-endian bytes at i as a signed (hi, lo).
local function get64(s, i)
  local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(s, i, i + 7)
  local hi = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  if hi >= 2147483648 then hi = hi - TWO32 end
  return hi, ((b5 * 256 + b6) * 256 + b7) * 256 + b8
end

-- bytes4 returns the 4 big-endian bytes of 0 <= v < 2^32.
local function bytes4(v)
  return floor(v / 16777216) % 256, floor(v / 65536) % 256, floor(v / 256) % 256, v % 256
end

-- enc returns tag followed by 8 big-endian bytes for each signed (hi, lo)
-- pair given, building the state with a single string.char call.
local function enc(tag, h1, l1, h2, l2, h3, l3)
  if h1 < 0 then h1 = h1 + TWO32 end
  if h2 < 0 then h2 = h2 + TWO32 end
  local a1, a2, a3, a4 = bytes4(h1)
  local b1, b2, b3, b4 = bytes4(l1)
  local c1, c2, c3, c4 = bytes4(h2)
  local d1, d2, d3, d4 = bytes4(l2)
  if h3 == nil then
    return string.char(tag, a1, a2, a3, a4, b1, b2, b3, b4, c1, c2, c3, c4, d1, d2, d3, d4)
  end
  if h3 < 0 then h3 = h3 + TWO32 end
  local e1, e2, e3, e4 = bytes4(h3)
  local f1, f2, f3, f4 = bytes4(l3)
  return string.char(tag, a1, a2, a3, a4, b1, b2, b3, b4, c1, c2, c3, c4, d1, d2, d3, d4,
    e1, e2, e3, e4, f1, f2, f3, f4)
end

-- small returns hi*2^32+lo when it is exact (|value| < 2^52), else nil.
local function small(hi, lo)
  if hi >= -LIMIT and hi < LIMIT then return hi * TWO32 + lo end
  return nil
end

-- diff returns (ah,al) - (bh,bl) when exact, else nil.
local function diff(ah, al, bh, bl)
  return small(ah - bh, al - bl)
end

-- tsub returns (hi, lo) - q for an integer |q| < 2^52.
local function tsub(hi, lo, q)
  local qh = floor(q / TWO32)
  hi = hi - qh
  lo = lo - (q - qh * TWO32)
  if lo < 0 then lo = lo + TWO32; hi = hi - 1 end
  if lo >= TWO32 then lo = lo - TWO32; hi = hi + 1 end
  return hi, lo
end

-- split returns an integer |v| < 2^52 as a signed (hi, lo).
local function split(v)
  local h = floor(v / TWO32)
  return h, v - h * TWO32
end

-- Spans: q + r/c nanoseconds with 0 <= r < c.
local function ssub(aq, ar, bq, br, c)
  local q, r = aq - bq, ar - br
  if r < 0 then r = r + c; q = q - 1 end
  return q, r
end

local function sless(aq, ar, bq, br)
  return aq < bq or (aq == bq and ar < br)
end

local function sceil(q, r)
  if q < 0 then return 0 end
  if r > 0 then return q + 1 end
  return q
end

-- gcra_outcome returns the remaining tokens and the reset time of a GCRA
-- state whose refill is the span q + r/count.
local function gcra_outcome(q, r, tq, tr, count, period, burst)
  local reset = sceil(ssub(tq, tr, q, r, count))
  if q < 0 then return 0, reset end
  local n = muldiv(q, count, r, period)
  if n == nil or n > burst then n = burst end
  return n, reset
end

-- gcra mirrors algorithms/gcra Decide. Returns nil to fall back, or
-- allowed, new state, remaining, retry (-1 never), reset, ttl.
local function gcra(state, nh, nl, b)
  local cost, burst, count, period = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local tq, tr = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  -- units(1) and the debt span are parsed only when needed: tonumber is
  -- a large share of the script's cost.
  local aq, ar = tq, tr
  local dq, dr
  local none = true
  if state then
    none = false
    if #state ~= 17 or string.byte(state, 1) ~= 0x21 then return nil end
    local sh, sl = get64(state, 2)
    local f = small(get64(state, 10))
    if f == nil or f < 0 or f >= count then f = 0 end
    local d = diff(nh, nl, sh, sl)
    if d == nil then
      if nh < sh then return nil end
      d = tq + 2 -- far in the past: full
    end
    if d >= 0 then
      if d > tq + 1 then
        aq, ar = tq, tr
      else
        aq, ar = ssub(d, 0, 0, f, count)
      end
    else
      d = -d
      if d > CAP then return nil end -- 2^51
      dq, dr = tonumber(ARGV[b + 11]), tonumber(ARGV[b + 12])
      if d > dq + 1 then
        aq, ar = ssub(-dq, 0, 0, dr, count)
      else
        aq, ar = ssub(-d, 0, 0, f, count)
      end
    end
    -- clamp to -debt..tau (only a negative refill can reach -debt)
    if sless(tq, tr, aq, ar) then
      aq, ar = tq, tr
    elseif aq < 0 then
      if dq == nil then dq, dr = tonumber(ARGV[b + 11]), tonumber(ARGV[b + 12]) end
      local lq, lr = ssub(0, 0, dq, dr, count)
      if sless(aq, ar, lq, lr) then aq, ar = lq, lr end
    end
  end
  local outcome = gcra_outcome
  if cost == 0 or cost > burst then
    local rem, reset = outcome(aq, ar, tq, tr, count, period, burst)
    local ttl = reset
    if none then ttl = 0 end
    if cost == 0 then
      local w = sceil(ssub(tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10]), aq, ar, count))
      return w == 0, state, rem, w, reset, ttl
    end
    return false, state, rem, -1, reset, ttl
  end
  local uq, ur = tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8])
  local w = sceil(ssub(uq, ur, aq, ar, count))
  if w > 0 then
    local rem, reset = outcome(aq, ar, tq, tr, count, period, burst)
    local ttl = reset
    if none then ttl = 0 end
    return false, state, rem, w, reset, ttl
  end
  local xq, xr = ssub(aq, ar, uq, ur, count)
  local q, f = xq, 0
  if xr > 0 then q = q + 1; f = count - xr end
  local sh, sl = tsub(nh, nl, q)
  if sh < 0 then return nil end
  local fh, fl = split(f)
  local out = enc(0x21, sh, sl, fh, fl)
  local rem, reset = outcome(xq, xr, tq, tr, count, period, burst)
  return true, out, rem, 0, reset, reset
end

-- tokenbucket mirrors algorithms/tokenbucket Decide.
local function tokenbucket(state, nh, nl, b)
  local cost, burst, count, period = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local n, f, th, tl, skew = burst, 0, nh, nl, 0
  if state then
    if #state ~= 25 or string.byte(state, 1) ~= 0x11 then return nil end
    local sn = small(get64(state, 2))
    f = small(get64(state, 10))
    local sh, sl = get64(state, 18)
    local d = diff(nh, nl, sh, sl)
    if d == nil then
      if nh < sh then return nil end
      d = nil -- far in the past: full
    elseif d < 0 then
      skew = -d
      if skew > CAP then return nil end
      nh, nl, d = sh, sl, 0
    end
    if f == nil or f < 0 or f >= period then f = 0 end
    if sn == nil then
      local h = get64(state, 2)
      if h < 0 then return nil end
      sn = burst
    end
    if sn < 0 then return nil end -- debt: generic path
    if sn > burst then sn = burst end
    if sn == burst or d == nil then
      n, f = burst, 0
    else
      local q, r = muldiv(d, count, f, period)
      if q == nil or q >= burst - sn then
        n, f = burst, 0
      else
        n, f = sn + q, r
      end
    end
    th, tl = nh, nl
  end
  -- wait returns ceil(((x-level)*period - f)/count) plus the skew, 0 when
  -- level >= x, or nil when it does not fit.
  local function wait(x, level)
    if level >= x then return 0 end
    local q = muldiv(x - level - 1, period, period - f + count - 1, count)
    if q == nil then return nil end
    return skew + q
  end
  local function outcome(level)
    local rem = level
    if rem < 0 then rem = 0 end
    local reset = 0
    if level < burst then reset = wait(burst, level) end
    return rem, reset
  end
  if cost == 0 or cost > burst or n < cost then
    local rem, reset = outcome(n)
    local retry = -1
    if cost == 0 then retry = wait(1, n) elseif cost <= burst then retry = wait(cost, n) end
    if reset == nil or retry == nil then return nil end
    local ttl = reset
    if not state then ttl = 0 end
    if cost > burst then return false, state, rem, -1, reset, ttl end
    if cost == 0 then return n >= 1, state, rem, retry, reset, ttl end
    return false, state, rem, retry, reset, ttl
  end
  local level = n - cost
  local out = false
  if level < burst then
    local nh2, nl2 = split(level)
    local fh, fl = split(f)
    out = enc(0x11, nh2, nl2, fh, fl, th, tl)
  end
  local rem, reset = outcome(level)
  if reset == nil then return nil end
  return true, out, rem, 0, reset, reset
end

local nh, nl
if ARGV[1] == '' then
  local t = redis.call('TIME')
  nh, nl = instant(tonumber(t[1]), tonumber(t[2]), 1000)
else
  nh, nl = instant(tonumber(ARGV[1]), tonumber(ARGV[2]), 1)
end
local margin = tonumber(ARGV[3])

local cur, orig, last, changed = {}, {}, {}, {}
local reply = {0}
local allowed = true
for i = 1, #KEYS do
  local k = KEYS[i]
  if orig[k] == nil then
    orig[k] = redis.call('GET', k)
    cur[k] = orig[k]
  end
  local base = 4 + (i - 1) * STRIDE
  local ok, out, rem, retry, reset, ttl
  if ARGV[base] == 'g' then
    ok, out, rem, retry, reset, ttl = gcra(cur[k], nh, nl, base)
  else
    ok, out, rem, retry, reset, ttl = tokenbucket(cur[k], nh, nl, base)
  end
  if ok == nil then return {-1} end
  local ch = 0
  if ok then
    if out ~= cur[k] then ch = 1; changed[k] = true end
    cur[k] = out
  else
    allowed = false
  end
  last[k] = ttl
  local o = 7 + (i - 1) * 6
  reply[o - 5] = ok and 1 or 0
  reply[o - 4] = ch
  reply[o - 3] = rem
  reply[o - 2] = retry
  reply[o - 1] = reset
  reply[o] = ttl
end
if not allowed then return reply end
for k, _ in pairs(changed) do
  local s = cur[k]
  local ttl = last[k]
  if s == false or ttl <= 0 then
    redis.call('DEL', k)
  else
    redis.call('SET', k, s, 'PX', ceildiv(ttl, 1000000) + margin)
  end
end
reply[1] = 1
return reply

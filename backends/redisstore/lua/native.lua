-- native.lua: the native path. Applies one or several takes of the
-- in-repo algorithms gcra, tokenbucket, leakybucket (as a meter),
-- fixedwindow, slidingwindow and slidinglog, reservations and refunds of
-- gcra, tokenbucket and leakybucket, and charges of all but slidinglog,
-- atomically, all or nothing, reproducing their Go Decide, Reserve, Refund
-- and Charge bit for bit with integer arithmetic. A charge is never
-- denied: a call whose checks are all charges always writes (status 1),
-- and one mixing charges with takes or reservations writes nothing when
-- one of those is denied, as the Go stores do.
--
-- Lua numbers are doubles: integers are exact below 2^53. The store sends
-- a check here only when Period and the time to refill Burst are at most
-- 2^51 ns (about 26 days), so every span fits; products such as
-- elapsed*Count, which may not, go through muldiv (a direct division when
-- the product is below 2^52, else an exact shift-and-add with a running
-- quotient and remainder). Absolute instants (~1.8e18 ns) are kept as two
-- 32-bit halves (hi, lo) and only differences are taken as numbers. Any
-- case outside these bounds (a state far in the future, a debt or a
-- carried window count whose repayment takes 2^52 ns or more, corrupt
-- state) makes the script return {-1} before writing anything, and the
-- store then decides that call on its generic path.
--
-- Arguments are binary, decoded with the struct library (one C call
-- instead of a tonumber per value); every value is an integer below 2^53,
-- so the little-endian doubles carry it exactly.
-- KEYS: one state key per check (a key may repeat; checks apply in order).
-- ARGV[1]: nine doubles: the PEXPIRE margin in milliseconds; Unix
--   seconds and nanoseconds injected by tests (WithTestClock), or -1 and 0
--   to use TIME; then 1 or 0 for each algorithm (gcra, tokenbucket,
--   leakybucket, fixedwindow, slidingwindow, slidinglog): whether the call
--   uses it.
-- ARGV[1+i]: thirteen doubles for check i: algorithm (1 gcra, 2
--   tokenbucket, 3 leakybucket, 4 fixedwindow, 5 slidingwindow, 6
--   slidinglog), cost, burst, count,
--   period (for the window algorithms, the limit as one window: period
--   W = Burst*Period/Count and count = burst, as Go's window.Of), then for gcra the spans (q + r/count ns) tau, units(cost),
--   units(1) and debt as q, r pairs; for tokenbucket and leakybucket,
--   zeros but MaxDebt in the seventh; for fixedwindow, the largest count
--   a state carries, min(Burst*(MaxWindowSpan/Period + 1), 2^51), then
--   zeros; for the others, zeros. A reservation (op 1) or refund (op 2)
--   of gcra, tokenbucket or leakybucket, or a charge (op 3) of any
--   algorithm but slidinglog, appends two doubles: the op and MaxWait in
--   ns (0 but for a reservation); a gcra refund's or charge's units(cost)
--   is units(min(cost, Burst + MaxDebt)), capped at 2^52.
-- A batch (several independent calls in one invocation, from the store's
--   coalescer) adds one last argument: each call's number of checks, as
--   doubles; KEYS and the check arguments are the calls' one after another.
-- Returns little-endian doubles packed in one string (cheaper to build
-- and to parse than an array of integers): status, then per check
-- allowed (for a charge: whether one more unit would pass), changed,
-- remaining, retry_after (-1 for never), reset_after, ttl and delay (a
-- reservation's wait, else 0), with status 1 (every take and reservation
-- allowed, written) or 0 (one denied, nothing written); or the status -1
-- alone (use the generic path). The algorithm functions return ok (nil to
-- fall back; false for a denied take or reservation, which writes
-- nothing), the new state (false to delete), remaining, retry, reset,
-- ttl, delay and, for a charge only, whether one more unit passes.

-- Constants are literals (2^20 = 1048576, 2^32 = 4294967296,
-- 2^51 = 2251799813685248, 2^52 = 4503599627370496): a local would be an
-- upvalue of every function using it, created on every call.
local floor = math.floor
local unpack, pack = struct.unpack, struct.pack

-- muldiv returns floor((x*y + add)/z) and the remainder, exactly, for
-- integers 0 <= x, y, add < 2^52 and 0 < z <= 2^51, or nil when the
-- quotient exceeds 2^51. A sum below 2^52 is exact in a double and
-- divided directly. Otherwise y is consumed in digits of k bits from the
-- top, the partial product kept as a quotient and a remainder of z, with k
-- chosen so that z*2^k <= 2^52: no intermediate passes 2^53. Its helper
-- idiv is created only on that rarer path (every closure a script creates
-- costs on each call).
local function muldiv(x, y, add, z)
  local prod = x * y + add
  if prod < 4503599627370496 then
    -- the double quotient may be one off: correct it
    local q = floor(prod / z)
    local r = prod - q * z
    while r < 0 do q = q - 1; r = r + z end
    while r >= z do q = q + 1; r = r - z end
    if q > 2251799813685248 then return nil end
    return q, r
  end
  -- idiv returns floor(a/b) and a mod b exactly for 0 <= a < 2^52, 0 < b.
  local function idiv(a, b)
    local q = floor(a / b)
    local r = a - q * b
    while r < 0 do q = q - 1; r = r + b end
    while r >= b do q = q + 1; r = r - b end
    return q, r
  end
  local xq, xr = idiv(x, z)
  local aq, ar = 0, 0
  local k = 50 - floor(math.log(z) / 0.6931471805599453)
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
    if aq > 2251799813685248 then return nil end
    p = p / base
  end
  local q, r = idiv(add, z)
  q, r = q + aq, r + ar
  if r >= z then r = r - z; q = q + 1 end
  if q > 2251799813685248 then return nil end
  return q, r
end

-- The flags say which algorithms this call uses: only their functions are
-- created (each closure is a measurable share of a short script's cost).
local margin, sec, ns, useG, useT, useL, useF, useS, useLog = unpack('<ddddddddd', ARGV[1])

local gcra
if useG == 1 then
  -- gcra mirrors algorithms/gcra Decide. Spans are q + r/count ns with
  -- 0 <= r < count. Returns nil to fall back, or allowed, new state,
  -- remaining, retry (-1 never), reset, ttl.
  gcra = function(state, nh, nl, cost, burst, count, period, tq, tr, uq, ur, oq, o_r, dq, dr, op, maxwait)
    local aq, ar = tq, tr -- refill a, clamped to tau
    if state then
      if #state ~= 17 then return nil end
      local tag, sh, sl, f = unpack('>Bi4I4i8', state)
      if tag ~= 0x21 then return nil end
      -- f is exact below 2^53; a larger or negative one is taken as 0
      -- either way, since count <= 2^40.
      if f < 0 or f >= count then f = 0 end
      local dh = nh - sh
      local d
-- a hi difference below 2^20 keeps now - S below 2^52: exact
      if dh >= -1048576 and dh < 1048576 then
        d = dh * 4294967296 + (nl - sl)
      elseif dh < 0 then
        return nil
      else
        d = tq + 2 -- far in the past: full
      end
      if d >= 0 then
        if d <= tq + 1 then
          aq, ar = d, -f
          if ar < 0 then ar = ar + count; aq = aq - 1 end
        end
      else
        d = -d
        if d > 2251799813685248 then return nil end
        if d > dq + 1 then
          aq, ar = -dq, -dr
        else
          aq, ar = -d, -f
        end
        if ar < 0 then ar = ar + count; aq = aq - 1 end
      end
      -- clamp to -debt..tau (only a negative refill can reach -debt)
      if tq < aq or (tq == aq and tr < ar) then
        aq, ar = tq, tr
      elseif aq < 0 then
        local lq, lr = -dq, -dr
        if lr < 0 then lr = lr + count; lq = lq - 1 end
        if aq < lq or (aq == lq and ar < lr) then aq, ar = lq, lr end
      end
    end
    if op >= 2 or (op == 1 and cost > 0 and cost <= burst) then
      -- Reserve (op 1, for 0 < cost <= burst), Refund (op 2) and Charge
      -- (op 3) of algorithms/gcra on the settled refill a = (aq, ar),
      -- written here so that a take creates no closure for them. For a
      -- refund or a charge, (uq, ur) is units(min(amount, Burst +
      -- MaxDebt)), capped at 2^52 (more fills any bucket the script
      -- decides; a charge that large falls back). The returns are a
      -- take's and the delay; a charge adds whether one more unit passes.
      -- outcome returns remaining = floor(a*count/period) (0 in debt, at
      -- most burst) and reset = ceil(tau - a) for a = (q, r).
      local function outcome(q, r)
        local rq, rr = tq - q, tr - r
        if rr < 0 then rr = rr + count; rq = rq - 1 end
        local reset = 0
        if rq >= 0 then
          reset = rq
          if rr > 0 then reset = rq + 1 end
        end
        local rem = 0
        if q >= 0 then
          rem = muldiv(q, count, r, period)
          if rem == nil or rem > burst then rem = burst end
        end
        return rem, reset
      end
      local nq, nr, delay, commit = aq, ar, 0, true
      if op == 3 then
        -- next = max(a - units(amount), -debt); a charge of 0 is a peek
        if cost == 0 then
          commit = false
        else
          if uq >= 4503599627370496 then return nil end
          nq, nr = aq - uq, ar - ur
          if nr < 0 then nr = nr + count; nq = nq - 1 end
          local lq, lr = -dq, -dr
          if lr < 0 then lr = lr + count; lq = lq - 1 end
          if nq < lq or (nq == lq and nr < lr) then
            -- a debt span capped at 2^52 is not the real bound
            if dq >= 4503599627370496 then return nil end
            nq, nr = lq, lr
          end
        end
      elseif op == 2 then
        -- a refund of 0 or into a full bucket changes nothing
        if cost == 0 or not (aq < tq or (aq == tq and ar < tr)) then
          commit = false
        else
          nq, nr = aq + uq, ar + ur
          if nr >= count then nr = nr - count; nq = nq + 1 end
          if tq < nq or (tq == nq and tr < nr) then nq, nr = tq, tr end
        end
      else
        -- delay = ceil(units(cost) - a), next = a - units(cost), which must
        -- stay at or above -debt
        local q, r = uq - aq, ur - ar
        if r < 0 then r = r + count; q = q - 1 end
        if q >= 0 then
          delay = q
          if r > 0 then delay = q + 1 end
        end
        nq, nr = aq - uq, ar - ur
        if nr < 0 then nr = nr + count; nq = nq - 1 end
        local lq, lr = -dq, -dr
        if lr < 0 then lr = lr + count; lq = lq - 1 end
        if delay > maxwait or nq < lq or (nq == lq and nr < lr) then commit = false end
      end
      -- peek returns a charge's wait for one unit on the refill (q, r):
      -- ceil(units(1) - a), 0 when it passes now (created for charges only)
      local peek
      if op == 3 then
        peek = function(q, r)
          local wq, wr = oq - q, o_r - r
          if wr < 0 then wr = wr + count; wq = wq - 1 end
          if wq < 0 then return 0 end
          if wr > 0 then return wq + 1 end
          return wq
        end
      end
      if not commit then
        local rem, reset = outcome(aq, ar)
        local ttl = reset
        if not state then ttl = 0 end
        if op == 3 then
          local w = peek(aq, ar)
          return true, state, rem, w, reset, ttl, 0, w == 0
        end
        if op == 2 then return true, state, rem, 0, reset, ttl, 0 end
        return false, state, rem, delay, reset, ttl, 0
      end
      local out = false -- a full bucket is the empty state
      if nq < tq or (nq == tq and nr < tr) then
        -- S' = now - next, kept as s + f/count
        local q, f = nq, 0
        if nr > 0 then q = q + 1; f = count - nr end
        local qh = floor(q / 4294967296)
        local sh, sl = nh - qh, nl - (q - qh * 4294967296)
        if sl < 0 then sl = sl + 4294967296; sh = sh - 1 end
        if sl >= 4294967296 then sl = sl - 4294967296; sh = sh + 1 end
        if sh < 0 or sh >= 2147483648 then return nil end
        out = pack('>Bi4I4i8', 0x21, sh, sl, f)
      end
      local rem, reset = outcome(nq, nr)
      if op == 3 then
        local w = peek(nq, nr)
        return true, out, rem, w, reset, reset, 0, w == 0
      end
      return true, out, rem, 0, reset, reset, delay
    end
    local wq, wr -- the span to wait for: units(cost), or units(1) to peek
    if cost == 0 then
      wq, wr = oq, o_r
    elseif cost <= burst then
      wq, wr = uq, ur
    end
    local allowed = false
    if wq ~= nil then
      -- w = ceil(span - a), 0 when a covers the span
      local q, r = wq - aq, wr - ar
      if r < 0 then r = r + count; q = q - 1 end
      if q < 0 then
        wq = 0
      else
        wq = q
        if r > 0 then wq = q + 1 end
      end
      allowed = wq == 0
    end
    local out = state
    if allowed and cost > 0 then
      -- a' = a - units(cost); S' = now - a', kept as s + f/count
      aq, ar = aq - uq, ar - ur
      if ar < 0 then ar = ar + count; aq = aq - 1 end
      local q, f = aq, 0
      if ar > 0 then q = q + 1; f = count - ar end
      local qh = floor(q / 4294967296)
      local sh, sl = nh - qh, nl - (q - qh * 4294967296)
      if sl < 0 then sl = sl + 4294967296; sh = sh - 1 end
      if sl >= 4294967296 then sl = sl - 4294967296; sh = sh + 1 end
      if sh < 0 then return nil end
      out = pack('>Bi4I4i8', 0x21, sh, sl, f)
    end
    -- ttl = ceil(tau - a), the time until full (0 for no state); the
    -- outcome's other values are computed in Go
    local ttl = 0
    if state or out ~= state then
      local rq, rr = tq - aq, tr - ar
      if rr < 0 then rr = rr + count; rq = rq - 1 end
      if rq >= 0 then
        ttl = rq
        if rr > 0 then ttl = rq + 1 end
      end
    end
    return allowed, out, nil, nil, nil, ttl
  end

end

local tbwait, tbsettle, tokenbucket
if useT + useL > 0 then
  -- tbwait returns ceil(((x-level)*period - f)/count) plus skew, 0 when
  -- level >= x, or nil when it does not fit.
  tbwait = function(x, level, period, count, f, skew)
    if level >= x then return 0 end
    local q = muldiv(x - level - 1, period, period - f + count - 1, count)
    if q == nil then return nil end
    return skew + q
  end

  -- tbsettle returns, for a decision leaving the level at m, the state to
  -- store when write is set (false: delete, the bucket is full), the
  -- remaining count and the time until full; nil when that does not fit.
  tbsettle = function(write, m, burst, stag, f, th, tl, period, count, skew)
    local out = false
    if write and m < burst then
      local v = m
      if stag == 0x31 then v = burst - m end
      out = pack('>Bi8i8i4I4', stag, v, f, th, tl)
    end
    local reset = 0
    if m < burst then
      reset = tbwait(burst, m, period, count, f, skew)
      if reset == nil then return nil end
    end
    local rem = m
    if rem < 0 then rem = 0 end
    return out, rem, reset
  end

  -- tokenbucket mirrors algorithms/tokenbucket Decide, and with tag 0x31
  -- algorithms/leakybucket Decide: the leaky bucket as a meter is the token
  -- bucket whose tokens are the free room, Burst - W for W units of water,
  -- with the same fraction, instant and outcomes; only the stored count and
  -- the tag differ.
  tokenbucket = function(state, nh, nl, cost, burst, count, period, stag, md, op, maxwait)
    local n, f, th, tl, skew = burst, 0, nh, nl, 0
    if state then
      if #state ~= 25 then return nil end
      local tag, sn, sf, sh, sl = unpack('>Bi8i8i4I4', state)
      if tag ~= stag then return nil end
      -- water to room: a W of 2^53 or more, inexact, is debt either way
      if stag == 0x31 then sn = burst - sn end
      local dh = nh - sh
      local d
      if dh >= -1048576 and dh < 1048576 then
        d = dh * 4294967296 + (nl - sl)
        if d < 0 then
          skew = -d
          if skew > 2251799813685248 then return nil end
          nh, nl, d = sh, sl, 0
        end
      elseif dh < 0 then
        return nil
      end -- else far in the past: full (d == nil)
      -- sf and sn are exact below 2^53: beyond it they are out of range
      -- either way (period <= 2^51, burst <= 2^40).
      f = sf
      if f < 0 or f >= period then f = 0 end
      -- debt deeper than MaxDebt (md) is MaxDebt, as arith.Settle clamps it
      if sn < -md then sn, f = -md, 0 end
      -- over 2^52 ns refill a bucket holding 0 or more (FillTime <=
      -- 2^51), but not always one in debt, whose repayment may take up to
      -- MaxWindowSpan (about 2^61.5 ns): it is full when what refills in
      -- 2^52 - 2^32 ns (less than any far-past elapsed time) repays it
      -- (a quotient over 2^51 does), else generic path
      if d == nil and sn < 0 then
        local q = muldiv(4503595332403200, count, 0, period)
        if q ~= nil and q < burst - sn then return nil end
      end
      if sn >= burst or d == nil then
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
    if op == 3 then
      -- Charge of algorithms/tokenbucket and algorithms/leakybucket: take
      -- min(amount, burst + md) unconditionally, the level stopping at -md
      -- with no fraction; a charge of 0 is a peek. The outcome is the new
      -- state's as a peek would see it: allowed when one unit is there.
      local m, g = n, f
      if cost > 0 then
        m = n - math.min(cost, burst + md)
        if m < -md then m, g = -md, 0 end
      end
      local out, rem, reset = tbsettle(cost > 0, m, burst, stag, g, th, tl, period, count, skew)
      if rem == nil then return nil end
      local retry = tbwait(1, m, period, count, g, skew)
      if retry == nil then return nil end
      local ttl = reset
      if cost == 0 then
        out = state
        if not state then ttl = 0 end
      end
      return true, out, rem, retry, reset, ttl, 0, m >= 1
    end
    if op == 2 or (op == 1 and cost > 0 and cost <= burst) then
      -- Reserve (op 1) and Refund (op 2) of algorithms/tokenbucket and
      -- algorithms/leakybucket: a reservation may take the level down to
      -- -md, delayed until cost units are there (a token bucket) or until
      -- the bucket has drained (a leaky bucket: x = burst); a refund gives
      -- back at most what makes the bucket full.
      local m, commit, delay = n, true, 0
      if op == 2 then
        if cost == 0 or n >= burst then
          commit = false
        else
          m = n + math.min(cost, burst - n)
        end
      else
        local x = cost
        if stag == 0x31 then x = burst end
        delay = tbwait(x, n, period, count, f, skew)
        if delay == nil then return nil end
        if delay > maxwait or n - cost < -md then
          commit = false
        else
          m = n - cost
        end
      end
      local out, rem, reset = tbsettle(commit, m, burst, stag, f, th, tl, period, count, skew)
      if rem == nil then return nil end
      if commit then return true, out, rem, 0, reset, reset, delay end
      local ttl = reset
      if not state then ttl = 0 end
      if op == 2 then return true, state, rem, 0, reset, ttl, 0 end
      return false, state, rem, delay, reset, ttl, 0
    end
    local allowed = cost > 0 and cost <= burst and n >= cost
    local level = n
    if allowed then level = n - cost end
    local out, rem, reset = tbsettle(allowed, level, burst, stag, f, th, tl, period, count, skew)
    if rem == nil then return nil end
    if not allowed then out = state end
    if allowed then return true, out, rem, 0, reset, reset end
    local ttl = reset
    if not state then ttl = 0 end
    if cost > burst then return false, out, rem, -1, reset, ttl end
    local retry
    if cost == 0 then retry = tbwait(1, n, period, count, f, skew) else retry = tbwait(cost, n, period, count, f, skew) end
    if retry == nil then return nil end
    if cost == 0 then return n >= 1, out, rem, retry, reset, ttl end
    return false, out, rem, retry, reset, ttl
  end
end

local windowstart
if useF + useS > 0 then
  -- windowstart returns the start of now's window, now - (now mod period),
  -- as (hi, lo), and now mod period, exactly.
  windowstart = function(nh, nl, period)
    local _, xr = muldiv(nh, 1, 0, period)
    local _, el = muldiv(xr, 4294967296, nl, period)
    local qh = floor(el / 4294967296)
    local wh, wl = nh - qh, nl - (el - qh * 4294967296)
    if wl < 0 then wl = wl + 4294967296; wh = wh - 1 end
    return wh, wl, el
  end
end

local fwwait, fixedwindow
if useF == 1 then
  -- fwwait mirrors fixedwindow's wait: the time from the caller's now
  -- until x more units fit on top of used, 0 when used + x <= burst, else
  -- until the start of window j = ceil((used + x - burst)/burst) after
  -- this one, el ns into it; nil when j*period reaches 2^52.
  fwwait = function(used, x, burst, period, el, skew)
    local n = used + x
    if n <= burst then return 0 end
    if n <= 2 * burst then return skew + period - el end
    local w = muldiv(n - 1, 1, 0, burst) * period
    if w >= 4503599627370496 then return nil end
    return skew + w - el
  end

  -- fixedwindow mirrors algorithms/fixedwindow Decide and (op 3) Charge.
  -- The window of now starts at now - (now mod period). A count above
  -- Burst, left by a charge, is carried into the following windows at
  -- Burst per window; mu is the largest count a state may carry,
  -- min(Burst*(MaxWindowSpan/Period + 1), 2^51): a count of 2^51 or more,
  -- or one above Burst met after 2^52 ns, falls back.
  fixedwindow = function(state, nh, nl, cost, burst, period, mu, op)
    local wh, wl, el, used, skew = nil, nil, nil, 0, 0
    if state then
      if #state ~= 17 then return nil end
      local tag, sh, sl, c = unpack('>Bi4I4i8', state)
      if tag ~= 0x41 then return nil end
      if c >= 2251799813685248 then return nil end
      if c > mu then c = mu end
      if c < 0 then c = 0 end
      local dh = nh - sh
      local d
      if dh >= -1048576 and dh < 1048576 then
        d = dh * 4294967296 + (nl - sl)
      elseif dh < 0 then
        return nil
      elseif c > burst then
        -- a carried count is gone after k >= c/burst windows; the elapsed
        -- time is over 2^52 - 2^32 ns, at least that many windows (over
        -- 2^51 of them when muldiv returns nil, more than c/burst)
        local k = muldiv(4503595332403200, 1, 0, period)
        if k ~= nil and k * burst < c then return nil end
      end -- else far in the past (d == nil): a fresh window
      if d ~= nil and d < period then
        if d < 0 then
          skew = -d
          if skew > 2251799813685248 then return nil end
          d = 0
        end
        wh, wl, el, used = sh, sl, d, c
      elseif d ~= nil and c > burst then
        -- k windows later, k*burst of the count has been carried off (all
        -- of it when k is over 2^51, nil)
        local k = muldiv(d, 1, 0, period)
        if k ~= nil and k * burst < c then
          local kp = k * period
          wl = sl + kp
          local ch = floor(wl / 4294967296)
          wh, wl, el, used = sh + ch, wl - ch * 4294967296, d - kp, c - k * burst
        end
      end
    end
    if el == nil then
      wh, wl, el = windowstart(nh, nl, period)
    end
    if op == 3 then
      -- a charge counts min(used + amount, mu) unconditionally; 0 peeks
      local u = used
      if cost > 0 then
        u = used + cost
        if u > mu then u = mu end
        if u >= 2251799813685248 then return nil end
      end
      local reset = 0
      if u > 0 then
        reset = fwwait(u, burst, burst, period, el, skew)
        if reset == nil then return nil end
      end
      local retry = fwwait(u, 1, burst, period, el, skew)
      if retry == nil then return nil end
      local out, ttl = state, reset
      if cost > 0 then
        out = pack('>Bi4I4i8', 0x41, wh, wl, u)
      elseif not state then
        ttl = 0
      end
      local rem = burst - u
      if rem < 0 then rem = 0 end
      return true, out, rem, retry, reset, ttl, 0, retry == 0
    end
    if cost == 0 or cost > burst or used + cost > burst then
      local reset, ttl = 0, 0
      if used > 0 then
        reset = fwwait(used, burst, burst, period, el, skew)
        if reset == nil then return nil end
      end
      if state then ttl = reset end
      local rem = burst - used
      if rem < 0 then rem = 0 end
      if cost > burst then return false, state, rem, -1, reset, ttl end
      local x = cost
      if x == 0 then x = 1 end
      local retry = fwwait(used, x, burst, period, el, skew)
      if retry == nil then return nil end
      return cost == 0 and retry == 0, state, rem, retry, reset, ttl
    end
    used = used + cost
    local wait = skew + period - el
    return true, pack('>Bi4I4i8', 0x41, wh, wl, used), burst - used, 0, wait, wait
  end
end

local swfrom, slidingwindow
if useS == 1 then
  -- swfrom mirrors slidingwindow's from: the first offset in a window at
  -- which prev's weight leaves room units, or period when room < 0.
  swfrom = function(prev, room, period)
    if room < 0 then return period end
    if prev == 0 then return 0 end
    -- a quotient over 2^51 (nil) is at least period: the offset is 0
    local q = muldiv(room, period, 0, prev)
    if q == nil or q >= period then return 0 end
    return period - q
  end

  -- slidingwindow mirrors algorithms/slidingwindow Decide and (op 3)
  -- Charge for states whose counts are below 2^51 (a charge may leave
  -- counts above Burst; larger ones, up to MaxCounted = 2^61, take the
  -- generic path).
  slidingwindow = function(state, nh, nl, cost, burst, period, op)
    local wh, wl, el, cur, prev, skew = nil, nil, nil, 0, 0, 0
    if state then
      if #state ~= 25 then return nil end
      local tag, sh, sl, c, p = unpack('>Bi4I4i8i8', state)
      if tag ~= 0x51 then return nil end
      if c >= 2251799813685248 or p >= 2251799813685248 then return nil end
      if c < 0 then c = 0 end
      if p < 0 then p = 0 end
      local dh = nh - sh
      local d
      if dh >= -1048576 and dh < 1048576 then
        d = dh * 4294967296 + (nl - sl)
      elseif dh < 0 then
        return nil
      end -- else far in the past (d == nil)
      if d ~= nil and d < 0 then
        skew = -d
        if skew > 2251799813685248 then return nil end
        d = 0
      end
      if d ~= nil and d < period then
        wh, wl, el, cur, prev = sh, sl, d, c, p
      elseif d ~= nil and d < 2 * period then
        wh, wl, el, cur, prev = sh, sl + period, d - period, 0, c
        local ch = floor(wl / 4294967296)
        wh, wl = wh + ch, wl - ch * 4294967296
      end
    end
    if el == nil then
      wh, wl, el = windowstart(nh, nl, period)
    end
    -- estimate = cur + ceil(prev*(period-el)/period)
    local est = cur
    if prev > 0 then est = cur + muldiv(prev, period - el, period - 1, period) end
    local function wait(x)
      local d
      local y = swfrom(prev, burst - x - cur, period)
      if y < period then
        d = y - el
        if d < 0 then d = 0 end
      else
        y = swfrom(cur, burst - x, period)
        if y < period then d = period - el + y else d = 2 * period - el end
      end
      if d == 0 then return 0 end
      return skew + d
    end
    if op == 3 then
      -- a charge counts amount in this window unconditionally; 0 peeks
      local out = state
      if cost > 0 then
        cur = cur + cost
        if cur >= 2251799813685248 then return nil end
        est = est + cost
        out = pack('>Bi4I4i8i8', 0x51, wh, wl, cur, prev)
      end
      local rem = burst - est
      if rem < 0 then rem = 0 end
      local reset = 0
      if cur > 0 then reset = skew + 2 * period - el elseif prev > 0 then reset = skew + period - el end
      local ttl = reset
      if cost == 0 and not state then ttl = 0 end
      local retry = wait(1)
      return true, out, rem, retry, reset, ttl, 0, retry == 0
    end
    if cost == 0 or cost > burst or est + cost > burst then
      local rem = burst - est
      if rem < 0 then rem = 0 end
      local reset = 0
      if cur > 0 then reset = skew + 2 * period - el elseif prev > 0 then reset = skew + period - el end
      local ttl = reset
      if not state then ttl = 0 end
      if cost > burst then return false, state, rem, -1, reset, ttl end
      local retry
      if cost == 0 then retry = wait(1) else retry = wait(cost) end
      return retry == 0 and cost == 0, state, rem, retry, reset, ttl
    end
    cur = cur + cost
    est = est + cost
    local reset = skew + 2 * period - el
    return true, pack('>Bi4I4i8i8', 0x51, wh, wl, cur, prev), burst - est, 0, reset, reset
  end
end

local slidinglog
if useLog == 1 then
  -- uvarint decodes the unsigned varint of s at byte i and returns it and
  -- the next position, or nil for a truncated one, one longer than 8 bytes
  -- or a value of 2^52 or more (the generic path decides those states).
  local function uvarint(s, i)
    local v, mul = 0, 1
    for j = i, i + 7 do
      local b = string.byte(s, j)
      if b == nil then return nil end
      if b < 128 then
        v = v + b * mul
        if v >= 4503599627370496 then return nil end
        return v, j + 1
      end
      v = v + (b - 128) * mul
      mul = mul * 128
    end
    return nil
  end

  -- putuv appends the bytes of the minimal uvarint of 0 <= x < 2^53 to
  -- the table t, at index n + 1 onwards, and returns the new length.
  local function putuv(t, n, x)
    while x >= 128 do
      local b = x % 128
      n = n + 1
      t[n] = string.char(b + 128)
      x = (x - b) / 128
    end
    n = n + 1
    t[n] = string.char(x)
    return n
  end

  -- slidinglog mirrors algorithms/slidinglog Decide. Instants are kept
  -- relative to now: an entry's rel is its instant minus now, exact while
  -- the state's base is within 2^52 ns of now (deltas and counts of 2^52
  -- or more fall back). A base further in the past leaves nothing counting
  -- when the deltas sum below 2^51; a base further ahead, a skew over 2^51
  -- ns or now within 2^53 ns of the largest int64 falls back.
  slidinglog = function(state, nh, nl, cost, burst, period)
    if nh >= 2145386496 then return nil end -- now >= 2^63 - 2^53
    local rels, counts, n = {}, {}, 0
    if state then
      local len = #state
      if len < 11 or string.byte(state, 1) ~= 0x61 then return nil end
      local _, bh, bl = unpack('>Bi4I4', state)
      local dh = bh - nh
      local base, far = 0, false
      if dh >= -1048576 and dh < 1048576 then
        base = dh * 4294967296 + (bl - nl)
      elseif dh < 0 then
        far = true
      else
        return nil
      end
      local i, off, total = 10, 0, 0
      while i <= len do
        local d, c
        d, i = uvarint(state, i)
        if d == nil or d >= 2251799813685248 then return nil end
        c, i = uvarint(state, i)
        if c == nil or c == 0 then return nil end
        off = off + d
        total = total + c
        if off >= 4503599627370496 or total >= 4503599627370496 then return nil end
        n = n + 1
        rels[n], counts[n] = base + off, c
      end
      if far then
        -- every entry is over 2^52 - off ns old: none counts when off is
        -- below 2^51 (>= period), and none is ahead of now
        if off >= 2251799813685248 then return nil end
        n = 0
      end
    end
    -- now' = max(now, newest entry), as nowr relative to now; skew = nowr
    local nowr = 0
    if n > 0 and rels[n] > 0 then
      nowr = rels[n]
      if nowr > 2251799813685248 then return nil end
    end
    local skew = nowr
    -- deltas are non-negative, so the live entries (age below period)
    -- are the newest ones, from index first on
    local first = n + 1
    local used = 0
    for j = n, 1, -1 do
      if nowr - rels[j] >= period then break end
      first = j
      used = used + counts[j]
    end
    if cost == 0 or cost > burst or used + cost > burst then
      local rem = burst - used
      if rem < 0 then rem = 0 end
      local reset = 0
      if used > 0 then reset = skew + period - (nowr - rels[n]) end
      local ttl = reset
      if not state then ttl = 0 end
      if cost > burst then return false, state, rem, -1, reset, ttl end
      local x = cost
      if x == 0 then x = 1 end
      -- the wait: the oldest live entry whose expiry frees enough units
      local need, retry = used + x - burst, 0
      if need > 0 then
        for j = first, n do
          need = need - counts[j]
          if need <= 0 then
            retry = skew + period - (nowr - rels[j])
            break
          end
        end
      end
      return cost == 0 and retry == 0, state, rem, retry, reset, ttl
    end
    -- the live entries, the one at now' (if any) taking the cost, then a
    -- new entry at now' for it otherwise
    local t, m = {}, 1
    local prev, left = nil, cost
    for j = first, n + 1 do
      local r, c = nowr, left
      if j <= n then
        r, c = rels[j], counts[j]
        if r == nowr then c = c + left; left = 0 end
      end
      if c > 0 then
        if prev == nil then
          -- the base: now + r as (hi, lo)
          local x = nl + r
          local carry = floor(x / 4294967296)
          t[1] = pack('>Bi4I4', 0x61, nh + carry, x - carry * 4294967296)
          prev = r
        end
        m = putuv(t, m, r - prev)
        m = putuv(t, m, c)
        prev = r
      end
    end
    local reset = skew + period
    return true, table.concat(t), burst - used - cost, 0, reset, reset
  end
end

-- now as (hi, lo): sec*1e9 + ns, lo in 0..2^32-1
if sec < 0 then
  local t = redis.call('TIME')
  sec, ns = tonumber(t[1]), tonumber(t[2]) * 1000
end
local nh, nl
do
  local a = floor(sec / 65536)
  local m = a * 1000000000
  local hi = floor(m / 65536)
  local lo = (m - hi * 65536) * 65536 + (sec - a * 65536) * 1000000000 + ns
  local c = floor(lo / 4294967296)
  nh, nl = hi + c, lo - c * 4294967296
end

-- decider returns a function that applies to a state the check whose
-- fourteen doubles start at byte pos of args; given the state s (false
-- for none), it applies it at once instead. In a batch, the checks of one
-- rule and cost share a function: their arguments are unpacked once.
local function decider(args, pos, s)
  local code, cost, burst, count, period, tq, tr, uq, ur, oq, o_r, dq, dr, maxwait = unpack('<dddddddddddddd', args, pos)
  local op = 0
  if code > 8 then
    op = floor(code / 8)
    code = code - 8 * op
  end
  if code == 1 then
    if s ~= nil then return gcra(s, nh, nl, cost, burst, count, period, tq, tr, uq, ur, oq, o_r, dq, dr, op, maxwait) end
    return function(st) return gcra(st, nh, nl, cost, burst, count, period, tq, tr, uq, ur, oq, o_r, dq, dr, op, maxwait) end
  elseif code == 2 or code == 3 then
    local tag = 0x11
    if code == 3 then tag = 0x31 end
    if s ~= nil then return tokenbucket(s, nh, nl, cost, burst, count, period, tag, dq, op, maxwait) end
    return function(st) return tokenbucket(st, nh, nl, cost, burst, count, period, tag, dq, op, maxwait) end
  elseif code == 4 then
    if s ~= nil then return fixedwindow(s, nh, nl, cost, burst, period, tq, op) end
    return function(st) return fixedwindow(st, nh, nl, cost, burst, period, tq, op) end
  elseif code == 5 then
    if s ~= nil then return slidingwindow(s, nh, nl, cost, burst, period, op) end
    return function(st) return slidingwindow(st, nh, nl, cost, burst, period, op) end
  end
  if s ~= nil then return slidinglog(s, nh, nl, cost, burst, period) end
  return function(st) return slidinglog(st, nh, nl, cost, burst, period) end
end

-- The reply starts with now as two big-endian 32-bit halves (hi, lo).
-- Each call then adds a status byte (1: every take and reservation
-- allowed, written; 0: one denied, nothing written; 255: decide it on the
-- generic path) and, unless 255, for each check the state it found: its
-- length in one byte (255 then four big-endian bytes for 255 or more;
-- 0 for none) and its bytes. The store runs the Go algorithm on that state
-- at now for each check's outcome: the script decides and writes, and
-- packs no numbers per check.
local parts = {pack('>i4I4', nh, nl)}
local m = 1
local lens = {}

-- found appends the framed state s (false for none) to parts.
local function found(s)
  if not s then
    parts[m + 1] = '\0'
    m = m + 1
    return
  end
  local n = #s
  local l = lens[n]
  if l == nil then
    if n < 255 then l = string.char(n) else l = pack('>BI4', 255, n) end
    lens[n] = l
  end
  parts[m + 1], parts[m + 2] = l, s
  m = m + 2
end

-- write stores state s of key k with ttl: DEL for none or a TTL of 0,
-- else SET with PX ceil(ttl / 1e6) ms plus the margin. Keys of one rule
-- often share their PX, so each distinct value is formatted once (Redis
-- would format a number on every call).
local pxs = {}
local function write(k, s, ttl)
  if s == false or ttl <= 0 then
    redis.call('DEL', k)
    return
  end
  local ms = muldiv(ttl, 1, 999999, 1000000) + margin
  local px = pxs[ms]
  if px == nil then
    px = string.format('%d', ms)
    pxs[ms] = px
  end
  redis.call('SET', k, s, 'PX', px)
end

local args = ARGV[2]

-- One call (not a batch): its checks apply all or nothing, each key read
-- once and written once at the end. The batch code below is not created.
if #ARGV == 2 then
  local n = #KEYS
  if n == 1 then
    local k = KEYS[1]
    local state = redis.call('GET', k)
    local ok, out, _, _, _, ttl = decider(args, 1, state)
    if ok == nil then return parts[1] .. '\255' end
    if not ok then
      parts[2] = '\0'
    else
      parts[2] = '\1'
      if out ~= state then write(k, out, ttl) end
    end
    m = 2
    found(state)
    return table.concat(parts)
  end
  local cur, last, changed = {}, {}, {}
  local allowed = true
  parts[2] = '\1'
  m = 2
  for i = 1, n do
    local k = KEYS[i]
    local s = cur[k]
    if s == nil then
      s = redis.call('GET', k)
      cur[k] = s
    end
    local ok, out, _, _, _, ttl = decider(args, 112 * i - 111, s)
    if ok == nil then return parts[1] .. '\255' end
    if ok then
      if out ~= s then changed[k] = true end
      cur[k] = out
    else
      allowed = false
    end
    last[k] = ttl
    found(s)
  end
  if not allowed then
    parts[2] = '\0'
    return table.concat(parts)
  end
  for k, _ in pairs(changed) do write(k, cur[k], last[k]) end
  return table.concat(parts)
end

-- A batch of independent calls (the store's coalescer): ARGV[2] holds the
-- distinct arguments of its checks, ARGV[4] one byte per check, the index
-- of its argument there from 0, and ARGV[3] two bytes per call,
-- big-endian: its number of checks, plus 32768 when the call has one
-- check whose key no other call of the batch names. The
-- calls apply in order, each all or nothing as if sent alone. A call of
-- one key of its own is read, decided and written at once. The others
-- share the states of their keys: cur[k] is k's state as the calls before
-- left it (false for none), read from Redis on first use, and ttls[k] the
-- TTL to write it with once a call changed it; those writes wait for the
-- end of the invocation, one per changed key. Redis freezes the clock
-- during a script, so a key's PX counts from the same instant either way.
-- (One GET per key rather than an MGET: the least-privilege ACL in
-- docs/redis.md allows GET, SET, DEL and TIME.)
local cur, ttls = {}, {}
local sizes, index = ARGV[3], ARGV[4]
local deciders = {}

-- deciderOf returns the decider of the i-th check of the batch.
local function deciderOf(i)
  local j = string.byte(index, i) + 1
  local d = deciders[j]
  if d == nil then
    d = decider(args, 112 * j - 111)
    deciders[j] = d
  end
  return d
end

local base = 0
for c = 1, #sizes, 2 do
  local hi, lo = string.byte(sizes, c, c + 1)
  if hi >= 128 then
    -- A call of one key no other call names: read, decided and written
    -- at once. (Written out beside the shared key's branch below: one
    -- branch for both cost a batch 3% more server instructions.)
    local k = KEYS[base + 1]
    local s = redis.call('GET', k)
    local ok, out, _, _, _, ttl = deciderOf(base + 1)(s)
    if ok == nil then
      parts[m + 1] = '\255'
      m = m + 1
    else
      if not ok then
        parts[m + 1] = '\0'
      else
        parts[m + 1] = '\1'
        if out ~= s then write(k, out, ttl) end
      end
      m = m + 1
      found(s)
    end
    base = base + 1
  elseif lo == 1 and hi == 0 then
    local k = KEYS[base + 1]
    local s = cur[k]
    if s == nil then
      s = redis.call('GET', k)
      cur[k] = s
    end
    local ok, out, _, _, _, ttl = deciderOf(base + 1)(s)
    if ok == nil then
      parts[m + 1] = '\255'
      m = m + 1
    else
      if not ok then
        parts[m + 1] = '\0'
      else
        parts[m + 1] = '\1'
        if out ~= s then cur[k], ttls[k] = out, ttl end
      end
      m = m + 1
      found(s)
    end
    base = base + 1
  else
    local n = hi * 256 + lo
    -- this call's states over cur: committed only when every check passes
    local mine, last, changed = {}, {}, {}
    local status, at = 1, m + 1
    m = m + 1
    for i = 1, n do
      local k = KEYS[base + i]
      local s = mine[k]
      if s == nil then
        s = cur[k]
        if s == nil then
          s = redis.call('GET', k)
          cur[k] = s
        end
      end
      local ok, out, _, _, _, ttl = deciderOf(base + i)(s)
      if ok == nil then
        status = -1
        break
      end
      if ok then
        if out ~= s then changed[k] = true end
        mine[k] = out
      else
        status = 0
      end
      last[k] = ttl
      found(s)
    end
    if status == -1 then
      for i = at + 1, m do parts[i] = nil end
      parts[at], m = '\255', at
    elseif status == 0 then
      parts[at] = '\0'
    else
      parts[at] = '\1'
      for k, _ in pairs(changed) do cur[k], ttls[k] = mine[k], last[k] end
    end
    base = base + n
  end
end
for k, ttl in pairs(ttls) do write(k, cur[k], ttl) end
return table.concat(parts)

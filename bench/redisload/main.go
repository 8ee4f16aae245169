// Command redisload drives Redis-backed rate limiters at a fixed
// concurrency for a fixed time and reports throughput and latency
// percentiles: Sluice's redisstore with GCRA and with the token bucket,
// each through the plain client and through go-redis's autopipeliner
// (redisstore.WithAutoPipeline, the "-ap" variants),
// github.com/go-redis/redis_rate/v10 (GCRA), and two floors that send
// sluice-tokenbucket's very command: raw-tokenbucket, on a bare connection
// (see rawTokenbucket), and goredis-tokenbucket, through the go-redis
// client with no store (see goredisTokenbucket), all against one server.
//
// Each of -conc callers sends one request, waits for the reply and sends
// the next (a closed loop, like redis-benchmark without pipelining), over
// a go-redis client with one connection per caller; the "-ap" variants
// stream a lone caller's scripts, and those of more than 16 concurrent
// callers, through go-redis's full-duplex autopipeliner on one held
// connection (2 to 16 go to the client directly). Every call takes one
// unit under a limit that admits them all (1,000,000 per second, burst
// 1,000,000), so every call reads and writes the state: on one hot key
// (-keys 1) or on a key drawn uniformly from a million (-keys 1M). The
// implementations run in turn for each setting, -count rounds, so a slow
// spell of a shared machine does not favour one of them.
//
// Usage, from the bench directory (the module is outside go.work):
//
//	redis-server --port 6390 --save '' --appendonly no &
//	GOWORK=off go run ./redisload -addr 127.0.0.1:6390 -duration 10s -count 5 | tee load.txt
//	go tool -modfile=../tools/go.mod benchstat -col /impl load.txt
//
// Each result is one line in Go benchmark format, so benchstat reads it:
//
//	BenchmarkRedisLoad/keys=1/conc=8/impl=sluice-gcra  612345  16.3 ns/op  61234 ops/s  121 p50-us  380 p99-us  902 p99.9-us
//
// where the count is the number of calls measured, ns/op is the wall time
// per call (1e9 / ops/s), and the percentiles are per-call latencies in
// microseconds, exact to within 1/64 (a log-linear histogram; each figure
// is its bucket's upper bound). Calls that failed or were denied are
// counted on stderr and excluded from the figures; any of them makes the
// command exit with status 1.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// open admits every call at the rates one Redis serves while keeping the
// limit inside redisstore's native Lua range (FillTime at most 2^51 ns).
var open = ratelimit.PerSecond(1_000_000)

// take makes one call for key; allowed is false for a denial.
type take func(ctx context.Context, key string) (allowed bool, err error)

// impls builds each implementation on a client; stop, if not nil,
// releases what it holds besides the client.
var impls = map[string]func(c *redis.Client) (do take, stop func(), err error){
	"sluice-gcra":           sluiceStore(gcra.New()),
	"sluice-tokenbucket":    sluiceStore(tokenbucket.New()),
	"sluice-gcra-ap":        sluiceStore(gcra.New(), redisstore.WithAutoPipeline(nil)),
	"sluice-tokenbucket-ap": sluiceStore(tokenbucket.New(), redisstore.WithAutoPipeline(nil)),
	"redis_rate":            redisRate,
	"raw-tokenbucket":       rawTokenbucket,
	"goredis-tokenbucket":   goredisTokenbucket,
}

// implNames lists impls in the order -impl's default runs them.
const implNames = "sluice-gcra,sluice-tokenbucket,sluice-gcra-ap,sluice-tokenbucket-ap,redis_rate,raw-tokenbucket,goredis-tokenbucket"

func sluiceStore(alg ratelimit.Algorithm, opts ...redisstore.Option) func(c *redis.Client) (take, func(), error) {
	return func(c *redis.Client) (take, func(), error) {
		st, err := redisstore.New(c, opts...)
		if err != nil {
			return nil, nil, err
		}
		lim, err := sluice.New(sluice.Rule{Name: "load", Algorithm: alg, Limit: open, Budget: benchBudget}, sluice.WithStore(st))
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, key string) (bool, error) {
			d, err := lim.Allow(ctx, key)
			return d.Allowed, err
		}, func() { _ = st.Close() }, nil
	}
}

func redisRate(c *redis.Client) (take, func(), error) {
	l := redis_rate.NewLimiter(c)
	lim := redis_rate.Limit{Rate: int(open.Count), Burst: int(open.Burst), Period: open.Period}
	return func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, key, lim)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, nil, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "redisload:", err)
		os.Exit(1)
	}
}

type settings struct {
	addr             string
	duration, warmup time.Duration
	timeout          time.Duration
	conc             []int
	keys             []string
	impls            []string
	count            int
}

func run() error {
	var s settings
	var conc, keys, names string
	flag.StringVar(&s.addr, "addr", "127.0.0.1:6379", "Redis address (host:port)")
	flag.DurationVar(&s.duration, "duration", 10*time.Second, "measured time per run")
	flag.DurationVar(&s.warmup, "warmup", time.Second, "unmeasured time before each run (dials, script load)")
	flag.DurationVar(&s.timeout, "timeout", time.Second, "deadline of each call")
	flag.StringVar(&conc, "conc", "1,8,64", "comma-separated concurrencies")
	flag.StringVar(&keys, "keys", "1,1M", "comma-separated key sets: 1 (one hot key) or 1M (uniform over a million)")
	flag.StringVar(&names, "impl", implNames, "comma-separated implementations")
	flag.IntVar(&s.count, "count", 1, "rounds over every setting")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if s.duration <= 0 || s.warmup < 0 || s.timeout <= 0 || s.count < 1 {
		return errors.New("-duration and -timeout must be positive, -warmup not negative, -count at least 1")
	}
	for f := range strings.SplitSeq(conc, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 4096 {
			return fmt.Errorf("bad -conc value %q: want 1 to 4096", f)
		}
		s.conc = append(s.conc, n)
	}
	for f := range strings.SplitSeq(keys, ",") {
		if f != "1" && f != "1M" {
			return fmt.Errorf("bad -keys value %q: want 1 or 1M", f)
		}
		s.keys = append(s.keys, f)
	}
	for f := range strings.SplitSeq(names, ",") {
		if impls[f] == nil {
			return fmt.Errorf("unknown -impl %q (have %s)", f, implNames)
		}
		s.impls = append(s.impls, f)
	}
	var million []string
	if strings.Contains(keys, "1M") {
		million = make([]string, 1_000_000)
		for i := range million {
			million[i] = fmt.Sprintf("user:%07d", i)
		}
	}
	fmt.Printf("# redisload: addr=%s duration=%s warmup=%s\n", s.addr, s.duration, s.warmup)
	failed := false
	for round := range s.count {
		for _, ks := range s.keys {
			for _, n := range s.conc {
				for _, name := range s.impls {
					// A fresh namespace per run: no run inherits another's state.
					prefix := fmt.Sprintf("load:%d:%d:", time.Now().UnixNano(), round)
					pick := func(*rand.Rand) string { return prefix + "hot" }
					if ks == "1M" {
						pick = func(r *rand.Rand) string { return prefix + million[r.IntN(len(million))] }
					}
					res, err := measure(s, name, n, pick)
					if err != nil {
						return fmt.Errorf("%s, conc %d, keys %s: %w", name, n, ks, err)
					}
					fmt.Printf("BenchmarkRedisLoad/keys=%s/conc=%d/impl=%s\t%d\t%.1f ns/op\t%.0f ops/s\t%.1f p50-us\t%.1f p99-us\t%.1f p99.9-us\n",
						ks, n, name, res.ops, 1e9/res.rate, res.rate,
						us(res.hist.quantile(0.5)), us(res.hist.quantile(0.99)), us(res.hist.quantile(0.999)))
					if res.errs > 0 || res.denied > 0 {
						failed = true
						fmt.Fprintf(os.Stderr, "%s conc=%d keys=%s: %d errors (first: %v), %d denied\n", name, n, ks, res.errs, res.firstErr, res.denied)
					}
				}
			}
		}
	}
	if failed {
		return errors.New("some calls failed or were denied (see above)")
	}
	return nil
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

type result struct {
	ops          int64
	rate         float64 // calls per second
	hist         histogram
	errs, denied int64
	firstErr     error
}

// measure runs conc callers of one implementation for warmup plus
// duration on its own client and reports the calls started in the
// measured window.
func measure(s settings, name string, conc int, pick func(*rand.Rand) string) (result, error) {
	c := redis.NewClient(&redis.Options{
		Addr:                  s.addr,
		PoolSize:              conc,
		MinIdleConns:          conc,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		return result{}, err
	}
	do, stop, err := impls[name](c)
	if err != nil {
		return result{}, err
	}
	if stop != nil {
		defer stop()
	}
	start := time.Now()
	from, end := start.Add(s.warmup), start.Add(s.warmup+s.duration)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		total     result
		errs, den atomic.Int64
	)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(w)))
			var h histogram
			var ops int64
			var firstErr error
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				cctx, cancel := context.WithTimeout(ctx, s.timeout)
				ok, err := do(cctx, pick(r))
				cancel()
				t1 := time.Now()
				if t0.Before(from) {
					continue
				}
				switch {
				case err != nil:
					if errs.Add(1) == 1 {
						firstErr = err
					}
				case !ok:
					den.Add(1)
				default:
					h.add(int64(t1.Sub(t0)))
					ops++
				}
			}
			mu.Lock()
			total.ops += ops
			total.hist.merge(&h)
			if firstErr != nil && total.firstErr == nil {
				total.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.errs, total.denied = errs.Load(), den.Load()
	total.rate = float64(total.ops) / s.duration.Seconds()
	return total, nil
}

// histogram counts durations in nanoseconds in log-linear buckets: exact
// below 128 ns, then 64 buckets per power of two, so a bucket's width is at
// most 1/64 of its lower bound. The zero value is empty and ready to use.
type histogram struct {
	counts [64 * 64]int64
	n      int64
}

// bucket returns the bucket of v >= 0.
func bucket(v int64) int {
	if v < 128 {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - 7 // v>>shift is in [64, 128)
	return 64*shift + int(v>>shift)
}

// upper returns the largest value in bucket i.
func upper(i int) int64 {
	if i < 128 {
		return int64(i)
	}
	shift := i/64 - 1
	m := int64(i - 64*shift)
	return (m+1)<<shift - 1
}

func (h *histogram) add(v int64) {
	h.counts[min(bucket(max(v, 0)), len(h.counts)-1)]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the upper bound of the bucket holding the q-quantile,
// or 0 for an empty histogram.
func (h *histogram) quantile(q float64) int64 {
	rank := int64(q*float64(h.n) + 0.5) // the rank-th smallest value, 1-based
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return upper(i)
		}
	}
	return 0
}

// captureTokenbucket returns the arguments of sluice-tokenbucket's EVALSHA
// but the key (evalsha, sha, 1, head, check), taken from one call through
// a store on a client of its own to c's server, so the hook that captures
// them stays off c. The head asks the script for the server's TIME, so
// they stay valid for any later call.
func captureTokenbucket(c *redis.Client) (fixed [5]string, err error) {
	cc := redis.NewClient(&redis.Options{Addr: c.Options().Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer func() { _ = cc.Close() }()
	var args []any
	cc.AddHook(captureHook{&args})
	do, stopStore, err := sluiceStore(tokenbucket.New())(cc)
	if err != nil {
		return fixed, err
	}
	ok, err := do(context.Background(), "raw:capture")
	stopStore()
	switch {
	case err != nil:
		return fixed, fmt.Errorf("capture call: %w", err)
	case !ok:
		return fixed, errors.New("capture call denied")
	case len(args) != 6 || args[0] != "evalsha" || args[2] != 1:
		return fixed, fmt.Errorf("captured %d arguments %.40q, want evalsha sha 1 key head check", len(args), args)
	}
	for i, a := range slices.Delete(args, 3, 4) {
		switch a := a.(type) {
		case string:
			fixed[i] = a
		case int:
			fixed[i] = strconv.Itoa(a)
		default:
			return fixed, fmt.Errorf("captured argument %d of type %T", i, a)
		}
	}
	return fixed, nil
}

// goredisTokenbucket is the floor of a store on go-redis: the same command
// as rawTokenbucket sent through the go-redis client itself (Process, its
// pool, RESP3) with no store around it. Set against raw-tokenbucket it
// gives go-redis's cost; against sluice-tokenbucket, the store's.
func goredisTokenbucket(c *redis.Client) (take, func(), error) {
	fixed, err := captureTokenbucket(c)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string) (bool, error) {
		cmd := redis.NewCmd(ctx, fixed[0], fixed[1], fixed[2], key, fixed[3], fixed[4])
		if err := c.Process(ctx, cmd); err != nil {
			return false, err
		}
		rep, err := cmd.Text()
		if err != nil {
			return false, err
		}
		return nativeAllowed(rep)
	}, nil, nil
}

// rawTokenbucket is the floor of a Go client: the very EVALSHA that
// sluice-tokenbucket sends (see captureTokenbucket) with the key swapped,
// written on a bare net.Conn per caller and its reply read with bufio. No
// client library, no deadline, no pool but a channel of connections: what
// any Go client pays for the Go runtime and the kernel. Set against the
// redis-benchmark ceiling running the same script, it tells the Go
// client's cost from the script's.
func rawTokenbucket(c *redis.Client) (take, func(), error) {
	fixed, err := captureTokenbucket(c)
	if err != nil {
		return nil, nil, err
	}
	opts := c.Options()
	conns := make(chan *rawConn, opts.PoolSize)
	// stop closes the connections, all back in conns once the callers are
	// done (one that failed to redial is gone already).
	stop := func() {
		for {
			select {
			case rc := <-conns:
				_ = rc.nc.Close()
			default:
				return
			}
		}
	}
	for range opts.PoolSize {
		nc, err := net.Dial("tcp", opts.Addr)
		if err != nil {
			stop()
			return nil, nil, err
		}
		conns <- &rawConn{nc: nc, r: bufio.NewReader(nc)}
	}
	return func(_ context.Context, key string) (bool, error) {
		rc := <-conns
		allowed, err := rc.call(fixed, key)
		if err != nil {
			// The stream may be out of step: start a new connection.
			_ = rc.nc.Close()
			nc, derr := net.Dial("tcp", opts.Addr)
			if derr != nil {
				return false, errors.Join(err, derr) // one caller fewer
			}
			rc = &rawConn{nc: nc, r: bufio.NewReader(nc)}
		}
		conns <- rc
		return allowed, err
	}, stop, nil
}

type captureHook struct{ args *[]any }

func (captureHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (captureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h captureHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if *h.args == nil && cmd.Name() == "evalsha" {
			for _, a := range cmd.Args() {
				if b, ok := a.([]byte); ok {
					a = string(b) // a copy: the caller may reuse b
				}
				*h.args = append(*h.args, a)
			}
		}
		return next(ctx, cmd)
	}
}

type rawConn struct {
	nc        net.Conn
	r         *bufio.Reader
	buf, body []byte
}

// call sends EVALSHA sha 1 key head check (fixed holds evalsha, sha, 1,
// head, check) and reads native.lua's reply: a bulk string of
// little-endian doubles, status then allowed.
func (rc *rawConn) call(fixed [5]string, key string) (bool, error) {
	rc.buf = append(rc.buf[:0], "*6\r\n"...)
	for _, a := range [6]string{fixed[0], fixed[1], fixed[2], key, fixed[3], fixed[4]} {
		rc.buf = append(rc.buf, '$')
		rc.buf = strconv.AppendInt(rc.buf, int64(len(a)), 10)
		rc.buf = append(rc.buf, "\r\n"...)
		rc.buf = append(rc.buf, a...)
		rc.buf = append(rc.buf, "\r\n"...)
	}
	if _, err := rc.nc.Write(rc.buf); err != nil {
		return false, err
	}
	line, err := rc.r.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 3 || line[0] != '$' {
		return false, fmt.Errorf("reply %q, want a bulk string", line)
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n < 16 {
		return false, fmt.Errorf("reply %q, want a bulk string of doubles", line)
	}
	if cap(rc.body) < n+2 {
		rc.body = make([]byte, n+2)
	}
	body := rc.body[:n+2]
	if _, err := io.ReadFull(rc.r, body); err != nil {
		return false, err
	}
	return nativeAllowed(body[:n])
}

// nativeAllowed reads native.lua's reply, little-endian doubles, status
// then allowed, from either floor's buffer without copying it.
func nativeAllowed[B string | []byte](rep B) (bool, error) {
	if len(rep) < 16 {
		return false, fmt.Errorf("native.lua reply of %d bytes, want at least 16", len(rep))
	}
	le := func(i int) float64 {
		var u uint64
		for j := 8*i + 7; j >= 8*i; j-- {
			u = u<<8 | uint64(rep[j])
		}
		return math.Float64frombits(u)
	}
	if le(0) != 1 {
		return false, fmt.Errorf("native.lua status %v, want 1", le(0))
	}
	return le(1) == 1, nil
}

// benchBudget is the store budget of the load's rules: long enough that a
// loaded machine never turns a slow reply into a policy decision.
const benchBudget = time.Second

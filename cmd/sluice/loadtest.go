package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dunglas/httpsfv"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

const loadtestSynopsis = `Drive a running sluice serve on this machine (loopback addresses only)
over gRPC, /json or /forward-auth, at a target rate (-rate) or with a fixed
number of callers (-rate 0 -concurrency N), for -duration. A progress line
is printed every second; at the end: latency P50/P99/P99.9, throughput,
errors, and the admitted count against what an exact limiter admits for
the same traffic (drift). The exact limiter replays every answered request
at its send time through -algorithm, deciding every descriptor of the
request atomically, as the service does: each descriptor's rule limit
comes from the first answer (or from -limit and -period, for all), one
bucket per distinct descriptor value.

Keys: "{key}" in -descriptor (or -header) becomes key0..key<N-1>, N = -keys,
spread round robin; a descriptor without "{key}" is one bucket shared by
every key.

  sluice loadtest -protocol grpc -addr 127.0.0.1:8081 -domain bench \
    -descriptor 'user={key}' -keys 20 -rate 2000 -duration 30s`

// loadConfig is every flag of sluice loadtest.
type loadConfig struct {
	protocol    string
	addr        string
	domain      string
	descriptor  string
	header      string
	keys        int
	rate        float64
	concurrency int
	duration    time.Duration
	algorithm   string
	limit       int64
	period      time.Duration
	timeout     time.Duration
}

// Bounds of a load test: it stays on this machine and ends by itself.
const (
	maxLoadDuration    = 10 * time.Minute
	maxLoadRate        = 100_000
	maxLoadConcurrency = 1024
)

func runLoadtest(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := &loadConfig{}
	fs := newFlagSet("loadtest", loadtestSynopsis, stderr)
	fs.StringVar(&c.protocol, "protocol", "grpc", "grpc, json or forward-auth")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "host:port of sluice serve (gRPC or HTTP listener); loopback only")
	fs.StringVar(&c.domain, "domain", "", "rules domain (required)")
	fs.StringVar(&c.descriptor, "descriptor", "user={key}", "the request's descriptors: ';' between descriptors, ',' between key=value entries; {key} is the key")
	fs.StringVar(&c.header, "header", "X-Api-Key: {key}", "forward-auth: the request header carrying the key")
	fs.IntVar(&c.keys, "keys", 1, "number of distinct keys")
	fs.Float64Var(&c.rate, "rate", 1000, "target requests per second in all; 0 sends as fast as -concurrency callers can")
	fs.IntVar(&c.concurrency, "concurrency", 64, "callers in flight at most")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to send (at most 10m)")
	fs.StringVar(&c.algorithm, "algorithm", "fixedwindow", "algorithm of the exact limiter the drift compares with (the rule's)")
	fs.Int64Var(&c.limit, "limit", 0, "every descriptor's rule's requests per -period; 0 reads each from the first answer")
	fs.DurationVar(&c.period, "period", 0, "the rules' period (with -limit)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "per-request timeout")
	if err := parseFlags(fs, args, getenv); err != nil {
		return usageCode(err)
	}
	if err := c.check(); err != nil {
		fmt.Fprintf(stderr, "sluice loadtest: %v\n", err)
		return exitUsage
	}
	rep, err := loadtest(ctx, c, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice loadtest: %v\n", err)
		return exitFailure
	}
	rep.print(stdout, c)
	if rep.errors > 0 {
		return exitFailure
	}
	return exitOK
}

func (c *loadConfig) check() error {
	switch {
	case c.protocol != "grpc" && c.protocol != "json" && c.protocol != "forward-auth":
		return fmt.Errorf("-protocol %q: want grpc, json or forward-auth", c.protocol)
	case c.domain == "":
		return errors.New("-domain is required")
	case c.keys < 1:
		return errors.New("-keys must be at least 1")
	case c.rate < 0 || c.rate > maxLoadRate:
		return fmt.Errorf("-rate must be in 0..%d", maxLoadRate)
	case c.concurrency < 1 || c.concurrency > maxLoadConcurrency:
		return fmt.Errorf("-concurrency must be in 1..%d", maxLoadConcurrency)
	case c.duration <= 0 || c.duration > maxLoadDuration:
		return fmt.Errorf("-duration must be in (0, %v]", maxLoadDuration)
	case (c.limit > 0) != (c.period > 0):
		return errors.New("-limit and -period go together")
	}
	if _, ok := catalog.ByName(c.algorithm); !ok {
		return fmt.Errorf("-algorithm %q: unknown", c.algorithm)
	}
	host, _, err := net.SplitHostPort(c.addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", c.addr, err)
	}
	ips, err := net.DefaultResolver.LookupIPAddr(context.Background(), host)
	if err != nil || len(ips) == 0 {
		return fmt.Errorf("-addr %q: cannot resolve %q", c.addr, host)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return fmt.Errorf("-addr %q: %s is not a loopback address; the load test drives this machine only", c.addr, ip.IP)
		}
	}
	return nil
}

// outcome of one request.
type outcome uint8

const (
	admitted outcome = iota
	denied
	failed
)

// sample is one answered request: its key, send time and outcome.
type sample struct {
	key     int32
	out     outcome
	sent    int64 // Unix nanoseconds
	latency time.Duration
}

// caller sends one request for key and returns its outcome and, when the
// answer says them, the limits of the request's rules: one per descriptor
// (RLS statuses, in request order) or per RateLimit-Policy item
// (forward-auth), the zero Limit where no limited rule matched.
type caller func(ctx context.Context, key int) (outcome, []ratelimit.Limit, error)

// loadReport is what a load test measured.
type loadReport struct {
	elapsed                    time.Duration
	samples                    []sample
	admitted, denied, errors   int64
	missed                     int64                            // scheduled requests not sent: every caller was busy
	limits                     []ratelimit.Limit                // per descriptor; zero where no limited rule matched
	bucket                     func(key, descriptor int) string // the bucket a descriptor of key's request takes from
	exact                      int64                            // what the exact limiter admits
	p50, p99, p999, maxLatency time.Duration
	firstError                 error
}

func loadtest(ctx context.Context, c *loadConfig, progress io.Writer) (*loadReport, error) {
	tg, err := newTarget(c)
	if err != nil {
		return nil, err
	}
	defer tg.close()
	call := tg.call
	rep := &loadReport{bucket: tg.bucket}
	var (
		mu        sync.Mutex
		limitSeen atomic.Bool
		count     [3]atomic.Int64
		firstErr  atomic.Pointer[error]
	)
	if c.limit > 0 {
		for range max(tg.descriptors, 1) {
			rep.limits = append(rep.limits, ratelimit.Every(c.period, c.limit))
		}
		limitSeen.Store(true)
	}
	perWorker := make([][]sample, c.concurrency)
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	start := time.Now()
	slots := make(chan int64, c.concurrency) // scheduled send times (Unix ns); 0 for closed loop
	var wg sync.WaitGroup
	for w := range c.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]sample, 0, 1024)
			next := w
			for sched := range slots {
				key := next % c.keys
				next += c.concurrency
				sent := time.Now()
				if sched == 0 {
					sched = sent.UnixNano()
				}
				rctx, rcancel := context.WithTimeout(context.Background(), c.timeout)
				out, lim, err := call(rctx, key)
				rcancel()
				done := time.Now()
				count[out].Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				if !limitSeen.Load() && anyLimit(lim) {
					mu.Lock()
					if !limitSeen.Load() {
						rep.limits = lim
						limitSeen.Store(true)
					}
					mu.Unlock()
				}
				local = append(local, sample{key: int32(key), out: out, sent: sent.UnixNano(), latency: done.Sub(time.Unix(0, sched))})
			}
			perWorker[w] = local
		}()
	}
	// Progress, once a second.
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last int64
		for {
			select {
			case <-stopProgress:
				fmt.Fprintln(progress)
				return
			case now := <-t.C:
				a, d, e := count[admitted].Load(), count[denied].Load(), count[failed].Load()
				fmt.Fprintf(progress, "\r%5.1fs  sent %d  admitted %d  denied %d  errors %d  %d/s   ",
					now.Sub(start).Seconds(), a+d+e, a, d, e, a+d+e-last)
				last = a + d + e
			}
		}
	}()
	// The dispatcher: at -rate, one slot per 1/rate s, sent at most 1 ms
	// late; a slot that finds every caller busy is missed, not queued.
	if c.rate > 0 {
		interval := time.Duration(float64(time.Second) / c.rate)
		tick := time.NewTicker(time.Millisecond)
		next := start
	dispatch:
		for {
			select {
			case <-ctx.Done():
				break dispatch
			case now := <-tick.C:
				for ; !next.After(now); next = next.Add(interval) {
					select {
					case slots <- next.UnixNano():
					default:
						rep.missed++
					}
				}
			}
		}
		tick.Stop()
	} else {
	closed:
		for {
			select {
			case <-ctx.Done():
				break closed
			case slots <- 0:
			}
		}
	}
	close(slots)
	wg.Wait()
	rep.elapsed = time.Since(start)
	close(stopProgress)
	<-progressDone

	for _, s := range perWorker {
		rep.samples = append(rep.samples, s...)
	}
	rep.admitted, rep.denied, rep.errors = count[admitted].Load(), count[denied].Load(), count[failed].Load()
	if p := firstErr.Load(); p != nil {
		rep.firstError = *p
	}
	lat := make([]time.Duration, len(rep.samples))
	for i, s := range rep.samples {
		lat[i] = s.latency
	}
	slices.Sort(lat)
	rep.p50, rep.p99, rep.p999 = quantile(lat, 0.50), quantile(lat, 0.99), quantile(lat, 0.999)
	if len(lat) > 0 {
		rep.maxLatency = lat[len(lat)-1]
	}
	if anyLimit(rep.limits) {
		rep.exact, err = exactAdmissions(rep.samples, c.algorithm, rep.limits, rep.bucket)
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// anyLimit reports whether some rule of limits is limited.
func anyLimit(limits []ratelimit.Limit) bool {
	for _, l := range limits {
		if l.Count > 0 {
			return true
		}
	}
	return false
}

// exactAdmissions replays the answered requests in send order through
// the algorithm and counts what it admits. A request takes one unit from
// the bucket of each of its descriptors with a limit (bucket names them)
// when every one of them admits, and nothing otherwise: the service's
// atomic decision.
func exactAdmissions(samples []sample, algorithm string, limits []ratelimit.Limit, bucket func(key, descriptor int) string) (int64, error) {
	alg, _ := catalog.ByName(algorithm)
	for _, l := range limits {
		if l.Count == 0 {
			continue
		}
		if err := l.Validate(); err != nil {
			return 0, err
		}
	}
	sorted := slices.Clone(samples)
	slices.SortFunc(sorted, func(a, b sample) int { return int(min(max(a.sent-b.sent, -1), 1)) })
	type bucketID struct {
		descriptor int
		name       string
	}
	states := map[bucketID][]byte{}
	next := make([][]byte, len(limits))
	var n int64
	for _, s := range sorted {
		allowed := true
		for i, l := range limits {
			if l.Count == 0 {
				continue
			}
			o, st, err := alg.Decide(states[bucketID{i, bucket(int(s.key), i)}], s.sent, l, 1, nil)
			if err != nil {
				return 0, err
			}
			allowed = allowed && o.Allowed
			next[i] = st
		}
		if !allowed {
			continue
		}
		n++
		for i, l := range limits {
			if l.Count > 0 {
				states[bucketID{i, bucket(int(s.key), i)}] = next[i]
			}
		}
	}
	return n, nil
}

func (r *loadReport) print(w io.Writer, c *loadConfig) {
	total := r.admitted + r.denied + r.errors
	target := "closed loop"
	if c.rate > 0 {
		target = fmt.Sprintf("target %.0f req/s", c.rate)
	}
	fmt.Fprintf(w, "sluice loadtest: %s %s, domain %s, %d key(s), %s, %d callers, %v\n",
		c.protocol, c.addr, c.domain, c.keys, target, c.concurrency, c.duration)
	fmt.Fprintf(w, "requests   %d in %.2fs: %.1f req/s; admitted %d, denied %d, errors %d, missed slots %d\n",
		total, r.elapsed.Seconds(), float64(total)/r.elapsed.Seconds(), r.admitted, r.denied, r.errors, r.missed)
	fmt.Fprintf(w, "latency    p50 %s  p99 %s  p99.9 %s  max %s\n", ms(r.p50), ms(r.p99), ms(r.p999), ms(r.maxLatency))
	if anyLimit(r.limits) && r.exact > 0 {
		var admittedAnswered int64
		for _, s := range r.samples {
			if s.out == admitted {
				admittedAnswered++
			}
		}
		var rules []string
		for i, l := range r.limits {
			if l.Count > 0 {
				rules = append(rules, fmt.Sprintf("#%d %d per %v", i+1, l.Count, l.Period))
			}
		}
		fmt.Fprintf(w, "drift      admitted %d; exact %s over every descriptor (%s) admits %d: %+.2f%%\n",
			admittedAnswered, c.algorithm, strings.Join(rules, ", "), r.exact,
			100*float64(admittedAnswered-r.exact)/float64(r.exact))
	} else {
		fmt.Fprintln(w, "drift      unknown: no answer named the rule's limit (set -limit and -period)")
	}
	if r.firstError != nil {
		fmt.Fprintf(w, "first error: %v\n", r.firstError)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }

// target is what a load test drives: how to call it, and what the exact
// limiter needs to know of its requests.
type target struct {
	call caller
	// descriptors is the number of descriptors of each request; 0 for
	// forward-auth, whose descriptors the service builds.
	descriptors int
	// bucket names the bucket that the descriptor-th descriptor of key's
	// request takes from: its entries with the key filled in, so that a
	// descriptor without {key} is one bucket for every key. Forward-auth
	// does not say which rule reads which part of the request: each rule
	// (RateLimit-Policy item) is taken to be keyed by -header.
	bucket func(key, descriptor int) string
	close  func()
}

// newTarget returns the target of c.protocol.
func newTarget(c *loadConfig) (*target, error) {
	descs, err := parseLoadDescriptors(c.descriptor)
	if err != nil {
		return nil, err
	}
	keyNames := make([]string, c.keys)
	for i := range keyNames {
		keyNames[i] = "key" + strconv.Itoa(i)
	}
	fill := func(s string, key int) string { return strings.ReplaceAll(s, "{key}", keyNames[key]) }
	// The request's descriptors for every key, and their bucket names.
	rlsDescs := make([][]*commonv3.RateLimitDescriptor, c.keys)
	names := make([][]string, c.keys)
	for k := range rlsDescs {
		for _, entries := range descs {
			d := &commonv3.RateLimitDescriptor{}
			var name strings.Builder
			for j, e := range entries {
				d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e[0], Value: fill(e[1], k)})
				if j > 0 {
					name.WriteByte(',')
				}
				name.WriteString(e[0] + "=" + fill(e[1], k))
			}
			rlsDescs[k] = append(rlsDescs[k], d)
			names[k] = append(names[k], name.String())
		}
	}
	tg := &target{descriptors: len(descs), bucket: func(key, i int) string { return names[key][i] }}
	switch c.protocol {
	case "grpc":
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		client := rlsv3.NewRateLimitServiceClient(conn)
		reqs := make([]*rlsv3.RateLimitRequest, c.keys)
		for k := range reqs {
			reqs[k] = &rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: rlsDescs[k]}
		}
		tg.call = func(ctx context.Context, key int) (outcome, []ratelimit.Limit, error) {
			resp, err := client.ShouldRateLimit(ctx, reqs[key])
			if err != nil {
				return failed, nil, err
			}
			return rlsOutcome(resp)
		}
		tg.close = func() { conn.Close() }
		return tg, nil
	case "json":
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.concurrency, MaxConnsPerHost: c.concurrency}}
		bodies := make([][]byte, c.keys)
		for k := range bodies {
			bodies[k], err = protojson.Marshal(&rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: rlsDescs[k]})
			if err != nil {
				return nil, err
			}
		}
		u := "http://" + c.addr + "/json"
		tg.call = func(ctx context.Context, key int) (outcome, []ratelimit.Limit, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(bodies[key]))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return failed, nil, err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return failed, nil, err
			}
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
				return failed, nil, fmt.Errorf("/json: status %d: %s", resp.StatusCode, b)
			}
			var out rlsv3.RateLimitResponse
			if err := protojson.Unmarshal(b, &out); err != nil {
				return failed, nil, err
			}
			return rlsOutcome(&out)
		}
		tg.close = client.CloseIdleConnections
		return tg, nil
	}
	// forward-auth
	name, value, ok := strings.Cut(c.header, ":")
	if !ok {
		return nil, fmt.Errorf("-header %q: want Name: value", c.header)
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.concurrency, MaxConnsPerHost: c.concurrency}}
	u := "http://" + c.addr + "/forward-auth?domain=" + url.QueryEscape(c.domain)
	tg.descriptors = 0
	tg.bucket = func(key, _ int) string { return keyNames[key] }
	tg.call = func(ctx context.Context, key int) (outcome, []ratelimit.Limit, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/")
		req.Header.Set(name, fill(value, key))
		resp, err := client.Do(req)
		if err != nil {
			return failed, nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lim := policyLimits(resp.Header.Values("RateLimit-Policy"))
		switch resp.StatusCode {
		case http.StatusOK:
			return admitted, lim, nil
		case http.StatusTooManyRequests:
			return denied, lim, nil
		}
		return failed, lim, fmt.Errorf("/forward-auth: status %d", resp.StatusCode)
	}
	tg.close = client.CloseIdleConnections
	return tg, nil
}

// rlsOutcome reads an RLS answer: admitted or denied, and each status's
// limit.
func rlsOutcome(resp *rlsv3.RateLimitResponse) (outcome, []ratelimit.Limit, error) {
	lims := make([]ratelimit.Limit, len(resp.GetStatuses()))
	for i, st := range resp.GetStatuses() {
		if cl := st.GetCurrentLimit(); cl != nil {
			if p := unitPeriod(cl.GetUnit()); p > 0 && cl.GetRequestsPerUnit() > 0 {
				lims[i] = ratelimit.Every(p, int64(cl.GetRequestsPerUnit()))
			}
		}
	}
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return admitted, lims, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return denied, lims, nil
	}
	return failed, lims, fmt.Errorf("overall code %v", resp.GetOverallCode())
}

// unitPeriod is the length of an RLS unit; 0 for UNKNOWN.
func unitPeriod(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, x := range rlsUnits {
		if x.unit == u {
			return x.length
		}
	}
	return 0
}

// policyLimits reads the items of a RateLimit-Policy field: q per w
// seconds each, the zero Limit for an item it cannot read.
func policyLimits(fields []string) []ratelimit.Limit {
	list, err := httpsfv.UnmarshalList(fields)
	if err != nil {
		return nil
	}
	lims := make([]ratelimit.Limit, len(list))
	for i, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		q, _ := it.Params.Get("q")
		w, _ := it.Params.Get("w")
		qi, ok1 := q.(int64)
		wi, ok2 := w.(int64)
		if ok1 && ok2 && qi > 0 && wi > 0 {
			lims[i] = ratelimit.Every(time.Duration(wi)*time.Second, qi)
		}
	}
	return lims
}

// parseLoadDescriptors parses "k=v,k2=v2;k3=v3": ';' between
// descriptors, ',' between entries.
func parseLoadDescriptors(s string) ([][][2]string, error) {
	var out [][][2]string
	for desc := range strings.SplitSeq(s, ";") {
		var entries [][2]string
		for part := range strings.SplitSeq(desc, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || k == "" || v == "" {
				return nil, fmt.Errorf("-descriptor %q: want key=value entries separated by ',', descriptors by ';'", s)
			}
			entries = append(entries, [2]string{k, v})
		}
		out = append(out, entries)
	}
	return out, nil
}

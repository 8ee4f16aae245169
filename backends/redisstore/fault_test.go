package redisstore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// failureClass reports whether err is one of the two failure classes a
// store may return when the server misbehaves.
func failureClass(err error) bool {
	return errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrUnknownOutcome)
}

// faultAlgorithms covers both native programs and the generic path.
func faultAlgorithms() []ratelimit.Algorithm {
	return []ratelimit.Algorithm{gcra.New(), tokenbucket.New(), windowAlg{}}
}

// TestKillAndRestart kills redis-server under 16 running goroutines, then
// restarts it on the same port: every call during the outage fails with a
// typed error within its deadline, and the same store works again after
// the restart (the script cache is empty then, so NOSCRIPT is handled).
func TestKillAndRestart(t *testing.T) {
	srv := startServer(t)
	st, err := redisstore.New(newClient(t, srv.addr()), redisstore.WithPrefix(randomPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 300 * time.Millisecond
	var (
		stop      atomic.Bool
		ok, fails atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		bad       []error
	)
	for g := range 16 {
		wg.Go(func() {
			alg := faultAlgorithms()[g%3]
			for i := 0; !stop.Load() && i < 100000; i++ {
				ctx, cancel := context.WithTimeout(t.Context(), deadline)
				start := time.Now()
				_, err := st.Apply(ctx, ratelimit.Check{Namespace: alg.Name(), Key: "key", Algorithm: alg, Limit: ratelimit.PerSecond(1000), Cost: 1})
				cancel()
				took := time.Since(start)
				switch {
				case err == nil:
					ok.Add(1)
				case failureClass(err) && took < deadline+200*time.Millisecond:
					fails.Add(1)
				default:
					mu.Lock()
					bad = append(bad, err)
					mu.Unlock()
				}
			}
		})
	}
	waitFor(t, func() bool { return ok.Load() > 100 })
	srv.kill()
	waitFor(t, func() bool { return fails.Load() > 50 })
	srv.start()
	before := ok.Load()
	waitFor(t, func() bool { return ok.Load() > before+100 })
	stop.Store(true)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d calls failed outside the failure classes or their deadline, first: %v", len(bad), bad[0])
	}
	t.Logf("%d successes, %d typed failures", ok.Load(), fails.Load())
}

// waitFor polls cond every 2 ms for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 5000 {
		if cond() {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("condition not reached in 10 s")
}

// TestStall stops redis-server with SIGSTOP: a call whose request was
// sent returns at its deadline with ErrUnknownOutcome, and a call that
// could not get a connection (pool of one) returns with ErrUnavailable.
// After SIGCONT the store works again.
func TestStall(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr(), func(o *redis.Options) { o.PoolSize = 1; o.PoolTimeout = 5 * time.Second })
	st, err := redisstore.New(c, redisstore.WithPrefix(randomPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	check := ratelimit.Check{Namespace: "s", Key: "k", Algorithm: gcra.New(), Limit: ratelimit.PerSecond(10), Cost: 1}
	if _, err := st.Apply(t.Context(), check); err != nil {
		t.Fatal(err)
	}
	srv.signal(syscall.SIGSTOP)
	defer srv.signal(syscall.SIGCONT)

	const deadline = 150 * time.Millisecond
	type result struct {
		err  error
		took time.Duration
	}
	sent := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		start := time.Now()
		_, err := st.Apply(ctx, check)
		sent <- result{err, time.Since(start)}
	}()
	// The second call waits for the only connection, held by the first.
	waitFor(t, func() bool { return c.PoolStats().TotalConns == 1 && c.PoolStats().IdleConns == 0 })
	ctx, cancel := context.WithTimeout(t.Context(), deadline/2)
	start := time.Now()
	_, err = st.Apply(ctx, check)
	took := time.Since(start)
	cancel()
	if !errors.Is(err, ratelimit.ErrUnavailable) || took > deadline/2+100*time.Millisecond {
		t.Errorf("call waiting for a connection: %v after %s, want ErrUnavailable within %s", err, took, deadline/2)
	}
	r := <-sent
	if !errors.Is(r.err, ratelimit.ErrUnknownOutcome) || r.took > deadline+100*time.Millisecond {
		t.Errorf("call sent to a stalled server: %v after %s, want ErrUnknownOutcome within %s", r.err, r.took, deadline)
	}
	srv.signal(syscall.SIGCONT)
	waitFor(t, func() bool {
		_, err := st.Apply(t.Context(), check)
		return err == nil
	})
}

// dropProxy forwards TCP between a client and redis-server and, when
// armed, swallows the next reply from the server and closes the client's
// connection: the server ran the command, the client never hears of it.
type dropProxy struct {
	l     net.Listener
	to    string
	armed atomic.Bool
	drops atomic.Int64
	wg    sync.WaitGroup
}

func newDropProxy(t *testing.T, to string) *dropProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{l: l, to: to}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = l.Close()
		p.wg.Wait()
	})
	return p
}

func (p *dropProxy) addr() string { return p.l.Addr().String() }

func (p *dropProxy) accept() {
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.wg.Go(func() {
			_, _ = io.Copy(server, client)
			_ = server.Close()
		})
		p.wg.Go(func() {
			defer client.Close()
			defer server.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					if p.armed.CompareAndSwap(true, false) {
						p.drops.Add(1)
						return
					}
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// TestLostReplyNoDoubleSpend drops the reply of a script that ran, with
// go-redis's default retry settings (MaxRetries 0 = 3 retries): the call
// fails with ErrUnknownOutcome and the server shows exactly one spend,
// because the store's commands are never retried.
func TestLostReplyNoDoubleSpend(t *testing.T) {
	srv := startServer(t)
	for _, mode := range clientModes() {
		for _, alg := range faultAlgorithms() {
			t.Run("client="+mode.name+"/algo="+alg.Name(), func(t *testing.T) {
				proxy := newDropProxy(t, srv.addr())
				prefix := randomPrefix(t)
				viaProxy := newClient(t, proxy.addr(), func(o *redis.Options) { o.MaxRetries = 0 })
				st, err := redisstore.New(viaProxy, append(mode.opts, redisstore.WithPrefix(prefix))...)
				if err != nil {
					t.Fatal(err)
				}
				direct, err := redisstore.New(newClient(t, srv.addr()), redisstore.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				check := ratelimit.Check{Namespace: "l", Key: "k", Algorithm: alg, Limit: ratelimit.PerHour(10), Cost: 1}
				if o, err := st.Apply(t.Context(), check); err != nil || o.Remaining != 9 {
					t.Fatalf("warm-up: %+v %v", o, err)
				}
				proxy.armed.Store(true)
				_, err = st.Apply(t.Context(), check)
				if !errors.Is(err, ratelimit.ErrUnknownOutcome) {
					t.Fatalf("lost reply: %v, want ErrUnknownOutcome", err)
				}
				if proxy.drops.Load() != 1 {
					t.Fatalf("%d replies dropped, want 1", proxy.drops.Load())
				}
				peek := check
				peek.Cost = 0
				o, err := direct.Apply(t.Context(), peek)
				if err != nil {
					t.Fatal(err)
				}
				// The generic path's reply lost may be the read's (nothing
				// spent) or the CAS's (one spend); the native path's is the
				// one script (one spend).
				want := int64(8)
				if o.Remaining != want && (alg.Name() != "test-window" || o.Remaining != 9) {
					t.Fatalf("remaining %d after one lost reply, want %d: the script ran %d times", o.Remaining, want, 9-o.Remaining)
				}
				// The store goes on working through the proxy.
				if _, err := st.Apply(t.Context(), check); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// clientMode is a way of sending the store's commands: the client itself,
// go-redis's asynchronous autopipeliner on it for every command, or for
// the commands sent while another is under way (WithAutoPipeline).
type clientMode struct {
	name string
	opts []redisstore.Option
}

func clientModes() []clientMode {
	return []clientMode{
		{"plain", nil},
		{"uncoalesced", []redisstore.Option{redisstore.WithoutCoalescing()}},
		{"autopipeline", []redisstore.Option{redisstore.WithAutoPipelineAlways()}},
		{"autopipeline-adaptive", []redisstore.Option{redisstore.WithAutoPipeline(nil)}},
	}
}

// TestScriptFlushMidRun flushes the script cache repeatedly under load:
// EVALSHA's NOSCRIPT falls back to EVAL, so no call fails.
func TestScriptFlushMidRun(t *testing.T) {
	for _, mode := range clientModes() {
		t.Run("client="+mode.name, func(t *testing.T) {
			srv := startServer(t)
			c := newClient(t, srv.addr())
			st, err := redisstore.New(c, append(mode.opts, redisstore.WithPrefix(randomPrefix(t)))...)
			if err != nil {
				t.Fatal(err)
			}
			var (
				wg    sync.WaitGroup
				calls atomic.Int64
				errs  atomic.Int64
				stop  atomic.Bool
			)
			for g := range 8 {
				wg.Go(func() {
					alg := faultAlgorithms()[g%3]
					for i := 0; !stop.Load() && i < 100000; i++ {
						checks := []ratelimit.Check{
							{Namespace: alg.Name(), Key: "{a}1", Algorithm: alg, Limit: ratelimit.PerSecond(1000), Cost: 1},
							{Namespace: alg.Name(), Key: "{a}2", Algorithm: alg, Limit: ratelimit.PerSecond(1000), Cost: 1},
						}
						var err error
						if i%2 == 0 {
							_, err = st.Apply(t.Context(), checks[0])
						} else {
							_, err = st.ApplyAll(t.Context(), checks, make([]ratelimit.Outcome, 2))
						}
						calls.Add(1)
						if err != nil {
							errs.Add(1)
							t.Log(err)
						}
					}
				})
			}
			for range 30 {
				if err := c.ScriptFlush(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
				n := calls.Load()
				waitFor(t, func() bool { return calls.Load() > n+20 })
			}
			stop.Store(true)
			wg.Wait()
			if errs.Load() != 0 {
				t.Fatalf("%d of %d calls failed across SCRIPT FLUSH", errs.Load(), calls.Load())
			}
			calls0, fallbacks := st.NativeCounts()
			t.Logf("%d calls, %d native script calls (%d fell back)", calls.Load(), calls0, fallbacks)
		})
	}
}

// TestAutoPipelineStall stops redis-server with SIGSTOP under a store
// sending through the autopipeliner (always, or under concurrency): the
// autopipeliner sends on its own context, so the store must end each wait
// itself. Every call returns at its deadline with ErrUnknownOutcome
// (queued in the autopipeliner or sent, it may still run) or
// ErrUnavailable (held back by the store's coalescer, never sent); after
// SIGCONT the store works again, and the server never shows more spends
// than successes plus unknown outcomes.
func TestAutoPipelineStall(t *testing.T) {
	for _, mode := range clientModes()[2:] {
		t.Run("client="+mode.name, func(t *testing.T) { testAutoPipelineStall(t, mode.opts) })
	}
}

func testAutoPipelineStall(t *testing.T, opts []redisstore.Option) {
	srv := startServer(t)
	c := newClient(t, srv.addr(), func(o *redis.Options) {
		o.ReadTimeout = 500 * time.Millisecond
		o.WriteTimeout = 500 * time.Millisecond
	})
	prefix := randomPrefix(t)
	st, err := redisstore.New(c, append(opts, redisstore.WithPrefix(prefix))...)
	if err != nil {
		t.Fatal(err)
	}
	check := ratelimit.Check{Namespace: "s", Key: "k", Algorithm: gcra.New(), Limit: ratelimit.PerHour(1000), Cost: 1}
	if _, err := st.Apply(t.Context(), check); err != nil {
		t.Fatal(err)
	}
	srv.signal(syscall.SIGSTOP)
	defer srv.signal(syscall.SIGCONT)

	const (
		deadline = 150 * time.Millisecond
		callers  = 8
	)
	var wg sync.WaitGroup
	errs := make([]error, callers)
	took := make([]time.Duration, callers)
	for i := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			_, errs[i] = st.Apply(ctx, check)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	unknown := 0
	for i := range callers {
		classified := errors.Is(errs[i], ratelimit.ErrUnknownOutcome) || errors.Is(errs[i], ratelimit.ErrUnavailable)
		if !classified || took[i] > deadline+100*time.Millisecond {
			t.Errorf("call %d to a stalled server: %v after %s, want ErrUnknownOutcome or ErrUnavailable within %s", i, errs[i], took[i], deadline)
		}
		if errors.Is(errs[i], ratelimit.ErrUnknownOutcome) {
			unknown++
		}
	}
	srv.signal(syscall.SIGCONT)
	okCalls := 1 // the warm-up
	waitFor(t, func() bool {
		_, err := st.Apply(t.Context(), check)
		if err == nil {
			okCalls++
		}
		return err == nil
	})
	direct, err := redisstore.New(newClient(t, srv.addr()), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	peek := check
	peek.Cost = 0
	// Calls that gave up may still run once the server resumes: wait out
	// the client's read timeout before counting.
	time.Sleep(600 * time.Millisecond)
	o, err := direct.Apply(t.Context(), peek)
	if err != nil {
		t.Fatal(err)
	}
	spent := int(1000 - o.Remaining)
	if spent < okCalls || spent > okCalls+unknown {
		t.Fatalf("server shows %d spends for %d successes and %d unknown outcomes", spent, okCalls, unknown)
	}
	t.Logf("%d successes, %d unknown outcomes, %d spends on the server (%d of the unknown ran)", okCalls, unknown, spent, spent-okCalls)
}

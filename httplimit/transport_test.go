package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// handlerTransport serves requests with a handler in the same process, so
// that a synctest bubble holds the whole exchange and its clock.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, req)
	return w.Result(), nil
}

// arrivals records when each request reached the server, by client.
type arrivals struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

func (a *arrivals) add(client string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.times == nil {
		a.times = map[string][]time.Time{}
	}
	a.times[client] = append(a.times[client], time.Now())
	return len(a.times[client])
}

func (a *arrivals) of(client string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.times[client])
}

// refuse429 answers a client's first n requests 429 with Retry-After,
// then 200.
func refuse429(a *arrivals, n int, retryAfter string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.add(r.Header.Get("Client")) <= n {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
}

// get sends a GET as client and returns the final status.
func get(ctx context.Context, t *testing.T, c *http.Client, client string) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Client", client)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestTransportRetriesNeverEarlyAndJittered: 64 clients told the same
// Retry-After all retry after it, spread out by the jitter.
func TestTransportRetriesNeverEarlyAndJittered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		srv := refuse429(&a, 1, "2")
		const clients = 64
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{srv}, BaseDelay: time.Second}}
				code, err := get(t.Context(), t, c, strconv.Itoa(i))
				if err != nil || code != http.StatusOK {
					t.Errorf("client %d: %d %v", i, code, err)
				}
			})
		}
		wg.Wait()
		var gaps []time.Duration
		for i := range clients {
			ts := a.of(strconv.Itoa(i))
			if len(ts) != 2 {
				t.Fatalf("client %d made %d requests, want 2", i, len(ts))
			}
			gap := ts[1].Sub(ts[0])
			if gap < 2*time.Second {
				t.Errorf("client %d retried after %s, before Retry-After 2 s", i, gap)
			}
			gaps = append(gaps, gap)
		}
		slices.Sort(gaps)
		spread := gaps[len(gaps)-1] - gaps[0]
		t.Logf("retry delays: min %s, median %s, max %s (spread %s)", gaps[0], gaps[len(gaps)/2], gaps[len(gaps)-1], spread)
		// Full jitter over [0, 1 s): 64 draws spanning under half of it has
		// probability below 2⁻⁵⁰.
		if spread < 500*time.Millisecond {
			t.Errorf("retries spread over %s: not jittered", spread)
		}
		if distinct := len(slices.Compact(gaps)); distinct < clients/2 {
			t.Errorf("only %d distinct retry delays among %d clients", distinct, clients)
		}
	})
}

func TestTransportHTTPDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		at := time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat) // "... GMT"
		if !strings.HasSuffix(at, "GMT") {
			t.Fatalf("HTTP-date %q not in GMT", at)
		}
		c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{refuse429(&a, 1, at)}}}
		if code, err := get(t.Context(), t, c, "x"); err != nil || code != http.StatusOK {
			t.Fatalf("%d %v", code, err)
		}
		ts := a.of("x")
		// The date has whole seconds: the retry is due at its second.
		if gap := ts[1].Sub(ts[0]); gap < 4*time.Second {
			t.Errorf("retried after %s, before the HTTP-date", gap)
		}
	})
}

func TestTransportCapsAttemptsAndTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		always := refuse429(&a, 1<<30, "1")
		c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{always}, MaxAttempts: 3}}
		code, err := get(t.Context(), t, c, "capped")
		if err != nil || code != http.StatusTooManyRequests {
			t.Fatalf("%d %v, want the last 429", code, err)
		}
		if n := len(a.of("capped")); n != 3 {
			t.Errorf("%d attempts, want 3", n)
		}

		far := refuse429(&a, 1<<30, "3600")
		c = &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{far}, MaxElapsed: time.Minute}}
		start := time.Now()
		if code, err := get(t.Context(), t, c, "far"); err != nil || code != http.StatusTooManyRequests {
			t.Fatalf("%d %v", code, err)
		}
		if n := len(a.of("far")); n != 1 || time.Since(start) != 0 {
			t.Errorf("%d attempts over %s for a Retry-After past MaxElapsed, want 1 at once", n, time.Since(start))
		}
	})
}

func TestTransportStopsOnContextEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		always := refuse429(&a, 1<<30, "1")
		c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{always}, MaxAttempts: 100}}

		// A deadline the next wait would pass: the last answer, at once.
		ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancel()
		code, err := get(ctx, t, c, "deadline")
		if err != nil || code != http.StatusTooManyRequests {
			t.Fatalf("%d %v", code, err)
		}
		if n := len(a.of("deadline")); n > 3 {
			t.Errorf("%d attempts within a 2.5 s deadline at Retry-After 1", n)
		}

		// Cancelled while waiting: the context's error, no more attempts.
		ctx, cancel = context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel)
		_, err = get(ctx, t, c, "cancel")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
		if n := len(a.of("cancel")); n != 1 {
			t.Errorf("%d attempts, want 1", n)
		}
	})
}

func TestTransportRetriesOnlyReplayable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		var bodies []string
		var mu sync.Mutex
		srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
			refuse429(&a, 1, "1").ServeHTTP(w, r)
		})
		c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{srv}}}
		post := func(client string, body io.Reader) int {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://api.test/x", body)
			req.Header.Set("Client", client)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			return resp.StatusCode
		}
		// A one-shot body cannot be replayed: the 429 is returned.
		if code := post("oneshot", io.NopCloser(strings.NewReader("a"))); code != http.StatusTooManyRequests {
			t.Errorf("one-shot POST: status %d, want 429 returned", code)
		}
		// NewRequest sets GetBody for a strings.Reader: replayed, in full.
		if code := post("replay", strings.NewReader("payload")); code != http.StatusOK {
			t.Errorf("replayable POST: status %d, want 200 after a retry", code)
		}
		if want := []string{"a", "payload", "payload"}; !slices.Equal(bodies, want) {
			t.Errorf("bodies %q, want %q", bodies, want)
		}
	})
}

func TestTransportPacesOnSpentQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := a.add("p")
			w.Header().Set("RateLimit-Policy", `"p";q=20;w=10`)
			switch n {
			case 1:
				w.Header().Set("RateLimit", `"p";r=0;t=3`) // spent: hold for 3 s
			case 2:
				w.Header().Set("RateLimit", `"p";r=1;t=4`) // 1 of 20, under 10%: space by 4/2 s
			default:
				w.Header().Set("RateLimit", `"p";r=9;t=1`)
			}
		})
		c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{srv}}}
		for range 3 {
			if _, err := get(t.Context(), t, c, ""); err != nil {
				t.Fatal(err)
			}
		}
		ts := a.of("p")
		if gap := ts[1].Sub(ts[0]); gap < 3*time.Second {
			t.Errorf("second request %s after a spent quota with t=3", gap)
		}
		if gap := ts[2].Sub(ts[1]); gap < 2*time.Second {
			t.Errorf("third request %s after r=1 of q=20 over t=4", gap)
		}
	})
}

// TestTransportRealServer runs the transport against the middleware on a
// real loopback server: the 429's Retry-After is honoured over the wire.
func TestTransportRealServer(t *testing.T) {
	var hits atomic.Int64
	var first, second atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch hits.Add(1) {
		case 1:
			first.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			second.Store(time.Now().UnixNano())
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: &httplimit.Transport{Base: srv.Client().Transport, BaseDelay: time.Millisecond}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || hits.Load() != 2 {
		t.Fatalf("status %d after %d requests", resp.StatusCode, hits.Load())
	}
	if gap := time.Duration(second.Load() - first.Load()); gap < time.Second {
		t.Errorf("the server saw the retry %s after the 429 with Retry-After 1", gap)
	}
}

// TestTransportDoesNotHoldPastMaxElapsed: a spent quota for an hour is
// not waited for; the request goes and the server decides.
func TestTransportDoesNotHoldPastMaxElapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("RateLimit", `"p";r=0;t=3600`)
		})
		c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{srv}}}
		start := time.Now()
		for range 2 {
			if _, err := get(t.Context(), t, c, ""); err != nil {
				t.Fatal(err)
			}
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("held %s for a quota spent for an hour, want no hold", waited)
		}
	})
}

// TestTransportRateLimitFieldAsFloor: a 429 without Retry-After is retried
// no earlier than the t of its spent RateLimit item; a bare 503 after the
// backoff alone.
func TestTransportRateLimitFieldAsFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			client := r.Header.Get("Client")
			if a.add(client) > 1 {
				return
			}
			if client == "field" {
				w.Header().Set("RateLimit", `"p";r=0;t=2`)
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		c := &http.Client{Transport: &httplimit.Transport{Base: handlerTransport{srv}, MaxDelay: time.Second}}
		for _, client := range []string{"field", "bare"} {
			if code, err := get(t.Context(), t, c, client); err != nil || code != http.StatusOK {
				t.Fatalf("%s: %d %v", client, code, err)
			}
		}
		if ts := a.of("field"); ts[1].Sub(ts[0]) < 2*time.Second {
			t.Errorf("retried %s after a 429 whose RateLimit said t=2", ts[1].Sub(ts[0]))
		}
		if ts := a.of("bare"); len(ts) != 2 {
			t.Errorf("bare 503: %d requests, want 2", len(ts))
		} else if gap := ts[1].Sub(ts[0]); gap >= time.Second {
			t.Errorf("bare 503 retried after %s, want within the first backoff (< 100 ms)", gap)
		}
	})
}

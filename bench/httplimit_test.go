package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	sethhttp "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/ulule/limiter/v3"
	ulhttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulmem "github.com/ulule/limiter/v3/drivers/store/memory"
)

// BenchmarkHTTPMiddleware measures what rate-limiting middleware adds to a
// request on each library's memory store doing the same job: a key per
// client IP (from RemoteAddr, no proxy headers), the same open limit so
// every request is allowed, the library's default headers, and a
// handler that only writes 200. Each iteration serves one request to a
// fresh httptest.ResponseRecorder, cycling over 1024 client addresses.
// Besides sec/op it reports cpu-ns/op, the process's CPU time per request.
// lib=none is the handler and recorder alone: a middleware's overhead is
// its figures minus none's.
func BenchmarkHTTPMiddleware(b *testing.B) {
	libs := []struct {
		name string
		mw   func(b *testing.B) func(http.Handler) http.Handler
	}{
		{"none", func(*testing.B) func(http.Handler) http.Handler {
			return func(h http.Handler) http.Handler { return h }
		}},
		{"sluice", sluiceMiddleware},
		{"sethvargo", sethvargoMiddleware},
		{"ulule", ululeMiddleware},
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/items/1", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":40000"
	}
	for _, lib := range libs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			h := lib.mw(b)(ok)
			b.ReportAllocs()
			i := 0
			cpu0 := cputime.Process()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, reqs[i%len(reqs)])
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
				i++
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// httpRate is the limit of every middleware: far above what one key sees
// in a run, so every request is allowed. (sethvargo's memorystore refuses
// some requests at openRate.)
const httpRate = 1_000_000

func sluiceMiddleware(b *testing.B) func(http.Handler) http.Handler {
	lim, err := sluice.New(sluice.Rule{Name: "http", Algorithm: gcra.New(), Limit: sluice.PerSecond(httpRate)}, sluice.WithStore(privateStore(b)))
	if err != nil {
		b.Fatal(err)
	}
	return httplimit.Middleware(httplimit.ByLimiter(lim, httplimit.ClientIP()))
}

func sethvargoMiddleware(b *testing.B) func(http.Handler) http.Handler {
	s, err := memorystore.New(&memorystore.Config{Tokens: httpRate, Interval: time.Second, SweepInterval: time.Hour, SweepMinTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	m, err := sethhttp.NewMiddleware(s, sethhttp.IPKeyFunc())
	if err != nil {
		b.Fatal(err)
	}
	return m.Handle
}

func ululeMiddleware(_ *testing.B) func(http.Handler) http.Handler {
	lim := limiter.New(ulmem.NewStore(), limiter.Rate{Period: time.Second, Limit: httpRate})
	return ulhttp.NewMiddleware(lim).Handler
}

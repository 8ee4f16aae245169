package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/httplimit"
)

func Example() {
	store, _ := memstore.New() // the default store would do; a private one keeps the example's buckets apart
	lim, err := sluice.New(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerMinute(2)}, sluice.WithStore(store))
	if err != nil {
		panic(err)
	}
	limit := httplimit.Middleware(httplimit.ByLimiter(lim, httplimit.ClientIP()))
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))

	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Printf("%d RateLimit-Policy: %s  RateLimit: %s", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Printf("  Retry-After: %s", ra)
		}
		fmt.Println()
	}
	// Output:
	// 200 RateLimit-Policy: "api";q=2;w=60  RateLimit: "api";r=1;t=30
	// 200 RateLimit-Policy: "api";q=2;w=60  RateLimit: "api";r=0;t=60
	// 429 RateLimit-Policy: "api";q=2;w=60  RateLimit: "api";r=0;t=30  Retry-After: 30
}

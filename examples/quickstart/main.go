// Command quickstart shows Sluice on the embedded in-memory store, with no
// setup: three clients call an API guarded by two rules checked together
// (per client and global). Every second it prints how many calls each
// client got through and was refused, so burst, refill and Retry-After are
// visible; then it shows an HTTP handler behind httplimit's middleware
// answering 429 with Retry-After and the IETF RateLimit fields. It exits by
// itself after about five seconds.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/httplimit"
)

type client struct {
	name     string
	perSec   int // how often it calls
	allowed  int
	denied   int
	lastDeny sluice.Decision
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// Each client may make 5 calls per second with bursts of 10; all clients
	// together at most 12 per second with bursts of 20. No store option:
	// the embedded memory store is used.
	api, err := sluice.NewComposite([]sluice.Rule{
		{Name: "per-client", Algorithm: gcra.New(), Limit: sluice.PerSecond(5).WithBurst(10)},
		{Name: "global", Algorithm: tokenbucket.New(), Limit: sluice.PerSecond(12).WithBurst(20)},
	})
	if err != nil {
		return err
	}

	clients := []*client{{name: "alice", perSec: 20}, {name: "bob", perSec: 4}, {name: "carol", perSec: 8}}
	fmt.Println("rules: per-client 5/s burst 10 (GCRA), global 12/s burst 20 (token bucket)")
	fmt.Println("alice calls 20/s, bob 4/s, carol 8/s; counts are allowed/denied per second")
	fmt.Printf("%-6s %-10s %-10s %-10s %s\n", "second", "alice", "bob", "carol", "total allowed")

	const tick = 50 * time.Millisecond
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for sec := 1; sec <= 4; sec++ {
		for _, c := range clients {
			c.allowed, c.denied = 0, 0
		}
		for step := 0; step < int(time.Second/tick); step++ {
			<-ticker.C
			for _, c := range clients {
				// a client calling n times per second calls on n of the 20 ticks
				if step*c.perSec/20 == (step+1)*c.perSec/20 {
					continue
				}
				d, err := api.AllowN(ctx, 1, c.name, "all")
				if err != nil {
					return err
				}
				if d.Allowed {
					c.allowed++
				} else {
					c.denied++
					c.lastDeny = d
				}
			}
		}
		total := 0
		row := fmt.Sprintf("%-6d", sec)
		for _, c := range clients {
			row += fmt.Sprintf(" %-10s", fmt.Sprintf("%d/%d", c.allowed, c.denied))
			total += c.allowed
		}
		fmt.Printf("%s %d\n", row, total)
	}
	last := clients[0].lastDeny
	fmt.Printf("\nalice's last refusal: rule %s (%s), retry after %s\n", last.Rule, last.Limit, last.RetryAfter)
	fmt.Println("(first second: bursts pass; later: per-client refill of 5/s and the global 12/s cap)")

	return httpDemo(ctx)
}

// httpDemo guards a handler with httplimit's middleware: 429 with
// Retry-After once the limit is reached, the IETF RateLimit fields on
// every answer, and a problem+json body on refusals.
func httpDemo(ctx context.Context) error {
	lim, err := sluice.New(sluice.Rule{Name: "http", Algorithm: gcra.New(), Limit: sluice.PerMinute(3)})
	if err != nil {
		return err
	}
	// Keyed by client address; behind a proxy, pass its networks to
	// ClientIP so that X-Forwarded-For is believed from it alone.
	limit := httplimit.Middleware(httplimit.ByLimiter(lim, httplimit.ClientIP()))
	srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	defer srv.Close()
	fmt.Println("\nHTTP: 3 per minute per client address")
	for i := 1; i <= 4; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		fmt.Fprintf(os.Stdout, "request %d: %s  RateLimit: %s  Retry-After: %s\n", i, resp.Status, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	return nil
}

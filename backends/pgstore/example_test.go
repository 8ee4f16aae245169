package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Example shows a limiter on PostgreSQL: 10 requests per second per user,
// with bursts of 20, shared by every process using the database. It needs a
// server, so it claims no output.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Print(err)
		return
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.WithSweeper(time.Minute))
	if err != nil {
		log.Print(err)
		return
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Print(err)
		return
	}
	limiter, err := sluice.New(sluice.Rule{
		Name:      "api",
		Algorithm: gcra.New(),
		Limit:     ratelimit.PerSecond(10).WithBurst(20),
	}, sluice.WithStore(store))
	if err != nil {
		log.Print(err)
		return
	}
	d, err := limiter.Allow(ctx, "user-42")
	if err != nil {
		log.Print(err) // ErrUnavailable, ErrUnknownOutcome, …: see the package documentation
		return
	}
	fmt.Println(d.Allowed)
}

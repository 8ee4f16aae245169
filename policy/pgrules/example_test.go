package pgrules_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/policy/pgrules"
)

// A gateway reads its rules from the RateLimitRule table, follows every
// committed change, and logs denials to RateLimitViolation.
func Example() {
	if err := gateway(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func gateway(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pgrules.Migrate(ctx, pool); err != nil {
		return err
	}
	// 5 per minute per user on /login, for every plan.
	_, err = pool.Exec(ctx, `INSERT INTO "RateLimitRule" (domain, descriptor, requests_per_unit, unit)
		VALUES ('api', '[{"key": "user"}, {"key": "path", "value": "/login"}]', 5, 'minute')`)
	if err != nil {
		return err
	}

	src, err := pgrules.NewSource(pool)
	if err != nil {
		return err
	}
	set, err := src.Load(ctx) // a bad row: table RateLimitRule:<id>: <column>: …
	if err != nil {
		return err
	}
	sink, err := pgrules.NewSink(pool)
	if err != nil {
		return err
	}
	engine, err := policy.New(set, policy.WithSink(sink))
	if err != nil {
		return err
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = src.Watch(watchCtx, engine.Swap) }()
	defer func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = engine.Close(ctx) // writes the queued violations
	}()

	res, err := engine.Decide(ctx, "api", []policy.Descriptor{{{Key: "user", Value: "alice"}, {Key: "path", Value: "/login"}}}, 1)
	if err != nil {
		return err
	}
	log.Println("allowed:", res.Allowed)
	return nil
}

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/policy/pgrules"
	"github.com/sluicehq/sluice/sluiceotel"
)

// openRules loads the rules at path into an engine on st; with watch it
// keeps them in force with policy.Watch, which reloads them when a file
// changes: a reload that fails (bad YAML, a bad rule) is logged and
// counted and the rules in force stay. The watcher's stop is appended to
// closers.
func openRules(path string, st ratelimit.Store, watch bool, m *metrics, log *slog.Logger, closers *[]func() error, opts ...policy.Option) (*policy.Engine, error) {
	set, err := policy.Load(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	engine, err := newEngine(set, st, log, closers, opts...)
	if err != nil {
		return nil, err
	}
	log.Info("rules loaded", "path", path, "domains", set.Domains())
	if !watch {
		return engine, nil
	}
	w, err := policy.Watch(context.Background(), path, engine, policy.WithWatchLogger(log),
		policy.OnReload(m.countReload))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	*closers = append(*closers, w.Close)
	return engine, nil
}

// openTableRules is openRules for the RateLimitRule table of the
// PostgreSQL database at dsn (policy/pgrules), created first with
// migrate; with watch the rules follow the table through LISTEN/NOTIFY,
// with polling while notifications are unavailable.
func openTableRules(ctx context.Context, dsn string, migrate bool, st ratelimit.Store, watch bool, m *metrics, log *slog.Logger, closers *[]func() error, opts ...policy.Option) (*policy.Engine, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: -rules-postgres: %w", errConfig, err)
	}
	*closers = append(*closers, func() error { pool.Close(); return nil })
	if migrate {
		if err := pgrules.Migrate(ctx, pool); err != nil {
			return nil, fmt.Errorf("rules table migration: %w", err)
		}
	}
	src, err := pgrules.NewSource(pool, pgrules.WithLogger(log), pgrules.OnReload(m.countReload))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	set, err := src.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	engine, err := newEngine(set, st, log, closers, opts...)
	if err != nil {
		return nil, err
	}
	log.Info("rules loaded", "table", "RateLimitRule", "domains", set.Domains())
	if !watch {
		return engine, nil
	}
	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- src.Watch(watchCtx, engine.Swap) }()
	*closers = append(*closers, func() error { stop(); return <-done })
	return engine, nil
}

// engineOptions returns the engine options of the flags: with otel, the
// sluiceotel observer on the global OpenTelemetry providers.
func engineOptions(otel bool) ([]policy.Option, error) {
	if !otel {
		return nil, nil
	}
	obs, err := sluiceotel.Observer()
	if err != nil {
		return nil, fmt.Errorf("-otel: %w", err)
	}
	return []policy.Option{policy.WithObserver(obs)}, nil
}

// newEngine returns an engine deciding set on st with opts, closed by
// closers.
func newEngine(set *policy.Set, st ratelimit.Store, log *slog.Logger, closers *[]func() error, opts ...policy.Option) (*policy.Engine, error) {
	engine, err := policy.New(set, append([]policy.Option{policy.WithStore(st), policy.WithLogger(log)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	*closers = append(*closers, func() error { return engine.Close(context.Background()) })
	return engine, nil
}

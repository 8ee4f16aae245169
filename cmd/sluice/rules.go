package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/policy"
)

// openRules loads the rules at path into an engine on st; with watch it
// keeps them in force with policy.Watch, which reloads them when a file
// changes: a reload that fails (bad YAML, a bad rule) is logged and
// counted and the rules in force stay. The watcher's stop is appended to
// closers.
func openRules(path string, st ratelimit.Store, watch bool, m *metrics, log *slog.Logger, closers *[]func() error) (*policy.Engine, error) {
	set, err := policy.Load(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	engine, err := policy.New(set, policy.WithStore(st), policy.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	*closers = append(*closers, func() error { return engine.Close(context.Background()) })
	log.Info("rules loaded", "path", path, "domains", set.Domains())
	if !watch {
		return engine, nil
	}
	w, err := policy.Watch(context.Background(), path, engine, policy.WithWatchLogger(log),
		policy.OnReload(func(r policy.Reload) {
			if r.Err != nil {
				m.reloadErrors.Inc()
				return
			}
			m.reloads.Inc()
		}))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	*closers = append(*closers, w.Close)
	return engine, nil
}

// rulesFiles lists the files policy.Load reads at path: path itself, or
// a directory's *.yaml and *.yml files not starting with '.'.
func rulesFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if strings.HasPrefix(name, ".") || ext != ".yaml" && ext != ".yml" {
			continue
		}
		full := filepath.Join(path, name)
		if st, err := os.Stat(full); err == nil && st.Mode().IsRegular() {
			files = append(files, full)
		}
	}
	slices.Sort(files)
	return files, nil
}

package policy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	sluice "github.com/sluicehq/sluice"
)

// Reload reports one reload attempt of a Watcher.
type Reload struct {
	// Set is the set put in force; nil when Err is set.
	Set *Set
	// Err is why the files were refused (a *ConfigError, or the file
	// system's error); the set in force stayed.
	Err error
	// Delay is the propagation delay: from the first file event of the
	// change to the new set in force (or to the refusal). It includes the
	// debounce.
	Delay time.Duration
}

// WatchOption configures Watch.
type WatchOption func(*watchConfig)

type watchConfig struct {
	debounce time.Duration
	onReload func(Reload)
	logger   *slog.Logger
}

// WithDebounce sets how long the files must stay quiet after an event
// before they are reloaded: editors and ConfigMap updates write in
// several steps. The default is 100 ms.
func WithDebounce(d time.Duration) WatchOption {
	return func(c *watchConfig) { c.debounce = d }
}

// OnReload calls fn after every reload attempt that found the files
// changed, on the watcher's goroutine.
func OnReload(fn func(Reload)) WatchOption {
	return func(c *watchConfig) { c.onReload = fn }
}

// WithWatchLogger sets where reloads are logged; slog.Default() without it.
func WithWatchLogger(l *slog.Logger) WatchOption {
	return func(c *watchConfig) { c.logger = l }
}

// Watcher reloads a rule set into an Engine when its files change. Create
// one with Watch.
type Watcher struct {
	fs     *fsnotify.Watcher
	path   string
	engine *Engine
	cfg    watchConfig
	digest [sha256.Size]byte
	done   chan struct{}
	once   sync.Once
}

// Watch puts the rule set at path (as Load reads it) in force in e, and
// again each time its files change, until ctx ends or Close. It watches
// the directory (for a file, its parent), so editors' atomic renames and
// Kubernetes ConfigMap symlink swaps are seen. A change that does not
// load leaves the set in force and is logged and reported to OnReload.
// The first load must succeed: its error is returned.
func Watch(ctx context.Context, path string, e *Engine, opts ...WatchOption) (*Watcher, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", sluice.ErrInvalid)
	}
	w := &Watcher{path: path, engine: e, done: make(chan struct{}), cfg: watchConfig{debounce: 100 * time.Millisecond, logger: slog.Default()}}
	for _, o := range opts {
		o(&w.cfg)
	}
	if w.cfg.debounce < 0 || w.cfg.logger == nil {
		return nil, fmt.Errorf("%w: negative debounce or nil logger", sluice.ErrInvalid)
	}
	dir := path
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		dir = filepath.Dir(path)
	}
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := fs.Add(dir); err != nil {
		_ = fs.Close()
		return nil, err
	}
	w.fs = fs
	set, digest, err := load(path)
	if err == nil {
		err = e.Swap(set)
	}
	if err != nil {
		_ = fs.Close()
		return nil, err
	}
	w.digest = digest
	go w.run(ctx)
	return w, nil
}

// Close stops watching; the set in force stays. It waits for a reload in
// progress.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() { err = w.fs.Close() })
	<-w.done
	return err
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	defer w.once.Do(func() { _ = w.fs.Close() })
	var timer *time.Timer
	var fire <-chan time.Time
	var first time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case _, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if first.IsZero() {
				first = time.Now()
			}
			if timer == nil {
				timer = time.NewTimer(w.cfg.debounce)
			} else {
				timer.Reset(w.cfg.debounce)
			}
			fire = timer.C
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.cfg.logger.Warn("policy: watching rules", slog.String("path", w.path), slog.Any("err", err))
		case <-fire:
			fire = nil
			w.reload(first)
			first = time.Time{}
		}
	}
}

// reload loads the files and swaps them in when they changed; first is
// the time of the change's first event.
func (w *Watcher) reload(first time.Time) {
	set, digest, err := load(w.path)
	if err == nil && digest == w.digest {
		return // an event that changed nothing (a touch, a ConfigMap's old files going)
	}
	if err == nil {
		err = w.engine.Swap(set)
	}
	r := Reload{Err: err, Delay: time.Since(first)}
	if err != nil {
		w.cfg.logger.Error("policy: rules refused; the rules in force stay", slog.String("path", w.path), slog.Any("err", err))
	} else {
		w.digest, r.Set = digest, set
		w.cfg.logger.Info("policy: rules reloaded", slog.String("path", w.path), slog.Int("rules", len(set.rules)), slog.Duration("delay", r.Delay))
	}
	if w.cfg.onReload != nil {
		w.cfg.onReload(r)
	}
}

package policy_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/fakeclock"
	"github.com/sluicehq/sluice/policy"
)

// writeAtomic replaces path's content the way editors and config tools
// do: write a temporary file, rename it over.
func writeAtomic(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func rules(n int) string {
	return "domain: api\ndescriptors:\n  - key: user\n    rate_limit: " + strconv.Itoa(n) + "/minute\n"
}

// watch watches dir for e, quietly, until t ends, and returns the reload
// reports.
func watch(t *testing.T, dir string, e *policy.Engine, opt policy.WatchOption) <-chan policy.Reload {
	t.Helper()
	reloads := make(chan policy.Reload, 16)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := policy.Watch(context.Background(), dir, e, opt,
		policy.OnReload(func(r policy.Reload) { reloads <- r }), policy.WithWatchLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return reloads
}

// awaitReload waits for the next reload report; the deadline only keeps
// a broken watcher from hanging the test.
func awaitReload(t *testing.T, reloads <-chan policy.Reload) policy.Reload {
	t.Helper()
	select {
	case r := <-reloads:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no reload within 30 s")
		return policy.Reload{}
	}
}

func TestWatchReloadsKeepingState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	writeAtomic(t, path, rules(5))
	e := memEngine(t, fakeclock.New(), rules(5))
	reloads := watch(t, dir, e, policy.WithDebounce(20*time.Millisecond))
	if got := admitted(t, e, "api", 3, desc("user", "u")); got != 3 {
		t.Fatalf("before: %d", got)
	}

	written := time.Now()
	writeAtomic(t, path, rules(4))
	r := awaitReload(t, reloads)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	t.Logf("propagation delay, debounce 20ms: file written -> new limit in force %s (first event -> in force %s)", time.Since(written), r.Delay)
	if got := admitted(t, e, "api", 3, desc("user", "u")); got != 1 {
		t.Fatalf("after lowering to 4/minute: %d admitted, want 1 (3 taken carry over)", got)
	}

	// A bad file is refused; the set in force stays.
	writeAtomic(t, path, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: 4/fortnight\n")
	r = awaitReload(t, reloads)
	var ce *policy.ConfigError
	if !errors.As(r.Err, &ce) || ce.Line != 4 {
		t.Fatalf("bad file: %+v, want a ConfigError at line 4", r)
	}
	if res := decide(t, e, "api", 0, desc("user", "u")); !res.Statuses[0].Matched || res.Statuses[0].Decision.Limit.Count != 4 {
		t.Fatalf("after a refused file: %+v, want the 4/minute rule still in force", res)
	}
}

// TestWatchConfigMapSwap replays how Kubernetes updates a mounted
// ConfigMap: the files are links through ..data, a link to a timestamped
// directory that is replaced by renaming a new link over it.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, text string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "api.yaml"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", rules(5))
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "api.yaml"), filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	e := memEngine(t, fakeclock.New(), rules(5))
	reloads := watch(t, dir, e, policy.WithDebounce(20*time.Millisecond))

	written := time.Now()
	version("..v2", rules(7))
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..v1")); err != nil {
		t.Fatal(err)
	}
	r := awaitReload(t, reloads)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	t.Logf("propagation delay, debounce 20ms: ConfigMap swap begun -> new limit in force %s (first event -> in force %s)", time.Since(written), r.Delay)
	if res := decide(t, e, "api", 0, desc("user", "u")); res.Statuses[0].Decision.Limit.Count != 7 {
		t.Fatalf("after the swap: %+v, want 7/minute", res)
	}
}

// TestWatchPollsWhatInotifyMisses changes the rules through a hard link
// in another directory, which the watched directory hears nothing of:
// only the poll finds the change.
func TestWatchPollsWhatInotifyMisses(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	writeAtomic(t, path, rules(5))
	link := filepath.Join(elsewhere, "link.yaml")
	if err := os.Link(path, link); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	e := memEngine(t, fakeclock.New(), rules(5))
	reloads := watch(t, dir, e, policy.WithPollInterval(20*time.Millisecond))
	f, err := os.OpenFile(link, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(rules(9)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if r := awaitReload(t, reloads); r.Err != nil || decide(t, e, "api", 0, desc("user", "u")).Statuses[0].Decision.Limit.Count != 9 {
		t.Fatalf("reload %+v: want 9/minute in force", r)
	}
}

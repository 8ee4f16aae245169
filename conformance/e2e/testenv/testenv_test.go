package testenv

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

// TestFirstOf checks the order of the ways to get a server and that CI
// never falls back silently from a failed container.
func TestFirstOf(t *testing.T) {
	errDocker := errors.New("no engine")
	errRun := errors.New("image not found")
	// way returns a way to get a server that fails with err, or succeeds
	// with a server from source.
	way := func(source string, err error) func(context.Context) (*Server, error) {
		return func(context.Context) (*Server, error) {
			if err != nil {
				return nil, err
			}
			return &Server{Source: source}, nil
		}
	}
	for _, tc := range []struct {
		name       string
		ci         bool
		docker     error
		ctr, proc  error
		wantSource string
		wantNone   bool // a skip outside CI
		wantErr    bool
	}{
		{name: "ContainerFirst", wantSource: "container"},
		{name: "NoEngineUsesProcess", docker: errDocker, wantSource: "process"},
		{name: "FailedContainerFallsBack", ctr: errRun, wantSource: "process"},
		{name: "FailedContainerFailsInCI", ci: true, ctr: errRun, wantErr: true},
		{name: "NothingSkips", docker: errDocker, proc: errNone, wantErr: true, wantNone: true},
		{name: "BrokenProcessFails", docker: errDocker, proc: errors.New("initdb failed"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ci {
				t.Setenv("CI", "true")
			} else {
				t.Setenv("CI", "")
			}
			saved := dockerCheck
			dockerCheck = func() error { return tc.docker }
			defer func() { dockerCheck = saved }()
			srv, err := firstOf(t.Context(), KindRedis, way("container", tc.ctr), way("process", tc.proc))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %+v, want an error", srv)
				}
				if errors.Is(err, errNone) != tc.wantNone {
					t.Fatalf("error %v: errors.Is(errNone) = %t, want %t", err, !tc.wantNone, tc.wantNone)
				}
				return
			}
			if err != nil || srv.Source != tc.wantSource {
				t.Fatalf("got %+v, %v; want the %s", srv, err, tc.wantSource)
			}
		})
	}
}

// TestOwnerGuard checks that only the owning test of a private server and
// its subtests may stop it, and that a shared server cannot be stopped.
func TestOwnerGuard(t *testing.T) {
	private := &Server{Kind: KindRedis, ctl: &redisProc{}, owner: "TestA"}
	for _, tc := range []struct {
		name string
		srv  *Server
		test string
		ok   bool
	}{
		{name: "Owner", srv: private, test: "TestA", ok: true},
		{name: "Subtest", srv: private, test: "TestA/StoreDown/x", ok: true},
		{name: "NamePrefixIsNotSubtest", srv: private, test: "TestAB"},
		{name: "OtherTest", srv: private, test: "TestB/TestA"},
		{name: "Shared", srv: &Server{Kind: KindRedis, ctl: &redisProc{}}, test: "TestA"},
		{name: "FromEnvironment", srv: &Server{Kind: KindRedis, owner: "TestA"}, test: "TestA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.srv.ownerErr(tc.test, "stopped")
			if (err == nil) != tc.ok {
				t.Fatalf("ownerErr(%q) = %v, want ok=%t", tc.test, err, tc.ok)
			}
		})
	}
}

// TestRestartLeavesNoGoroutine stops and restarts a private Redis (a
// container or a child process, as the environment chooses) and checks
// that it refuses connections while stopped, answers after each Start,
// and that the restarts leave no goroutine behind.
func TestRestartLeavesNoGoroutine(t *testing.T) {
	srv := NewRedis(t)
	if !srv.CanStop() {
		t.Fatal("a private server reports !CanStop")
	}
	if err := pingRedis(t.Context(), srv.Addr()); err != nil {
		t.Fatalf("PING before the restarts: %v", err)
	}
	leakOpts := []goleak.Option{goleak.IgnoreCurrent()}
	for i := range 2 {
		srv.Stop(t)
		if err := pingRedis(t.Context(), srv.Addr()); err == nil {
			t.Fatalf("restart %d: PING answered while the server was stopped", i)
		}
		srv.Start(t)
		if err := pingRedis(t.Context(), srv.Addr()); err != nil {
			t.Fatalf("restart %d: PING after Start: %v", i, err)
		}
	}
	if err := goleak.Find(leakOpts...); err != nil {
		t.Fatalf("goroutines left by two restarts: %v", err)
	}
}

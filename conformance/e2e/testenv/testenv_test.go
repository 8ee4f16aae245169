package testenv

import (
	"context"
	"errors"
	"testing"
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

package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestStoretest runs the conformance suite on a real redis-server, with
// the server's clock and with an injected clock (WithTestClock), native
// scripts on and off, through the client and through its autopipeliner.
func TestStoretest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		clock  bool
		native bool
		ap     bool
	}{
		{"clock=server/path=native", false, true, false},
		{"clock=injected/path=native", true, true, false},
		{"clock=injected/path=generic", true, false, false},
		{"clock=server/path=native/client=autopipeline", false, true, true},
		{"clock=injected/path=generic/client=autopipeline", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t)
			prefix := randomPrefix(t)
			h := storetest.Harness{
				Algorithms: testAlgorithms(),
				Stop:       func(t *testing.T) { srv.kill() },
				Start:      func(t *testing.T) { srv.start() },
			}
			opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithCASAttempts(1000)}
			if tc.clock {
				h.Clock = storetest.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
				opts = append(opts, redisstore.WithTestClock(h.Clock))
			}
			if !tc.native {
				opts = append(opts, redisstore.WithoutNativeScripts())
			}
			if tc.ap {
				opts = append(opts, redisstore.WithAutoPipelineAlways())
			}
			h.NewStore = func(t *testing.T) ratelimit.Store {
				st, err := redisstore.New(newClient(t, srv.addr()), opts...)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			storetest.Run(t, h)
		})
	}
}

package testenv

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
)

var (
	dockerOnce sync.Once
	dockerErr  error
	// dockerCheck is dockerAvailable; tests replace it.
	dockerCheck = dockerAvailable
)

// dockerAvailable reports whether a Docker engine answers, checking once
// per binary.
func dockerAvailable() error {
	dockerOnce.Do(func() {
		setContainerDefaults()
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			dockerErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dockerErr = p.Health(ctx)
	})
	return dockerErr
}

// bindLoopback publishes the container port on 127.0.0.1:host, so the
// address survives a container restart (a random published port would
// change) and nothing listens beyond loopback.
func bindLoopback(containerPort string, host int) testcontainers.CustomizeRequestOption {
	return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		hc.PortBindings = network.PortMap{
			network.MustParsePort(containerPort): []network.PortBinding{{
				HostIP:   netip.MustParseAddr("127.0.0.1"),
				HostPort: strconv.Itoa(host),
			}},
		}
	})
}

// containerCtl stops, restarts and removes a container, waiting after a
// restart until ready succeeds. testcontainers-go closes its Docker
// client's connections at the end of Container.Stop and Container.Start,
// and ready closes its own client, so a restart leaves no goroutine
// behind (TestRestartLeavesNoGoroutine checks it when a Docker engine
// answers).
type containerCtl struct {
	ctr   testcontainers.Container
	ready func(ctx context.Context) error
}

func (c *containerCtl) stop(ctx context.Context) error {
	timeout := 5 * time.Second
	return c.ctr.Stop(ctx, &timeout)
}

func (c *containerCtl) start(ctx context.Context) error {
	if err := c.ctr.Start(ctx); err != nil {
		return err
	}
	if err := retry(ctx, c.ready); err != nil {
		return fmt.Errorf("not ready after restart: %w", err)
	}
	return nil
}

func (c *containerCtl) terminate() error {
	return testcontainers.TerminateContainer(c.ctr)
}

// localImages are the images conformance/e2e/images/build-images.sh builds
// from this machine's packages, by the official image they stand in for.
var localImages = map[string]string{
	"redis:7":     "sluice/redis:7",
	"postgres:15": "sluice/postgres:15",
}

// imageFor returns the image to run: the one named by the environment
// variable key when set; otherwise the locally built stand-in for official
// when the engine already has it (so no registry is asked); otherwise
// official, which the engine pulls.
func imageFor(key, official string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	local, ok := localImages[official]
	if !ok {
		return official
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return official
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.Client().ImageInspect(ctx, local); err == nil {
		return local
	}
	return official
}

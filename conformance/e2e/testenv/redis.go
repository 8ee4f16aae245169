package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
)

// redisArgs are the server options every Redis the package starts uses:
// no persistence, so a restart starts empty like a crashed cache.
var redisArgs = []string{"--save", "", "--appendonly", "no"}

// launchRedis finds or starts the standalone Redis server.
func launchRedis(ctx context.Context) (*Server, error) {
	if addr := os.Getenv("SLUICE_REDIS_ADDR"); addr != "" {
		srv := &Server{Kind: KindRedis, Source: "env SLUICE_REDIS_ADDR", Addrs: []string{addr}}
		if err := pingRedis(ctx, addr); err != nil {
			return nil, fmt.Errorf("SLUICE_REDIS_ADDR=%s does not answer: %w", addr, err)
		}
		return srv, nil
	}
	return firstOf(ctx, KindRedis, redisContainer, redisProcess)
}

// firstOf tries a container, then a child process. With CI=true a
// container failure is returned rather than hidden by the fallback.
func firstOf(ctx context.Context, kind string, viaContainer, viaProcess func(context.Context) (*Server, error)) (*Server, error) {
	var why []string
	if err := dockerCheck(); err == nil {
		srv, err := viaContainer(ctx)
		if err == nil {
			return srv, nil
		}
		if inCI() {
			return nil, fmt.Errorf("container: %w", err)
		}
		why = append(why, fmt.Sprintf("container: %v", err))
		report(fmt.Sprintf("testenv: %s container failed, trying a child process: %v", kind, err))
	} else {
		why = append(why, fmt.Sprintf("no Docker engine: %v", err))
	}
	srv, err := viaProcess(ctx)
	if err == nil {
		return srv, nil
	}
	why = append(why, err.Error())
	if errors.Is(err, errNone) {
		return nil, fmt.Errorf("%w: %s", errNone, strings.Join(why, "; "))
	}
	return nil, errors.New(strings.Join(why, "; "))
}

// pingRedis checks that addr answers PING.
func pingRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// redisContainer runs Redis from SLUICE_REDIS_IMAGE (default redis:7).
func redisContainer(ctx context.Context) (*Server, error) {
	image := imageFor("SLUICE_REDIS_IMAGE", "redis:7")
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	ctr, err := tcredis.Run(ctx, image, testcontainers.WithCmdArgs(redisArgs...), bindLoopback("6379/tcp", port))
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctl := &containerCtl{ctr: ctr, ready: func(ctx context.Context) error { return pingRedis(ctx, addr) }}
	if err := retry(ctx, ctl.ready); err != nil {
		_ = ctl.terminate()
		return nil, err
	}
	return &Server{Kind: KindRedis, Source: "testcontainers image " + image, Addrs: []string{addr}, ctl: ctl}, nil
}

// redisProcess runs redis-server as a child process.
func redisProcess(ctx context.Context) (*Server, error) {
	p, err := newRedisProcess(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &Server{Kind: KindRedis, Source: "child process " + p.bin, Addrs: []string{p.addr}, ctl: p}, nil
}

// launchRedisCluster finds or starts a Redis Cluster.
func launchRedisCluster(ctx context.Context) (*Server, error) {
	if v := os.Getenv("SLUICE_REDIS_CLUSTER_ADDRS"); v != "" {
		addrs := strings.Split(v, ",")
		if err := pingRedis(ctx, addrs[0]); err != nil {
			return nil, fmt.Errorf("SLUICE_REDIS_CLUSTER_ADDRS=%s does not answer: %w", v, err)
		}
		return &Server{Kind: KindRedisCluster, Source: "env SLUICE_REDIS_CLUSTER_ADDRS", Addrs: addrs}, nil
	}
	return firstOf(ctx, KindRedisCluster, clusterContainer, clusterProcess)
}

// clusterArgs makes a one-node cluster that announces addr's loopback
// port, so clients outside a container follow its redirections.
func clusterArgs(port int) []string {
	return append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-announce-ip", "127.0.0.1",
		"--cluster-announce-port", strconv.Itoa(port),
	}, redisArgs...)
}

// clusterContainer runs a one-node Redis Cluster in a container whose
// port is published on the same port number it announces.
func clusterContainer(ctx context.Context) (*Server, error) {
	image := imageFor("SLUICE_REDIS_IMAGE", "redis:7")
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithCmd(append([]string{"redis-server"}, clusterArgs(port)...)...),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("6379/tcp").WithStartupTimeout(30*time.Second)),
		bindLoopback("6379/tcp", port),
	)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctl := &containerCtl{ctr: ctr, ready: func(ctx context.Context) error { return clusterReady(ctx, addr) }}
	if err := assignSlots(ctx, addr); err != nil {
		_ = ctl.terminate()
		return nil, err
	}
	return &Server{Kind: KindRedisCluster, Source: "testcontainers image " + image + " (one-node cluster)", Addrs: []string{addr}, ctl: ctl}, nil
}

// clusterProcess runs a one-node Redis Cluster as a child process.
func clusterProcess(ctx context.Context) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := newRedisProcess(ctx, clusterArgs(port), port)
	if err != nil {
		return nil, err
	}
	if err := assignSlots(ctx, p.addr); err != nil {
		_ = p.terminate()
		return nil, err
	}
	p.ready = func(ctx context.Context) error { return clusterReady(ctx, p.addr) }
	return &Server{Kind: KindRedisCluster, Source: "child process " + p.bin + " (one-node cluster)", Addrs: []string{p.addr}, ctl: p}, nil
}

// assignSlots gives every hash slot to the node at addr and waits until
// the cluster reports ok.
func assignSlots(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := retry(ctx, func(ctx context.Context) error { return c.Ping(ctx).Err() }); err != nil {
		return err
	}
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		return fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
	}
	return retry(ctx, func(ctx context.Context) error { return clusterReady(ctx, addr) })
}

// clusterReady checks that the cluster at addr serves every slot.
func clusterReady(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster_state is not ok yet")
	}
	return nil
}

// redisProc is a redis-server child process on a fixed loopback port,
// restartable with the same arguments.
type redisProc struct {
	bin, dir, addr string
	args           []string
	proc           *child // nil while stopped
	ready          func(ctx context.Context) error
}

// newRedisProcess starts redis-server with extra arguments on port (or a
// free one) in a private directory.
func newRedisProcess(ctx context.Context, extra []string, port ...int) (*redisProc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: redis-server not found on PATH", errNone)
	}
	p := &redisProc{bin: bin}
	if len(port) == 0 {
		n, err := freePort()
		if err != nil {
			return nil, err
		}
		port = []int{n}
	}
	if p.dir, err = os.MkdirTemp("", "sluice-redis-"); err != nil {
		return nil, err
	}
	p.addr = "127.0.0.1:" + strconv.Itoa(port[0])
	if extra == nil {
		extra = redisArgs
	}
	p.args = append([]string{"--port", strconv.Itoa(port[0]), "--bind", "127.0.0.1", "--dir", p.dir}, extra...)
	p.ready = func(ctx context.Context) error { return pingRedis(ctx, p.addr) }
	if err := p.start(ctx); err != nil {
		_ = p.terminate()
		return nil, err
	}
	return p, nil
}

func (p *redisProc) start(ctx context.Context) error {
	logPath := filepath.Join(p.dir, "redis.log")
	proc, err := startChild(exec.Command(p.bin, p.args...), logPath)
	if err != nil {
		return err
	}
	p.proc = proc
	return retry(ctx, func(ctx context.Context) error {
		if proc.exited() {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server exited: %s", tailText(log))
		}
		return p.ready(ctx)
	})
}

// stop kills the server, as a crash would, and returns once it has been
// reaped.
func (p *redisProc) stop(ctx context.Context) error {
	if p.proc == nil {
		return nil
	}
	err := p.proc.stop(ctx, os.Kill, 0)
	p.proc = nil
	return err
}

func (p *redisProc) terminate() error {
	err := p.stop(context.Background())
	return errors.Join(err, os.RemoveAll(p.dir))
}

// tailText returns the last lines of a log for an error message.
func tailText(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/policy"
)

const serveSynopsis = `Serve rate-limit decisions for gateways:
  gRPC   envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (Envoy, Istio, Contour, Gloo)
  HTTP   POST /json (envoyproxy/ratelimit's JSON API)
         GET  /forward-auth?domain=D (Caddy forward_auth, Traefik ForwardAuth, nginx auth_request)
  admin  /metrics (Prometheus), /healthz, /readyz (ready when the store takes a write)
The rules (envoy ratelimit YAML with Sluice extensions) come from -rules, a
file or a directory, or from -rules-postgres, the RateLimitRule table of
policy/pgrules, and are reloaded when they change; invalid new rules
are refused and the previous ones stay. SIGINT or SIGTERM drains in-flight
calls for up to -shutdown-timeout, then exits 0.`

// serveConfig is every flag of sluice serve.
type serveConfig struct {
	rules     string
	rulesPG   string
	watch     bool
	grpcAddr  string
	httpAddr  string
	adminAddr string

	backend         string
	redisAddrs      listFlag
	redisUsername   string
	redisPassword   string
	redisDB         int
	postgresDSN     string
	postgresMigrate bool
	clusterBind     string
	clusterName     string
	clusterSeeds    listFlag
	clusterSecret   string

	tlsCert     string
	tlsKey      string
	tlsClientCA string

	trustedProxies listFlag
	faDomain       string
	faDescriptors  string

	maxDescriptors  int
	maxBodyBytes    int64
	maxHits         int64
	shutdownTimeout time.Duration

	// memoryClock, set by tests only, is the memory store's clock.
	memoryClock ratelimit.Clock
	logFormat   string
	logLevel    string
	otel        bool
}

func newServeFlags(stderr io.Writer) (*serveConfig, *flag.FlagSet) {
	c := &serveConfig{}
	fs := newFlagSet("serve", serveSynopsis, stderr)
	fs.StringVar(&c.rules, "rules", "", "rules file or directory of YAML files (required)")
	fs.StringVar(&c.rulesPG, "rules-postgres", "", "PostgreSQL connection string of the RateLimitRule table to take the rules from, instead of -rules")
	fs.BoolVar(&c.watch, "watch", true, "reload the rules when their files or table rows change")
	fs.StringVar(&c.grpcAddr, "grpc-addr", ":8081", "gRPC listen address (RLS v3); empty disables")
	fs.StringVar(&c.httpAddr, "http-addr", ":8080", "HTTP listen address (/json, /forward-auth); empty disables")
	fs.StringVar(&c.adminAddr, "admin-addr", "", "listen address of /metrics, /healthz, /readyz; empty serves them on -http-addr")
	fs.StringVar(&c.backend, "backend", "memory", "store: memory, redis, redis-cluster, postgres or cluster (gossip)")
	fs.Var(&c.redisAddrs, "redis-addrs", "Redis address(es) host:port, comma-separated (redis, redis-cluster)")
	fs.StringVar(&c.redisUsername, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&c.redisPassword, "redis-password", "", "Redis password")
	fs.IntVar(&c.redisDB, "redis-db", 0, "Redis database number (redis)")
	fs.StringVar(&c.postgresDSN, "postgres-dsn", "", "PostgreSQL connection string (postgres)")
	fs.BoolVar(&c.postgresMigrate, "postgres-migrate", true, "create the store's table (postgres) and the RateLimitRule table (-rules-postgres) at startup if missing")
	fs.StringVar(&c.clusterBind, "cluster-bind", "127.0.0.1:7946", "gossip bind address host:port (cluster)")
	fs.StringVar(&c.clusterName, "cluster-name", "", "node name, unique in the cluster; empty uses the host name (cluster)")
	fs.Var(&c.clusterSeeds, "cluster-seeds", "host:port of members to join, comma-separated; empty starts a new cluster (cluster)")
	fs.StringVar(&c.clusterSecret, "cluster-secret-file", "", "file holding the 16, 24 or 32-byte gossip key (cluster)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM certificate for the gRPC and HTTP listeners; re-read when it changes")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "PEM CA bundle: require client certificates it signed (mTLS)")
	fs.Var(&c.trustedProxies, "trusted-proxies", "CIDRs or IPs whose X-Forwarded-For is believed by /forward-auth, comma-separated")
	fs.StringVar(&c.faDomain, "forward-auth-domain", "", "domain of /forward-auth requests without ?domain=")
	fs.StringVar(&c.faDescriptors, "forward-auth-descriptors", "remote_address",
		"descriptors /forward-auth builds: ';' between descriptors, ',' between entries; sources remote_address, method, path, host, header:<Name>; '=key' renames")
	fs.IntVar(&c.maxDescriptors, "max-descriptors", defaultLimits.maxDescriptors, "most descriptors in one request")
	fs.Int64Var(&c.maxBodyBytes, "max-body-bytes", defaultLimits.maxBodyBytes, "largest /json body or gRPC message, in bytes")
	fs.Int64Var(&c.maxHits, "max-hits", defaultLimits.maxHits, "largest hits_addend")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long shutdown waits for in-flight calls")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&c.otel, "otel", false, "report decisions to the global OpenTelemetry providers; the stock binary links no exporter, so this reports nothing unless sluice is built with one (docs/otel.md)")
	return c, fs
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, fs := newServeFlags(stderr)
	if err := parseFlags(fs, args, getenv); err != nil {
		return usageCode(err)
	}
	log, err := newLogger(stderr, cfg.logFormat, cfg.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitUsage
	}
	if (cfg.rules == "") == (cfg.rulesPG == "") {
		fmt.Fprintln(stderr, "sluice serve: exactly one of -rules and -rules-postgres is required")
		fs.Usage()
		return exitUsage
	}
	srv, err := newServer(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		if errors.Is(err, errConfig) {
			return exitInvalidConfig
		}
		return exitFailure
	}
	if err := srv.serve(ctx); err != nil {
		log.Error("serve failed", "error", err)
		return exitFailure
	}
	return exitOK
}

// errConfig marks startup errors caused by a file or flag value (exit 3).
var errConfig = errors.New("invalid configuration")

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// server is a running sluice serve: its store, engine and listeners.
type server struct {
	cfg     *serveConfig
	log     *slog.Logger
	store   ratelimit.Store
	closers []func() error // run in reverse order at the end
	engine  *policy.Engine
	svc     *service
	metrics *metrics
	ready   atomic.Bool
	certs   *certReloader // nil without TLS

	grpc                    *grpc.Server
	http, admin             *http.Server
	grpcLn, httpLn, adminLn net.Listener
}

// newServer opens the store, loads the rules and binds every listener;
// serve then serves them. On error everything opened is closed.
func newServer(ctx context.Context, cfg *serveConfig, log *slog.Logger) (_ *server, err error) {
	s := &server{cfg: cfg, log: log, metrics: newMetrics(cfg.backend)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	limits := requestLimits{maxDescriptors: cfg.maxDescriptors, maxEntries: defaultLimits.maxEntries,
		maxBodyBytes: cfg.maxBodyBytes, maxHits: cfg.maxHits}
	if limits.maxDescriptors < 1 || limits.maxBodyBytes < 1 || limits.maxHits < 1 {
		return nil, fmt.Errorf("%w: -max-descriptors, -max-body-bytes and -max-hits must be positive", errConfig)
	}
	s.store, err = openStore(ctx, cfg, log, &s.closers)
	if err != nil {
		return nil, err
	}
	engineOpts, err := engineOptions(cfg.otel)
	if err != nil {
		return nil, err
	}
	if cfg.rulesPG != "" {
		s.engine, err = openTableRules(ctx, cfg.rulesPG, cfg.postgresMigrate, s.store, cfg.watch, s.metrics, log, &s.closers, engineOpts...)
	} else {
		s.engine, err = openRules(cfg.rules, s.store, cfg.watch, s.metrics, log, &s.closers, engineOpts...)
	}
	if err != nil {
		return nil, err
	}
	// Open the store's connections now, so the first decisions do not
	// pay for the dial; a store that does not answer or take writes yet
	// is not fatal (/readyz reports it).
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := probeStore(pctx, s.store); err != nil {
		log.Warn("store not ready: the readiness probe's write failed", "backend", cfg.backend, "error", err)
	}
	cancel()
	s.svc = &service{engine: s.engine, metrics: s.metrics, log: log, limits: limits}

	trusted, err := parsePrefixes(cfg.trustedProxies)
	if err != nil {
		return nil, fmt.Errorf("%w: -trusted-proxies: %w", errConfig, err)
	}
	fa, err := newForwardAuth(cfg.faDomain, cfg.faDescriptors, trusted)
	if err != nil {
		return nil, fmt.Errorf("%w: -forward-auth-descriptors: %w", errConfig, err)
	}

	var certs *certReloader
	if cfg.tlsCert != "" || cfg.tlsKey != "" || cfg.tlsClientCA != "" {
		if certs, err = newCertReloader(cfg.tlsCert, cfg.tlsKey, cfg.tlsClientCA, log); err != nil {
			return nil, fmt.Errorf("%w: %w", errConfig, err)
		}
		s.certs = certs
	}

	admin := http.NewServeMux()
	admin.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{Registry: s.metrics.registry}))
	admin.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	admin.HandleFunc("GET /readyz", s.handleReady)

	if cfg.grpcAddr != "" {
		opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(min(cfg.maxBodyBytes, 1<<30)))}
		if certs != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(certs.config("h2"))))
		}
		s.grpc = grpc.NewServer(opts...)
		rlsv3.RegisterRateLimitServiceServer(s.grpc, &rlsServer{svc: s.svc})
		if s.grpcLn, err = net.Listen("tcp", cfg.grpcAddr); err != nil {
			return nil, err
		}
	}
	if cfg.httpAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/json", s.svc.handleJSON)
		mux.Handle("/forward-auth", s.svc.handleForwardAuth(fa))
		if cfg.adminAddr == "" {
			mux.Handle("/", admin)
		}
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		if s.httpLn, err = net.Listen("tcp", cfg.httpAddr); err != nil {
			return nil, err
		}
		if certs != nil {
			s.httpLn = tlsListener(s.httpLn, certs.config("h2", "http/1.1"))
		}
	}
	if cfg.adminAddr != "" {
		s.admin = &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second}
		if s.adminLn, err = net.Listen("tcp", cfg.adminAddr); err != nil {
			return nil, err
		}
	}
	if s.grpc == nil && s.http == nil {
		return nil, fmt.Errorf("%w: both -grpc-addr and -http-addr are empty", errConfig)
	}
	s.ready.Store(true)
	return s, nil
}

// handleReady answers 200 when the store takes a unit from the probe key
// (probeStore) within a second, 503 otherwise and while shutting down.
func (s *server) handleReady(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if err := probeStore(ctx, s.store); err != nil {
		http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// serve serves until ctx is done, then stops accepting, drains in-flight
// calls for up to the shutdown timeout and closes the store.
func (s *server) serve(ctx context.Context) error {
	errs := make(chan error, 3)
	started := 0
	if s.grpc != nil {
		started++
		go func() { errs <- s.grpc.Serve(s.grpcLn) }()
		s.log.Info("serving gRPC", "addr", s.grpcLn.Addr().String())
	}
	if s.http != nil {
		started++
		go func() { errs <- s.http.Serve(s.httpLn) }()
		s.log.Info("serving HTTP", "addr", s.httpLn.Addr().String())
	}
	if s.admin != nil {
		started++
		go func() { errs <- s.admin.Serve(s.adminLn) }()
		s.log.Info("serving admin", "addr", s.adminLn.Addr().String())
	}
	var err error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "timeout", s.cfg.shutdownTimeout)
	case err = <-errs:
		started--
	}
	s.shutdown()
	for ; started > 0; started-- {
		if e := <-errs; e != nil && !errors.Is(e, http.ErrServerClosed) && !errors.Is(e, grpc.ErrServerStopped) && err == nil {
			err = e
		}
	}
	s.close()
	return err
}

// shutdown stops the listeners and waits for in-flight calls, forcing
// them closed after the shutdown timeout.
func (s *server) shutdown() {
	s.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.shutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s.http != nil {
			if err := s.http.Shutdown(ctx); err != nil {
				s.log.Warn("HTTP drain cut short", "error", err)
				_ = s.http.Close()
			}
		}
		if s.admin != nil {
			_ = s.admin.Shutdown(ctx)
		}
	}()
	if s.grpc != nil {
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			s.log.Warn("gRPC drain cut short")
			s.grpc.Stop()
		}
	}
	<-done
}

// close releases the store and the rules watcher.
func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil {
			s.log.Warn("close", "error", err)
		}
	}
	s.closers = nil
	for _, ln := range []net.Listener{s.grpcLn, s.httpLn, s.adminLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// hostPort splits "host:port" for flags that need the parts.
func hostPort(addr string) (string, string, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(addr))
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: %w", errConfig, addr, err)
	}
	return host, port, nil
}

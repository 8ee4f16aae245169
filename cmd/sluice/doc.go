// Command sluice is the Sluice rate-limit service and its tools, for
// gateways that are not written in Go.
//
//	sluice serve    -rules DIR [-backend memory|redis|redis-cluster|postgres|cluster] ...
//	sluice validate -rules DIR
//	sluice loadtest -protocol grpc|json|forward-auth -addr 127.0.0.1:8081 -domain D ...
//
// serve answers, on one process:
//   - Envoy's rate limit service, envoy.service.ratelimit.v3.RateLimitService/
//     ShouldRateLimit over gRPC, as envoyproxy/ratelimit answers it (statuses
//     per descriptor with current_limit, limit_remaining and
//     duration_until_reset; unlimited and shadow-mode rules; hits_addend),
//     plus the draft-11 RateLimit and RateLimit-Policy fields and
//     Retry-After in response_headers_to_add;
//   - envoyproxy/ratelimit's POST /json, with the same JSON (200 or 429);
//   - GET /forward-auth for Caddy forward_auth, Traefik ForwardAuth and nginx
//     auth_request: descriptors built from the forwarded request (client IP
//     behind -trusted-proxies, headers, method, path), 200 to pass, 429 with
//     the fields and a problem+json body to deny;
//   - /metrics (Prometheus), /healthz and /readyz (ready while the store
//     takes a write to a probe key of its own), on the HTTP listener or
//     apart on -admin-addr.
//   - with -otel, every decision also reported to the global OpenTelemetry
//     providers (package sluiceotel). This binary links no exporter, so
//     -otel alone reports nothing: a build that registers exporters
//     configures them from the OTEL_* environment (docs/otel.md).
//
// The rules are envoyproxy/ratelimit's YAML with Sluice's extensions
// (package policy), reloaded when their files change. All descriptors of a
// request are decided as one atomic step: a denied request consumes
// nothing from any rule. A request that is malformed, too large (over
// -max-descriptors, -max-body-bytes, -max-hits), for an empty or unknown
// domain, with an empty key, or with a per-descriptor limit override is
// refused (gRPC InvalidArgument, HTTP 400 problem+json) and consumes
// nothing. TLS and mTLS (-tls-cert, -tls-key,
// -tls-client-ca) cover the gRPC and HTTP listeners; the files are re-read
// when they change. SIGINT or SIGTERM drains in-flight calls.
//
// Every flag is also read from SLUICE_<FLAG> (upper case, '-' as '_'); the
// command line wins. Exit codes: 0 success, 1 runtime failure, 2 usage
// error, 3 invalid configuration.
//
// examples/gateway shows a deployment with Caddy and Redis.
package main

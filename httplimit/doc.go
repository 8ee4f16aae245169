// Package httplimit rate-limits HTTP servers and makes HTTP clients back
// off, speaking the standards on both sides.
//
// On the server, Middleware decides each request with a sluice.Limiter,
// a sluice.Composite (several rules, atomically) or any DecideFunc, such
// as a policy engine's:
//
//	lim, _ := sluice.New(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerMinute(60)})
//	limit := httplimit.Middleware(httplimit.ByLimiter(lim, httplimit.ClientIP()))
//	http.ListenAndServe(":8080", limit(mux))
//
// Keys come from a Key: ClientIP (forwarding headers believed only from
// trusted proxies, IPv6 grouped by /64), Header (an API key),
// FromContext (the authenticated user), Pattern (the route), Method,
// and FirstOf and Join to combine them.
//
// Every response the middleware decides carries the RateLimit and
// RateLimit-Policy fields of draft-ietf-httpapi-ratelimit-headers-11
// (structured-field Lists, one item per rule); WithHeaders adds the older
// RateLimit-Limit/-Remaining/-Reset trio or X-RateLimit-*. A refusal is:
//
//   - 429 with Retry-After (whole seconds, rounded up, at least 1) when a
//     rule denies;
//   - 413 without Retry-After when the request's cost exceeds a rule's
//     burst, so that no wait would let it pass, and 403 when a rule
//     admits nothing at all (a policy's requests_per_unit: 0);
//   - 503 with Retry-After when a fail-closed rule's store failed (a
//     fail-open rule lets the request through), never 500;
//   - 400 when a Key finds nothing (ErrNoKey) or the input is invalid.
//
// Each comes with an RFC 9457 application/problem+json body (the
// draft's quota-exceeded type with violated-policies for 429 and 413), or
// with WithDenyHandler's own answer. WithShadowMode decides and reports
// without refusing. Formatter writes the same fields, with the same code,
// for decisions made elsewhere (a rate-limit service answering a gateway,
// say). docs/http.md gives the field formats and bounds.
//
// On the client, Transport is an http.RoundTripper that retries 429 and
// 503 answers no earlier than their Retry-After, with exponential backoff
// and full jitter, only for requests that are safe to repeat, and that
// slows down before the quota runs out when RateLimit says it is nearly
// spent.
//
// Middleware and Transport are safe for concurrent use.
package httplimit

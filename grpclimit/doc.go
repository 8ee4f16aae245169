// Package grpclimit rate-limits gRPC servers with Sluice and makes gRPC
// clients back off when they are limited.
//
// On the server, UnaryServerInterceptor and StreamServerInterceptor decide
// each call (each stream, when it opens) with a sluice.Limiter or a
// sluice.Composite before the handler runs:
//
//	lim, _ := sluice.New(sluice.Rule{Name: "rpc", Algorithm: gcra.New(), Limit: sluice.PerSecond(100)})
//	d := grpclimit.ByLimiter(lim, grpclimit.PeerAddress(64))
//	srv := grpc.NewServer(grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(d)),
//		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(d)))
//
// Keys come from PeerAddress (IPv6 grouped by prefix), Metadata (an API
// key), Method, or Join of those. A refusal is:
//
//   - codes.ResourceExhausted with errdetails.RetryInfo (the wait before
//     the call can pass) and errdetails.QuotaFailure (one violation per
//     denying rule, subject "policy:<rule name>") when a rule denies;
//   - codes.ResourceExhausted with QuotaFailure and no RetryInfo when the
//     call's cost exceeds a rule's burst, so that no wait would help;
//   - codes.Unavailable with RetryInfo when a fail-closed rule's store
//     failed (a fail-open rule lets the call through);
//   - codes.InvalidArgument when a Key finds nothing (ErrNoKey) or the
//     input is invalid.
//
// WithShadowMode decides without refusing; WithCost weighs calls.
//
// On the client, UnaryClientInterceptor retries ResourceExhausted and
// Unavailable answers no earlier than their RetryInfo, with the same
// exponential backoff and full jitter as httplimit.Transport (one shared
// implementation), capped in attempts and time and bounded by the call's
// context; StreamClientInterceptor does the same for server-streaming
// calls refused when they open.
//
// The interceptors are safe for concurrent use.
package grpclimit

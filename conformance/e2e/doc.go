// Package e2e runs the conformance suite on every in-repo store against
// real servers: Redis, a Redis Cluster and PostgreSQL found or started by
// package testenv (environment addresses, testcontainers-go, or child
// processes), the memory store, and the gossip cluster in process. The
// package has no non-test code.
//
// It is its own module so that testcontainers-go and the server clients
// stay out of every other module's dependencies. Run it from the
// repository root with the README's test command, or alone with
//
//	go test -race github.com/sluicehq/sluice/conformance/e2e/...
package e2e

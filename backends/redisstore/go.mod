module github.com/sluicehq/sluice/backends/redisstore

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/sluicehq/sluice/conformance v0.1.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/sluicehq/sluice/conformance => ../../conformance

require github.com/sluicehq/sluice v0.1.0

replace github.com/sluicehq/sluice => ../..

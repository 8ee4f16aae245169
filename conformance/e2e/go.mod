module github.com/sluicehq/sluice/conformance/e2e

go 1.26.0

require (
	github.com/sluicehq/sluice/algorithms v0.0.0
	github.com/sluicehq/sluice/backends/pgstore v0.0.0
	github.com/sluicehq/sluice/backends/redisstore v0.0.0
	github.com/sluicehq/sluice/cluster v0.0.0
	github.com/sluicehq/sluice/conformance v0.0.0
	github.com/sluicehq/sluice/core v0.0.0
)

replace (
	github.com/sluicehq/sluice/algorithms => ../../algorithms
	github.com/sluicehq/sluice/backends/pgstore => ../../backends/pgstore
	github.com/sluicehq/sluice/backends/redisstore => ../../backends/redisstore
	github.com/sluicehq/sluice/cluster => ../../cluster
	github.com/sluicehq/sluice/conformance => ..
	github.com/sluicehq/sluice/core => ../../core
)

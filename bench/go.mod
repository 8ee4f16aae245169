module github.com/sluicehq/sluice/bench

go 1.26.0

require (
	github.com/sethvargo/go-limiter v0.7.1
	github.com/sluicehq/sluice/algorithms v0.0.0
	github.com/sluicehq/sluice/core v0.0.0
	github.com/ulule/limiter/v3 v3.11.2
	golang.org/x/time v0.16.0
)

require github.com/pkg/errors v0.9.1 // indirect

replace (
	github.com/sluicehq/sluice/algorithms => ../algorithms
	github.com/sluicehq/sluice/backends/pgstore => ../backends/pgstore
	github.com/sluicehq/sluice/backends/redisstore => ../backends/redisstore
	github.com/sluicehq/sluice/cluster => ../cluster
	github.com/sluicehq/sluice/core => ../core
)

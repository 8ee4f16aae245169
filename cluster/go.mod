module github.com/sluicehq/sluice/cluster

go 1.26.0

require (
	github.com/sluicehq/sluice/algorithms v0.0.0
	github.com/sluicehq/sluice/core v0.0.0
)

replace (
	github.com/sluicehq/sluice/algorithms => ../algorithms
	github.com/sluicehq/sluice/core => ../core
)

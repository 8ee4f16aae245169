module github.com/sluicehq/sluice/conformance

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/sluicehq/sluice/algorithms v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/core v0.0.0
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)

replace (
	github.com/sluicehq/sluice/algorithms => ../algorithms
	github.com/sluicehq/sluice/core => ../core
)

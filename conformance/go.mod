module github.com/sluicehq/sluice/conformance

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)

require github.com/sluicehq/sluice v0.1.0

replace github.com/sluicehq/sluice => ..

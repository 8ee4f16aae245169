module github.com/sluicehq/sluice/httplimit

go 1.26.0

require github.com/dunglas/httpsfv v1.1.2

require github.com/sluicehq/sluice v0.1.0

replace github.com/sluicehq/sluice => ..

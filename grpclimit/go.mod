module github.com/sluicehq/sluice/grpclimit

go 1.26.0

require github.com/sluicehq/sluice v0.1.0

replace github.com/sluicehq/sluice => ..

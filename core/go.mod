module github.com/sluicehq/sluice/core

go 1.26.0

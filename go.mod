module github.com/sluicehq/sluice

go 1.26.0

module github.com/sluicehq/sluice/policy

go 1.26.0

require github.com/sluicehq/sluice v0.1.0

require go.yaml.in/yaml/v3 v3.0.6

replace github.com/sluicehq/sluice => ..

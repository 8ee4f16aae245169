module github.com/sluicehq/sluice/policy

go 1.26.0

require github.com/sluicehq/sluice v0.1.0

require (
	github.com/fsnotify/fsnotify v1.10.1
	go.yaml.in/yaml/v3 v3.0.6
)

require golang.org/x/sys v0.13.0 // indirect

replace github.com/sluicehq/sluice => ..

module github.com/sluicehq/sluice/httplimit

go 1.26.0

require github.com/dunglas/httpsfv v1.1.2

require github.com/sluicehq/sluice v0.1.0

replace github.com/sluicehq/sluice => ..

require github.com/sluicehq/sluice/policy v0.1.0

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.13.0 // indirect
)

replace github.com/sluicehq/sluice/policy => ../policy

module github.com/sluicehq/sluice/policy/pgrules

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/sluicehq/sluice v0.1.0
	github.com/sluicehq/sluice/policy v0.1.0
)

replace (
	github.com/sluicehq/sluice => ../..
	github.com/sluicehq/sluice/policy => ..
)

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

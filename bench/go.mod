module github.com/sluicehq/sluice/bench

go 1.26.0

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/sethvargo/go-limiter v0.7.1
	github.com/sluicehq/sluice/backends/redisstore v0.1.0
	github.com/ulule/limiter/v3 v3.11.2
	golang.org/x/time v0.16.0
)

require (
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sluicehq/sluice/backends/pgstore v0.1.0
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace (
	github.com/sluicehq/sluice/backends/pgstore => ../backends/pgstore
	github.com/sluicehq/sluice/backends/redisstore => ../backends/redisstore
	github.com/sluicehq/sluice/cluster => ../cluster
)

replace github.com/sluicehq/sluice/conformance => ../conformance

require github.com/sluicehq/sluice v0.1.0

replace github.com/sluicehq/sluice => ..

require github.com/sluicehq/sluice/httplimit v0.1.0

replace github.com/sluicehq/sluice/httplimit => ../httplimit

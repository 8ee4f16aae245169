module github.com/sluicehq/sluice/examples

go 1.26.0

require (
	github.com/sluicehq/sluice/cluster v0.1.0
	github.com/sluicehq/sluice/policy v0.1.0
)

require (
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-immutable-radix v1.3.1 // indirect
	github.com/hashicorp/go-metrics v0.7.0 // indirect
	github.com/hashicorp/go-msgpack/v2 v2.1.5 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/hashicorp/go-sockaddr v1.0.7 // indirect
	github.com/hashicorp/golang-lru v1.0.2 // indirect
	github.com/hashicorp/memberlist v0.7.0 // indirect
	github.com/miekg/dns v1.1.73 // indirect
	github.com/sean-/seed v0.0.0-20170313163322-e2103e2c3529 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace (
	github.com/sluicehq/sluice/cluster => ../cluster
	github.com/sluicehq/sluice/conformance => ../conformance
	github.com/sluicehq/sluice/policy => ../policy
)

require github.com/sluicehq/sluice v0.1.0

replace github.com/sluicehq/sluice => ..

require github.com/sluicehq/sluice/httplimit v0.1.0

replace github.com/sluicehq/sluice/httplimit => ../httplimit

#!/usr/bin/env bash
# outside-module.sh proves the README's workspace recipe ("Use it in your
# project") from outside the repository. In a temporary directory it
# creates a module of its own, example.com/yourapp, whose program and test
# use every library module of Sluice; puts this checkout beside it as
# ./sluice (the recipe's clone, uncommitted changes included); runs the
# recipe's `go work init` and `go work use`; and builds, vets and runs the
# program.
#
# The Sluice modules must come from the workspace: GOPRIVATE keeps the go
# command off the module proxy and checksum database for them and GOVCS
# forbids cloning them, so a module the workspace does not provide fails
# the build instead of being downloaded (the proxy has no release of them
# before the tags are pushed). Third-party modules (go-redis, pgx,
# memberlist) come from the module proxy or cache as usual.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)

# The recipe's module directories, relative to the clone.
library_modules=(. backends/redisstore backends/pgstore cluster conformance policy policy/pgrules httplimit grpclimit sluiceotel)

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-outside.XXXXXX")
trap 'rm -rf "$work"' EXIT
case "$work/" in "$repo"/*) echo "outside-module: $work is inside the repository" >&2; exit 1 ;; esac

unset GOWORK
export GOFLAGS=-mod=readonly
export GOPRIVATE=github.com/sluicehq GOVCS=github.com/sluicehq:off

echo "scratch directory: $work (Sluice from $repo)"
cd "$work"
ln -s "$repo" sluice
mkdir yourapp

cat >yourapp/main.go <<'EOF'
// Command yourapp uses every library module of Sluice the way a dependent
// does: it decides on the embedded memory store and on a gossip node on
// loopback, and builds the Redis and PostgreSQL stores, which send nothing
// before their first decision.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	_ "github.com/sluicehq/sluice/policy"
	_ "github.com/sluicehq/sluice/policy/pgrules"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/httplimit"
	_ "github.com/sluicehq/sluice/sluiceotel"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	rule := sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerMinute(6).WithBurst(2)}

	mem, err := memstore.New()
	if err != nil {
		return err
	}
	cfg := cluster.DefaultLocalConfig()
	cfg.Name = "yourapp"
	node, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	defer node.Close()

	for _, s := range []struct {
		name  string
		store ratelimit.Store
	}{{"memory", mem}, {"cluster", node}} {
		lim, err := sluice.New(rule, sluice.WithStore(s.store))
		if err != nil {
			return err
		}
		allowed := 0
		for range 3 {
			d, err := lim.Allow(ctx, "user-1")
			if err != nil {
				return err
			}
			if d.Allowed {
				allowed++
			}
		}
		fmt.Printf("%s store: %d of 3 calls allowed (burst 2)\n", s.name, allowed)
	}

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	if _, err := redisstore.New(rdb); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, "postgres://127.0.0.1:5432/yourapp")
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pgstore.New(pool); err != nil {
		return err
	}
	fmt.Println("redis and postgres stores built")

	edge, err := sluice.New(rule, sluice.WithStore(mem))
	if err != nil {
		return err
	}
	_ = httplimit.Middleware(httplimit.ByLimiter(edge, httplimit.ClientIP()))
	_ = grpclimit.UnaryServerInterceptor(grpclimit.ByLimiter(edge, grpclimit.Method()))
	fmt.Println("HTTP middleware and gRPC interceptor built")

	_, err = sluice.New(sluice.Rule{Name: "api", Algorithm: gcra.New()})
	if !errors.Is(err, ratelimit.ErrInvalid) {
		return fmt.Errorf("a rule without a limit: got %v, want ratelimit.ErrInvalid", err)
	}
	return nil
}
EOF

cat >yourapp/main_test.go <<'EOF'
package main

import (
	"testing"

	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestStore runs the conformance suite, as a contributed store would.
func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{NewStore: func(t *testing.T) ratelimit.Store {
		st, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}})
}
EOF

(cd yourapp && go mod init example.com/yourapp 2>/dev/null)

use_dirs=()
for m in "${library_modules[@]}"; do
	if [ "$m" = . ]; then use_dirs+=(./sluice); else use_dirs+=("./sluice/$m"); fi
done
echo "+ go work init ./yourapp"
go work init ./yourapp
echo "+ go work use ${use_dirs[*]}"
go work use "${use_dirs[@]}"
cat go.work

cd yourapp
# The program imports go-redis and pgx itself, so it requires them, at the
# versions the workspace already selects.
third_party=()
for m in github.com/redis/go-redis/v9 github.com/jackc/pgx/v5; do
	third_party+=("$m@$(go list -m -f '{{.Version}}' "$m")")
done
echo "+ go get ${third_party[*]}"
go get "${third_party[@]}"

echo "+ go build ./... && go vet ./..."
go build ./...
go vet ./...

echo "modules providing the program's Sluice packages:"
provided=$(go list -deps -test -f '{{with .Module}}{{.Path}} {{.Dir}}{{end}}' ./... |
	grep '^github.com/sluicehq/' | sort -u)
sed "s|$work/||; s|^|  |" <<<"$provided"
if [ "$(wc -l <<<"$provided")" -ne ${#library_modules[@]} ] || grep -qv " $work/sluice" <<<"$provided"; then
	echo "outside-module: want the ${#library_modules[@]} library modules, each from ./sluice" >&2
	exit 1
fi

echo "+ go run ."
go run .
echo "outside-module: ok"

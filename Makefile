# Sluice — common tasks. `make help` lists them.
# Every target that walks modules loops over every go.mod (bench/ and tools/
# are modules outside go.work).

SHELL := /bin/bash
MODULES := . backends/redisstore backends/pgstore cluster conformance conformance/e2e examples policy policy/pgrules httplimit grpclimit cmd/sluice sluiceotel
ALL_MODULES := $(MODULES) bench tools
PKGS := github.com/sluicehq/sluice/...
TEST_FLAGS ?= -race -shuffle=on -count=1
LINT := GOWORK=off go tool -modfile=$(CURDIR)/tools/go.mod golangci-lint
BENCHSTAT := GOWORK=off go tool -modfile=$(CURDIR)/tools/go.mod benchstat

.PHONY: help fmt lint vet tidy check-deps test test-modules outside conformance bench ci quickstart release

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

fmt: ## gofmt every module
	gofmt -w $(ALL_MODULES)

vet: ## go vet every workspace module
	go vet $(PKGS)

lint: ## gofmt check, go vet and golangci-lint v2 (pinned in tools/go.mod) on every module
	@test -z "$$(gofmt -l $(ALL_MODULES))" || { gofmt -l $(ALL_MODULES); echo "gofmt needed"; exit 1; }
	go vet $(PKGS)
	@set -e; for m in $(MODULES); do echo "lint $$m"; (cd $$m && $(LINT) run ./...); done

tidy: ## go mod tidy in every module; fails if anything changed
	@set -e; for m in $(ALL_MODULES); do (cd $$m && GOWORK=off go mod tidy); done
	@git diff --exit-code -- '*go.mod' '*go.sum' || { echo "go mod tidy changed files"; exit 1; }

check-deps: ## the root module (user API, contract, algorithms) imports only the standard library, tests included
	@test -z "$$(grep -E '^require' go.mod)" || { echo "go.mod must require nothing"; exit 1; }
	@bad=$$(GOWORK=off go list -deps -test -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./... | grep -vE '^github.com/sluicehq/sluice([/_.]|$$)' || true); \
	  test -z "$$bad" || { echo "the root module imports non-stdlib packages:"; echo "$$bad"; exit 1; }
	@echo "check-deps: the root module imports only the standard library"

test: ## the README's test command: every test of every workspace module
	go test $(TEST_FLAGS) $(PKGS)

test-modules: ## build and test each module alone (GOWORK=off)
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && GOWORK=off go build ./... && GOWORK=off go vet ./...); done

outside: ## build, vet and run a scratch module outside the repository through the README's workspace recipe
	scripts/outside-module.sh

conformance: ## run the conformance suites (algotest, storetest) and the e2e suite on real servers
	go test $(TEST_FLAGS) github.com/sluicehq/sluice/conformance/...

bench: ## side-by-side benchmarks against the competitors (bench/ module), with benchstat
	cd bench && GOWORK=off go test -run '^$$' -bench . -benchmem -count 6 ./... | tee /tmp/sluice-bench.txt
	$(BENCHSTAT) /tmp/sluice-bench.txt

quickstart: ## run the quickstart on the embedded store
	go run ./examples/quickstart

ci: ## what .ci/run does after installing servers
	bash .ci/run

release: ## tag every importable module: make release VERSION=v0.1.0 (siblings at VERSION, tidy, build, commit; never pushes)
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 1; }
	scripts/release.sh $(VERSION)

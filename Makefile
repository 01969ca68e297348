# weft: every target works on a fresh machine; `make test` installs what
# the tests need (haproxy, socat) when it is missing.
SHELL := /bin/bash
GO ?= go
MODULES := pkg/msg pkg/config pkg/haproxycfg pkg/svc pkg/testkit services/watcher services/renderer services/validator services/deployer services/puller cmd/weft
CONFIG ?= examples/quickstart/weft.yaml
TEST_FLAGS ?= -race -count=1 -timeout 15m
BENCH ?= .

.PHONY: run build test deps lint bench fuzz tidy

## run: weft in one process (embedded NATS on 127.0.0.1:4222) on the quickstart;
## with haproxy installed, also HAProxy on 127.0.0.1:18080 and echo backends.
## weft is built, then run as make's own child (no `go run` between them)
## with --exit-with-parent: a SIGTERM to make (as `timeout` or a CI runner
## sends) stops weft and HAProxy, and so does make being killed.
run:
	mkdir -p bin
	$(GO) build -o bin/weft ./cmd/weft
	exec bin/weft up --demo --exit-with-parent --config $(CONFIG)

## build: every binary into bin/
build:
	mkdir -p bin
	$(GO) build -o bin/weft ./cmd/weft
	$(GO) build -o bin/weft-watcher ./services/watcher/cmd/weft-watcher
	$(GO) build -o bin/weft-renderer ./services/renderer/cmd/weft-renderer
	$(GO) build -o bin/weft-validator ./services/validator/cmd/weft-validator
	$(GO) build -o bin/weft-deployer ./services/deployer/cmd/weft-deployer

## deps: what the tests need from the system
deps:
	@if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ] || ! command -v socat >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then \
		echo "installing haproxy, socat and redis-server"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq haproxy socat redis-server >/dev/null; \
	fi
	@# A real kube-apiserver, etcd and kube-controller-manager for envtest,
	@# built from their Go modules once per machine (cached by version).
	@hack/envtest/build.sh >/dev/null

## lint: formatting and vet over every module
lint:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

## test: lint, then every test of every module
test: deps lint
	@set -o pipefail; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) test $(TEST_FLAGS) ./...) || exit 1; done

## bench: the benchmarks (results and method in BENCHMARKS.md)
bench: deps
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem ./...) || exit 1; done

## fuzz: run each decoder fuzzer for a while
fuzz:
	@cd pkg/msg && for f in $$($(GO) test -list 'Fuzz.*' . | grep ^Fuzz); do $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 20s . || exit 1; done

## tidy: go mod tidy in every module
tidy:
	@for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy) || exit 1; done

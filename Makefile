# The one command surface: the README, .ci/run and developers all call these targets.
SHELL := /bin/bash
export CARGO_TERM_COLOR ?= never

.PHONY: test deps fmt-check clippy cargo-test

## Everything CI runs: formatting, lints, the template checks and all tests.
test: deps fmt-check clippy validate cargo-test

## Test-only tools: moto server (the offline AWS API the integration tests start).
deps: infra-deps

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

cargo-test:
	cargo test --workspace --all-targets

include infra/Makefile.inc

# The one command surface: the README, .ci/run and developers all call these targets.
SHELL := /bin/bash
export CARGO_TERM_COLOR ?= never

.PHONY: test deps fmt-check clippy cargo-test functions-alone bench chaos delivery-2m

## Everything CI runs: formatting, the SAM and CDK checks, and all tests built with the lints on.
## The SAM and CDK checks (about a minute, mostly npm's download and node) run beside the build,
## their output held in a log and shown when they end; either failing fails `make test`.
INFRA_CHECKS_LOG := target/infra-checks.log
test: deps fmt-check
	@mkdir -p $(dir $(INFRA_CHECKS_LOG))
	@$(MAKE) --no-print-directory validate cdk-check > $(INFRA_CHECKS_LOG) 2>&1 & checks=$$!; \
	$(MAKE) --no-print-directory cargo-test; tests=$$?; \
	wait $$checks; infra=$$?; cat $(INFRA_CHECKS_LOG); \
	[ $$infra -eq 0 ] || echo "make test: the SAM/CDK checks failed (above)"; \
	[ $$tests -eq 0 ] && [ $$infra -eq 0 ]

## Test-only tools: moto server (the offline AWS API the integration tests start) and warcio
## (the reference WARC reader the CLI tests check deliveries with).
## 5.2.5 at least: earlier 5.2 releases answer CompleteMultipartUpload with the wrong XML root
## element (getmoto/moto#10055), which the SDK rejects.
MOTO_MIN := 5.2.5
deps: infra-deps
	@python3 -c 'import moto.server, sys, importlib.metadata as m; sys.exit(tuple(int(x) for x in m.version("moto").split(".")[:3]) < tuple(int(x) for x in "$(MOTO_MIN)".split(".")))' 2>/dev/null \
		|| python3 -m pip install --quiet 'moto[server]>=$(MOTO_MIN)'
	@python3 -c 'import warcio' 2>/dev/null || python3 -m pip install --quiet 'warcio>=1.7'

fmt-check:
	cargo fmt --all -- --check

## The CLI's AWS backend is a feature, off by default (the local build skips the AWS SDK); the
## checks, the tests (which run `trawl --backend aws` against moto) and the bench build it.
CLI_AWS := --features trawl/aws

## Both CLI builds are linted, each over the whole workspace so that dependencies resolve the same
## features both times and only the crates that depend on the CLI are checked again.
clippy:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --workspace --all-targets $(CLI_AWS) -- -D warnings

## The tests' build is linted as `make clippy` lints: clippy's driver compiles the workspace's own
## crates (cargo's RUSTC_WORKSPACE_WRAPPER, with the arguments `cargo clippy -- -D warnings` would
## pass), so that the dependencies are built once instead of checked for clippy, then built.
LINTED := RUSTC_WORKSPACE_WRAPPER="$$(rustc --print sysroot)/bin/clippy-driver" \
	CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

## First the CLI without the AWS backend, as the README's demo builds it: only the `trawl` crate
## differs between the two builds, since the workspace links the SDK anyway.
## The CLI tests run the `trawl` binary itself, which `cargo test` does not build. Built with the
## test build's selection (the workspace, all targets, the same features), so that both resolve
## the same dependency features: `cargo build -p trawl` alone would build hyper, reqwest and serde
## a second time.
## Six test threads on two cores: the integration tests mostly wait (moto, sockets, the CLI's
## subprocesses); measured 2026-11-27 under load, the integration binary took 594 s at 2 threads,
## 438 s at 4 and 365 s at 6. The slowest tests' time limits bound each wait, not the whole test
## (the items handler test's 180 s, each delivery) or leave half their time (end_to_end's 300 s).
cargo-test: functions-alone
	$(LINTED) cargo build --workspace --all-targets
	$(LINTED) cargo build --workspace --all-targets $(CLI_AWS)
	$(LINTED) cargo test --workspace --all-targets $(CLI_AWS) -- --test-threads 6

## Each function checked (and linted) on its own, with only its own features, as `sam build` and
## `make bench` build it: the workspace build unifies every crate's features, so an import or a
## feature one function lacks alone would otherwise first fail at deploy time.
functions-alone:
	for f in $(FUNCTIONS); do $(LINTED) cargo check -p $$f || exit 1; done

## The 2,000,000-page delivery (#13): segmented, paused and resumed on the embedded backend.
delivery-2m:
	cargo test --release -p trawl-tests -- --ignored --nocapture delivering::two_million_pages

## Benchmarks (bench/README.md): BENCH_ARGS=--quick (under 3 min) or --json.
## Built with the functions' profile (`lambda-release`, Cargo.toml), so that figures compare with
## earlier runs; each function on its own, as `sam build` builds it (with its own features).
BENCH_PROFILE := lambda-release
FUNCTIONS := seeder crawler sweeper deliverer
bench: deps
	for f in $(FUNCTIONS); do cargo build --profile $(BENCH_PROFILE) -p $$f || exit 1; done
	cargo build --profile $(BENCH_PROFILE) -p trawl -p trawl-bench $(CLI_AWS)
	target/$(BENCH_PROFILE)/trawl-bench $(BENCH_ARGS)

## The chaos runs (bench/README.md, section 12): the embedded backend through port faults and
## crashes; `trawl --backend aws crawl` of 1,000 pages through the fault proxy (10% retryable
## errors, 5% lost responses) with 3 SIGKILLs; the same through the four Lambda handlers with
## duplicate deliveries. BENCH_ARGS=--quick for smaller crawls.
chaos: deps
	cargo build --profile $(BENCH_PROFILE) -p trawl -p trawl-bench $(CLI_AWS)
	target/$(BENCH_PROFILE)/trawl-bench --only chaos $(BENCH_ARGS)

include infra/Makefile.inc

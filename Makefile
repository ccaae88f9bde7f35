# gpuwarden: two commands to start. `make demo` runs the stack on a simulated fleet;
# `make test` installs what the tests need and runs them.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_ARGS ?=
# The published evaluation (about 6 min on 2 cores). The issue's full size is
# EVAL_ARGS="--jobs 2" (256 nodes x 24 h x 5 seeds; see docs/analyzer.md for its time).
EVAL_ARGS ?= --nodes 64 --hours 6 --seeds 5 --straggler-trials 6 --jobs 2
# Each worker starts its own servers on free ports. Three workers on two cores: most real-server tests wait on a server's timers (for:, group_wait,
# slurmctld's pings), so a third worker fills that time (11.5 min instead of 16 on 2026-12-06).
PYTEST_ARGS ?= -n 3
APT_PACKAGES := prometheus prometheus-alertmanager slurmctld slurmd slurm-client munge systemd openssl prometheus-node-exporter shellcheck victoria-metrics chromium

.PHONY: venv system-deps lab-servers test lint typecheck unit demo demo-check bench bench-prometheus evaluate dashboards rules dist image-test clean soak mutation

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/.installed

# Debian packages for the real-component tests; installed only when root and missing.
system-deps:
	@missing=""; for b in prometheus promtool prometheus-alertmanager amtool slurmctld slurmd munged systemd-analyze openssl prometheus-node-exporter shellcheck victoria-metrics chromium; do \
	  command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages (missing:$$missing)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; \
	  else echo "warning: missing$$missing (run as root to install $(APT_PACKAGES))"; fi; \
	fi
	@$(MAKE) --no-print-directory lab-servers

# The lab's real servers, built or fetched once into a cache outside the clone
# (~/.cache/gpuwarden-lab; README "Testing" says how long the first build takes): Kubernetes
# from its Go modules, helm, CRDs, and Debian unstable's Prometheus 3.5, Alertmanager 0.33,
# node_exporter 1.11, etcd and kubectl.
lab-servers:
	@if command -v go >/dev/null 2>&1; then bash tests/lab/servers.sh all; \
	else echo "warning: no Go toolchain: the Kubernetes lab cannot be built (its tests skip, and fail under CI)"; fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy common exporter simulator analyzer remediation accounting dashboards gpuwarden

test: venv system-deps lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

demo: venv
	@[ "$$(id -u)" != "0" ] || $(MAKE) --no-print-directory system-deps
	$(BIN)/gpuwarden demo $(DEMO_ARGS)

# The demo's whole story through the real Prometheus it starts, checked (about 5 minutes).
demo-check: venv system-deps
	$(BIN)/gpuwarden demo --duration 270 --check --no-slurm $(DEMO_ARGS)

bench: venv system-deps
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# Remediation's rails under 20,000 random interleavings (make test runs 200; docs/remediation.md)
# and kill -9 at 40 moments of a checkpoint_restart on the real slurmctld (make test: 8).
soak: venv system-deps
	GPUWARDEN_SOAK_EXAMPLES=20000 $(BIN)/pytest -q -p no:logging tests/remediation/test_invariants.py
	GPUWARDEN_CRASH_RUNS=40 $(BIN)/pytest -q -p no:logging tests/remediation/test_crash_checkpoint.py
	GPUWARDEN_CRASH_RUNS=40 $(BIN)/pytest -q -p no:logging tests/remediation/test_kube_service_real.py -k kill_9
	GPUWARDEN_EVENTS_SOAK_KILLS=40 $(BIN)/pytest -q -s -p no:logging tests/remediation/test_events_crash.py
	# the events path at 500 events/s for 10 minutes (issue 33): nothing lost, all decided
	BENCH_EVENT_SECONDS=600 BENCH_EVENT_BASELINE=0 $(BIN)/python -m benchmarks --only eventpath

# Mutation testing of remediation's guards, engine and executor ([tool.mutmut] in pyproject).
mutation: venv
	$(BIN)/pip install -q -e '.[mutation]'
	GPUWARDEN_SOAK_EXAMPLES=$${GPUWARDEN_SOAK_EXAMPLES:-3} $(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results

# the analyzer reading a real, promtool-backfilled Prometheus (BENCH_NODES=128,1024[,4096])
bench-prometheus: venv system-deps  # 128, 1,024 and 4,096 nodes: ~40 min the first time (backfill)
	BENCH_NODES=$${BENCH_NODES:-128,1024,4096} $(BIN)/python -m benchmarks --only analyzer-prometheus $(BENCH_ARGS)

evaluate: venv
	$(BIN)/gpuwarden evaluate $(EVAL_ARGS)

dashboards: venv
	$(BIN)/python -m dashboards

# A wheel and an sdist in dist/, built offline with the installed setuptools (no isolation,
# no index): what docs/deploy.md installs with pip and what the Containerfile copies.
dist: venv
	rm -rf dist build
	$(BIN)/python -c "from setuptools import build_meta as b; b.build_sdist('dist'); b.build_wheel('dist')"
	@ls -1 dist

# Build the Containerfile for real (podman, base file system from mmdebstrap; needs root,
# the Debian mirror and pip's index, a few minutes): tests/deploy/image_build.sh.
image-test: dist
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null || \
	  { [ "$$(id -u)" = "0" ] && apt-get install -y -qq --no-install-recommends podman buildah mmdebstrap >/dev/null; }
	tests/deploy/image_build.sh

# Regenerate what is generated from other sources (XID rules, dashboards, deploy, docs).
rules: venv
	$(BIN)/python alerts/generate_xid_rules.py
	$(BIN)/python alerts/generate_dcgm_rules.py
	$(BIN)/python alerts/generate_amd_rules.py
	$(BIN)/python alerts/generate_feature_rules.py
	$(BIN)/python -m dashboards
	$(BIN)/python deploy/generate.py --write
	$(BIN)/python -m gpuwarden.metricsdoc

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .demo dist build

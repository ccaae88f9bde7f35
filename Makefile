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
PYTEST_ARGS ?=
APT_PACKAGES := prometheus prometheus-alertmanager slurmctld slurmd slurm-client munge systemd openssl victoria-metrics

.PHONY: venv system-deps test lint typecheck unit demo bench bench-prometheus evaluate dashboards rules clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/.installed

# Debian packages for the real-component tests; installed only when root and missing.
system-deps:
	@missing=""; for b in prometheus promtool prometheus-alertmanager amtool slurmctld slurmd munged systemd-analyze openssl victoria-metrics; do \
	  command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages (missing:$$missing)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; \
	  else echo "warning: missing$$missing (run as root to install $(APT_PACKAGES))"; fi; \
	fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy common exporter simulator analyzer remediation dashboards gpuwarden

test: venv system-deps lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

demo: venv
	@[ "$$(id -u)" != "0" ] || $(MAKE) --no-print-directory system-deps
	$(BIN)/gpuwarden demo $(DEMO_ARGS)

bench: venv system-deps
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# the analyzer reading a real, promtool-backfilled Prometheus (BENCH_NODES=128,1024[,4096])
bench-prometheus: venv system-deps
	$(BIN)/python -m benchmarks --only analyzer-prometheus $(BENCH_ARGS)

evaluate: venv
	$(BIN)/gpuwarden evaluate $(EVAL_ARGS)

dashboards: venv
	$(BIN)/python -m dashboards

# Regenerate what is generated from other sources (XID rules, dashboards, deploy, docs).
rules: venv
	$(BIN)/python alerts/generate_xid_rules.py
	$(BIN)/python deploy/generate.py --write
	$(BIN)/python -m gpuwarden.metricsdoc

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .demo

# Everything a fresh machine needs: `make demo` (first), `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

RUNS ?= runs
FIGURES ?= figures
WORKERS ?= 2

.PHONY: install test cluster lint format demo demo-slurm demo-report bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

test: $(STAMP) cluster
	$(PY) -m pytest $(PYTEST_ARGS)

# The local single-node SLURM the `slurm` tests submit to (slurm/local-cluster.sh; idempotent,
# under a second when it already runs). It needs root; without it the SLURM tests skip.
cluster:
	@if [ "$$(id -u)" -eq 0 ]; then slurm/local-cluster.sh up; \
	else echo "make cluster: skipped: slurm/local-cluster.sh up needs root (installs packages," \
	  "starts daemons); the SLURM tests will skip (in CI, with CI=true, they fail instead)"; fi

lint: $(STAMP)
	$(VENV)/bin/ruff check vitscale analysis tests benchmarks
	$(VENV)/bin/ruff format --check vitscale analysis tests benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff check --fix vitscale analysis tests benchmarks
	$(VENV)/bin/ruff format vitscale analysis tests benchmarks

# The demo: a real scaling grid on the embedded synthetic set, its figures, the paper's
# figures, and the measured answer to the paper's question.
demo: $(STAMP)
	$(VENV)/bin/vitscale grid experiments/demo.yaml --executor local --workers $(WORKERS) --runs $(RUNS)
	@$(MAKE) --no-print-directory demo-report

demo-slurm: $(STAMP)
	slurm/local-cluster.sh up
	$(VENV)/bin/vitscale grid experiments/demo.yaml --executor slurm --profile slurm/profiles/local.yaml --runs $(RUNS) --wait
	@$(MAKE) --no-print-directory demo-report

demo-report: $(STAMP)
	$(VENV)/bin/vitscale figures $(RUNS)/demo --out $(FIGURES)/demo --curves --format png pdf
	$(VENV)/bin/vitscale figures --paper --out $(FIGURES)/paper
	@echo
	@echo "== cells"
	@$(VENV)/bin/vitscale status $(RUNS)/demo
	@echo
	@echo "== the paper's question, measured ($(FIGURES)/demo: our figures; $(FIGURES)/paper: the paper's)"
	@$(VENV)/bin/vitscale summary $(RUNS)/demo

bench: $(STAMP)
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/flops.py
	$(PY) benchmarks/data_throughput.py
	$(PY) benchmarks/analysis_speed.py
	$(PY) benchmarks/overhead.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache

# Everything a fresh machine needs: `make demo` (first), `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install test lint format demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check vitscale analysis tests benchmarks
	$(VENV)/bin/ruff format --check vitscale analysis tests benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff check --fix vitscale analysis tests benchmarks
	$(VENV)/bin/ruff format vitscale analysis tests benchmarks

demo: $(STAMP)
	$(VENV)/bin/vitscale flops --table6

bench: $(STAMP)
	$(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache

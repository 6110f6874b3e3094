# The two commands of the README. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/activate
	$(BIN)/python -m pip install --quiet -e '.[plot]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/activate
	$(BIN)/python -m pip install --quiet -e '.[dev,plot,otel]'
	touch $@ $(VENV)/.installed-demo

## demo: install, run an agent on embedded SQLite, SIGKILL it mid-run, resume it, show its
## journal; then the 120-kill crash matrix of four persistence policies, as a table and a PNG
demo: $(VENV)/.installed-demo
	$(BIN)/python examples/demo.py
	$(BIN)/durably chaos --plot demo-output/chaos.png

## test: install with dev (and otel) extras, then ruff, the import-linter contract of
## pyproject.toml (lint-imports: the direction of dependency), `durably lint` of the
## examples and the chaos tools (non-determinism in workflow bodies), mypy (strict) and pytest
test: $(VENV)/.installed-dev lint typecheck pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/lint-imports --no-logo --no-cache
	$(BIN)/durably lint examples src/durably/chaos

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

pytest: $(VENV)/.installed-dev
	$(BIN)/pytest

## bench: the benchmarks of bench/ (not part of the test suite)
bench: $(VENV)/.installed-dev
	$(BIN)/python bench/step_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-output

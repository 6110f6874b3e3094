# The two commands of the README. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The extras of the dev install; constraints.txt pins everything they install.
DEV_EXTRAS ?= dev,plot,otel
# Exact versions of every dependency, so CI and every checkout install the same ones.
CONSTRAINTS := constraints.txt

.PHONY: demo test lint typecheck pytest bench sim clean constraints

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-demo: pyproject.toml $(CONSTRAINTS) | $(BIN)/activate
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[plot,ui,openai]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(CONSTRAINTS) | $(BIN)/activate
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[$(DEV_EXTRAS)]'
	touch $@ $(VENV)/.installed-demo

## constraints: refresh constraints.txt: install '.[$(DEV_EXTRAS)]' into a throwaway venv
## with no constraints (the newest releases pyproject.toml allows) and write down the exact
## version of everything it installed. Review the diff and run make test before committing.
## Another set of extras: make constraints DEV_EXTRAS=dev,plot,otel,openai
constraints:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install --quiet --upgrade pip; \
	"$$tmp/venv/bin/python" -m pip install --quiet -e '.[$(DEV_EXTRAS)]'; \
	{ echo "# Exact versions of everything pip install -e '.[$(DEV_EXTRAS)]' installs, on"; \
	  echo "# $$("$$tmp/venv/bin/python" -c 'import platform; print("Python", platform.python_version(), platform.system(), platform.machine())')."; \
	  echo "# The Makefile's installs use it (pip install -c $(CONSTRAINTS)), so CI gets these."; \
	  echo "# Do not edit by hand: make constraints rewrites it (README, Development)."; \
	  "$$tmp/venv/bin/python" -m pip freeze --exclude-editable; } > "$$tmp/constraints.txt"; \
	mv "$$tmp/constraints.txt" $(CONSTRAINTS); \
	echo "wrote $(CONSTRAINTS) ($$(grep -vc '^#' $(CONSTRAINTS)) packages); review git diff $(CONSTRAINTS)"

## demo: install, run an agent on embedded SQLite, SIGKILL it mid-run, resume it, show its
## journal; then the 120-kill crash matrix of four persistence policies, as a table and a PNG;
## then a tool-calling agent on the real openai client against an offline model server,
## SIGKILLed after its refund and resumed (no model call asked twice, one refund); and it
## prints the command that opens the dashboard on the demo's journal
demo: $(VENV)/.installed-demo
	$(BIN)/python examples/demo.py
	$(BIN)/durably chaos --plot demo-output/chaos.png
	$(BIN)/python examples/openai_agent.py
	@echo "Watch the demo's runs in the dashboard: $(BIN)/durably ui --db sqlite:///demo-output/journal.db --open"

# pytest worker processes (pytest-xdist) of make test and make pytest. The suite waits on
# subprocesses, SIGKILLs and leases much of its time, so more workers than the 2 cores of
# the CI machine keep them busy; make pytest PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3

## test: install with dev (and otel) extras, then ruff, the import-linter contract of
## pyproject.toml (lint-imports: the direction of dependency), `durably lint` of the
## examples and the chaos tools (non-determinism in workflow bodies), then mypy (strict)
## and pytest side by side: mypy's output is printed after pytest's, and either failing
## fails make test
test: $(VENV)/.installed-dev lint
	@set -u; log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	echo "$(BIN)/mypy > $$log (beside pytest)"; \
	$(BIN)/mypy >"$$log" 2>&1 & mypy_pid=$$!; \
	$(MAKE) --no-print-directory pytest; pytest_status=$$?; \
	wait $$mypy_pid; mypy_status=$$?; \
	echo "--- $(BIN)/mypy (exit $$mypy_status):"; cat "$$log"; \
	[ $$pytest_status -eq 0 ] && [ $$mypy_status -eq 0 ]

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/lint-imports --no-logo --no-cache
	$(BIN)/durably lint examples src/durably/chaos

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

pytest: $(VENV)/.installed-dev
	$(BIN)/pytest -n $(PYTEST_WORKERS)

## sim: the deterministic simulation's long form: 1,000,000 simulated steps across seeds
## (tests/sim with DURABLY_SIM_STEPS; make test runs 200,000). One seed alone:
## python -m durably.chaos.dst --seed N --steps S [--workers W]
sim: $(VENV)/.installed-dev
	DURABLY_SIM_STEPS=$${DURABLY_SIM_STEPS:-1000000} $(BIN)/pytest -q tests/sim -k every_invariant

## bench: the benchmarks of bench/ (not part of the test suite)
bench: $(VENV)/.installed-dev
	$(BIN)/python bench/step_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-output

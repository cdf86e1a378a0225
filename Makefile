# The two commands that must work on a fresh machine with only Python 3.11 installed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint typecheck schemas bench clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found (set PYTHON=...)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	@touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check pytest_cleo_grade tests bench examples
	$(BIN)/ruff format --check pytest_cleo_grade tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest -n 2 -q

schemas: $(STAMP)
	$(BIN)/python -m pytest_cleo_grade.schemas schemas

bench: $(STAMP)
	$(BIN)/python bench/grade.py
	$(BIN)/python bench/store.py
	$(BIN)/python bench/plugin.py

demo: $(STAMP)
	$(BIN)/python examples/run_demo.py

clean:
	rm -rf $(VENV) .cleo build *.egg-info

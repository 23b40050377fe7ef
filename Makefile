# sagg developer entry points. `make install` once, then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install test lint bench up demo clean

install:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'

test:
	$(BIN)/pytest -q

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench:
	$(BIN)/python -m bench

# Leader, helper and collector as local processes on SQLite (UP_ARGS="--store postgres" for PostgreSQL).
up:
	$(BIN)/sagg up $(UP_ARGS)

demo:
	$(BIN)/sagg up --demo $(UP_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

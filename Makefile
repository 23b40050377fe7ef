# sagg developer entry points. Every target installs the venv first if it is missing or stale.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint bench soak up demo clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Two worker processes, a test file on one worker (its module fixtures are made once).
test: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

# Seeded fault scenarios on a real deployment (tests/soak; not part of `make test`).
# SOAK_SEED=S replays a run, SOAK_ONLY=n one scenario of it, SOAK_SCENARIOS=N sets how many.
SOAK_SCENARIOS ?= 100
soak: $(STAMP)
	$(BIN)/python -m tests.soak --scenarios $(SOAK_SCENARIOS) \
		$(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(if $(SOAK_ONLY),--scenario $(SOAK_ONLY))

# Every service as a local process on SQLite (UP_ARGS="--store postgres" for PostgreSQL).
up: $(STAMP)
	$(BIN)/sagg up $(UP_ARGS)

demo: $(STAMP)
	$(BIN)/sagg up --demo $(UP_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

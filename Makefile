# `make run` and `make test` work on a fresh machine: each creates .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench lint fmt clean migrations

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/runstate demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Figures side by side with their baselines; never part of `make test`.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.writes
	$(BIN)/python -m bench.deltas
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.memory
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.policies

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

clean:
	rm -rf $(VENV) runstate.db runstate.db-shm runstate.db-wal

# After changing src/runstate/models: write the next migration with Tortoise's own tool.
migrations: $(STAMP)
	RUNSTATE_DATABASE_URL=sqlite:///tmp/runstate-makemigrations.db $(BIN)/tortoise -c runstate.db.TORTOISE_ORM makemigrations
	rm -f /tmp/runstate-makemigrations.db*

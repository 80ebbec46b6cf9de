# Every target creates .venv itself and is safe to run twice.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= deployments.yaml

.PHONY: install run test test-load lint typecheck bench services-up services-down clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/hopbase serve --config $(CONFIG)

test: install
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not load"

test-load: install
	$(BIN)/python -m pytest -q -p no:cacheprovider -m load

lint: install
	$(BIN)/ruff check hopbase routing tests bench

typecheck: install
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# Every target creates .venv itself and is safe to run twice.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= deployments.yaml

.PHONY: install run test test-load lint typecheck bench test-tools bench-tools clean

# Debian packages the tests and the benchmark need (promtool checks /metrics and the alert rules; wrk loads).
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/hopbase serve --config $(CONFIG)

test-tools:
	@command -v promtool >/dev/null || { apt-get update -qq && $(APT_INSTALL) prometheus >/dev/null; }
	@command -v redis-server >/dev/null || { apt-get update -qq && $(APT_INSTALL) redis-server >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { apt-get update -qq && $(APT_INSTALL) postgresql >/dev/null; }

bench-tools:
	@command -v wrk >/dev/null || { apt-get update -qq && $(APT_INSTALL) wrk >/dev/null; }

test: install test-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not load"

test-load: install test-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider -m load

lint: install
	$(BIN)/ruff check hopbase routing tests bench

typecheck: install
	$(BIN)/mypy

bench: install bench-tools
	$(BIN)/python -m bench $(if $(QUICK),--quick) $(if $(PEER),--peer $(PEER))

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

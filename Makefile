# hookgate — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test lint typecheck bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,postgres,redis]'
	@rm -f $(VENV)/.installed-*
	@touch $@

## Start the gateway on the quick-start config (SQLite, echo agent, console channel).
run: $(STAMP)
	@./scripts/quickstart.sh

## Install what the tests need and run the whole suite.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src

## Benchmarks against a real server (needs wrk: apt-get install wrk).
bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) var build src/*.egg-info

# hookgate — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test lint bench clean bytecode

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,postgres,redis]'
	@rm -f $(VENV)/.installed-*
	@touch $@

# hookgate's own modules compiled ahead (an editable install leaves them as source): a gateway, and
# every one a test starts, then loads them compiled even where PYTHONDONTWRITEBYTECODE is set or the
# tree is read-only, instead of compiling ~80 modules on every start. compileall skips what is
# up to date; a file it cannot write only costs that speed-up (a syntax error still fails the run).
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q src >/dev/null || true

## Start the gateway on the quick-start config (SQLite, echo agent, console channel).
run: bytecode
	@./scripts/quickstart.sh

## Install what the tests need (Python packages; ngircd and openssl for the IRC tests, a C compiler for the clock-step tests) and run the whole suite.
test: bytecode
	@./scripts/test-deps.sh
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src

## Benchmarks against a real server (needs wrk: apt-get install wrk).
bench: bytecode
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) var build src/*.egg-info

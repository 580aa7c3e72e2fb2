# The two commands: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# `make run` installs only what running needs (the CLI, the default embedder, the service) in its own venv
RUN_VENV ?= .venv-run
RUN_STAMP := $(RUN_VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8420
DB ?= memlane.db

.PHONY: setup browser run test lint format bench clean mutate coverage shuffle fuzz install-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,vectors,server]'
	touch $(STAMP)

setup: $(STAMP)

# the web inspector's tests drive Debian's Chromium; install it once if missing
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(RUN_VENV)
	$(RUN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RUN_VENV)/bin/python -m pip install --quiet -e '.[vectors,server]'
	touch $(RUN_STAMP)

# a guided CLI demo on $(DB), then the service on http://$(HOST):$(PORT) (make run PORT=9000)
run: $(RUN_STAMP)
	PATH="$(CURDIR)/$(RUN_VENV)/bin:$$PATH" MEMLANE_DB="$(DB)" bash scripts/demo.sh
	$(RUN_VENV)/bin/memlane serve --db "$(DB)" --host $(HOST) --port $(PORT)

lint: setup
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/mypy

# the suite on every core (TEST_WORKERS=1: in one process); each worker starts its own PostgreSQL and takes
# whole files (a conformance file per backend), slowest first: docs/testing.md, "How the suite runs"
TEST_WORKERS ?= auto
test: setup browser lint
	$(PY) -m pytest $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# each extra really installed from the package index into a fresh venv, then its docs' examples run there
# (`make test` builds those venvs from .venv's packages instead: no network, seconds); several minutes
install-check: setup
	MEMLANE_FRESH_VENVS=pip $(PY) -m pytest -q tests/test_docs.py -k "fresh or each_extra"

# mutation testing, one module or all (not part of `make test`): make mutate [MODULE=validate]
mutate: setup
	$(PY) scripts/mutate.py $(MODULE) --markdown

# branch coverage over the whole suite (both backends, the client run, subprocesses);
# fails under 95% of branches in the modules scripts/mutate.py lists
coverage: setup browser
	rm -f .coverage .coverage.*
	$(VENV)/bin/coverage run -m pytest -q -p no:randomly
	$(VENV)/bin/coverage combine -q
	$(VENV)/bin/coverage report --include="$$($(PY) scripts/mutate.py --files)" --fail-under=95

# the HTTP API fuzzed from its own OpenAPI and the Python API with hypothesis, longer than in `make test`
fuzz: setup
	MEMLANE_FUZZ_EXAMPLES=$(or $(EXAMPLES),200) $(PY) -m pytest -q tests/test_fuzz.py

# the suite in a random order, to find tests that depend on each other: make shuffle [SEED=1]
shuffle: setup browser
	$(PY) -m pytest -q -p randomly $(if $(SEED),--randomly-seed=$(SEED))

format: setup
	$(VENV)/bin/ruff format src tests bench scripts
	$(VENV)/bin/ruff check --fix src tests bench scripts

bench: setup
	$(PY) bench/kv.py --n 100000

clean:
	rm -rf $(VENV) $(RUN_VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache

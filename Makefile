# evaledger developer tasks. `make check` is what CI runs (plus PostgreSQL).
VENV ?= .venv
PY := $(VENV)/bin/python
# pytest-xdist workers: one per CPU of this machine (`make check PYTEST_WORKERS=2` to choose).
PYTEST_WORKERS ?= auto
export EVALEDGER_TEST_PG ?= postgresql://postgres@127.0.0.1:5432/test

.PHONY: install fmt lint typecheck test check demo bench schema

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"

install: $(PY)

fmt: $(PY)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

lint: $(PY)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

typecheck: $(PY)
	$(VENV)/bin/mypy evaledger bench scripts tests

test: $(PY)
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS)

check: lint typecheck test

demo: $(PY)
	$(VENV)/bin/evaledger demo

schema: $(PY)
	$(PY) -m evaledger.domain.schema > schemas/run-bundle.v1.schema.json

bench: $(PY)
	$(PY) bench/ingest.py
	$(PY) bench/replay.py
	$(PY) bench/compare.py

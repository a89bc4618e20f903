# make run  - ingest the bundled example knowledge base and serve it on $(HOST):$(PORT) (REST API, MCP);
#             make run PORT=8080 HOST=0.0.0.0 to choose
# make test - the whole test suite (SQLite and the local PostgreSQL)
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test bench clean

$(STAMP): pyproject.toml requirements/lock.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements/lock.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/kbseek ingest examples/knowledge_base
	KBSEEK_GOLDEN_CASES_FILE=examples/eval/golden-cases.json KBSEEK_REPORTS_DIR=eval/reports \
		exec $(BIN)/kbseek serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest_speed.py

clean:
	rm -rf $(VENV) .kbseek .pytest_cache .hypothesis

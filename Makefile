# make run  - ingest the bundled example knowledge base and serve it on 127.0.0.1:8000 (REST API, MCP)
# make test - the whole test suite (SQLite and the local PostgreSQL)
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

$(STAMP): pyproject.toml requirements/lock.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements/lock.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/kbseek ingest examples/knowledge_base
	KBSEEK_GOLDEN_CASES_FILE=examples/eval/golden-cases.json KBSEEK_REPORTS_DIR=eval/reports \
		$(BIN)/kbseek serve --host 127.0.0.1 --port 8000

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest_speed.py

clean:
	rm -rf $(VENV) .kbseek .pytest_cache .hypothesis

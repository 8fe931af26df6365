# Countersign: `make demo` runs it with its demo, `make test` runs the whole suite.
PYTHON_BIN := $(shell scripts/find-python)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Type checking with Django's stubs; their plugin imports the settings, which need a secret
# key unless DEBUG is on (pyproject.toml: [tool.mypy], and the modules not checked yet).
MYPY := DJANGO_DEBUG=1 $(VENV)/bin/mypy

.PHONY: demo test test-quick test-sqlite lint format install lock clean

# Exactly the locked versions, each checked against its hash (requirements/dev.txt, written
# by make lock), then the server and the client themselves, whose dependencies those are.
$(STAMP): pyproject.toml client/pyproject.toml requirements/dev.txt
	@test -n "$(PYTHON_BIN)" || { echo "No Python >= 3.12 found (see the message above)"; exit 1; }
	@test -x $(PY) || $(PYTHON_BIN) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps -e . -e ./client
	@touch $(STAMP)

# After a change to the dependencies in pyproject.toml or client/pyproject.toml: the three
# lock files again (scripts/lock says which is which), then make install.
lock: $(STAMP)
	scripts/lock

install: $(STAMP)

demo: $(STAMP)
	$(PY) scripts/demo.py $(DEMO_ARGS)

test: $(STAMP)
	scripts/ensure-services
	scripts/ensure-browser
	scripts/ensure-upstreams
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MYPY)
	scripts/check-compose
# Bytecode up front: the suite starts hundreds of worker and server processes, and where
# PYTHONDONTWRITEBYTECODE is set each would compile the project again (~0.7 CPU-s each).
	$(PY) -m compileall -q control runs reconciliation sandbox connectors bench tests client scripts > /dev/null
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The protocol's core on SQLite, the demo's database: services, worker, batch, recovery, sweep,
# reconciliation, with real worker processes. What only PostgreSQL can do is marked
# `postgresql` and deselected here (pyproject.toml's markers).
SQLITE_TESTS := tests/runs tests/reconciliation tests/faults/test_execution.py \
	tests/faults/test_saga.py tests/faults/test_stale_worker.py \
	tests/faults/test_checkpoint_recovery.py tests/faults/test_redis_loss.py \
	tests/faults/test_tool_errors.py tests/faults/test_tool_crashes.py \
	tests/test_migrations_current.py tests/pages/test_risk.py tests/pages/test_time_zones.py \
	tests/pages/test_audit_page.py tests/pages/test_summary_line.py \
	tests/browser/test_cards.py tests/browser/test_audit.py tests/browser/test_reconciliation.py \
	tests/browser/test_time_zones.py tests/evidence tests/pages/test_decision_view.py \
	tests/pages/test_evidence_download.py

test-sqlite: $(STAMP)
	scripts/ensure-services
	$(VENV)/bin/pytest --ds=tests.settings_sqlite -m "not postgresql" $(SQLITE_TESTS) $(PYTEST_ARGS)

# Everything but the tests that start servers, workers, Chromium or the demo (the
# `processes` marker): a few minutes, for the loop of changing code. make test runs it all.
test-quick: $(STAMP)
	scripts/ensure-services
	$(VENV)/bin/pytest -m "not processes" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MYPY)

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) var

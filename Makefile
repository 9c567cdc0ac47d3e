# Everything runs from a virtualenv this Makefile creates: `make test` and `make demo` need
# nothing installed by hand but python3 (3.11+). The databases come from
# RATCHET_TEST_DATABASE_URL (PostgreSQL), RATCHET_TEST_MARIADB_URL and RATCHET_TEST_REDIS_URL.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup setup-test system-deps lint docs test test-fast test-lowest demo bench bench-peers clean

# Test processes: the suite runs in parallel, each process on databases of its own.
JOBS ?= 4
# The suite starts hundreds of Python processes (workers, CLIs, the docs' apps, pytest's own):
# each loads the package and the tests from the compiled files beside them (__pycache__, ignored
# by git) even where the environment turns writing them off, instead of compiling them again (a
# sixth of a worker's start, more than half of a test process's collection).
BYTECODE := PYTHONDONTWRITEBYTECODE=

# Debian packages the tests use, installed once: MariaDB's client headers (mysqlclient builds on
# them), Chromium with its driver (the console's browser test) and PgBouncer (the tests start
# one in front of PostgreSQL) and Graphviz (the docs draw their diagrams with dot). The demo
# needs none.
system-deps:
	@dpkg -s libmariadb-dev >/dev/null 2>&1 || (apt-get update && apt-get install -y libmariadb-dev)
	@test -x /usr/bin/chromedriver || (apt-get update && apt-get install -y chromium chromium-driver)
	@test -x /usr/sbin/pgbouncer || (apt-get update && apt-get install -y pgbouncer)
	@test -x /usr/bin/dot || (apt-get update && apt-get install -y graphviz)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e . --group dev
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

# What the tests need beyond setup: the Debian packages, and mysqlclient built on them.
setup-test: setup system-deps
	@$(PY) -c "import MySQLdb" 2>/dev/null || $(PY) -m pip install --quiet -e . --group mysqlclient

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict flask_ratchet
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/codespell

# The documentation site, into docs/_build/html: any warning fails it, a broken cross-reference
# included (-n). Offline: intersphinx reads docs/_inventories/. docs/_build/html.clean says the
# last build had no warning (the reference test builds on from it, see tests/docs).
docs: setup system-deps
	rm -f docs/_build/html.clean
	$(VENV)/bin/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html
	touch docs/_build/html.clean

test: lint docs setup-test
	$(BYTECODE) $(PY) -m pytest -n $(JOBS) --dist worksteal --durations=15

# The suite without the tests marked slow (worker processes, many rows): for a quick answer
# while working. CI runs them all (`make test`).
test-fast: lint setup-test
	$(BYTECODE) $(PY) -m pytest -n $(JOBS) --dist worksteal -m "not slow"

# The unit and integration tiers on the lowest versions pyproject.toml allows (.ci/lowest.txt),
# in a virtualenv of their own: every call into a library, on each database. The tests marked
# slow (processes, volume, generated inputs) test ratchet's own code, not the libraries' ages:
# `make test` runs them, once.
LOWEST ?= .venv-lowest
# Fewer processes: CI runs it beside `make test`.
LOWEST_JOBS ?= 2
test-lowest: system-deps
	python3 -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	$(LOWEST)/bin/python -m pip install --quiet -c .ci/lowest.txt -e . --group dev --group mysqlclient
	$(BYTECODE) $(LOWEST)/bin/python -m pytest -n $(LOWEST_JOBS) --dist worksteal -m "not slow" tests/unit tests/integration

demo: setup
	$(PY) -m examples.demo

bench: setup
	$(PY) -m bench.enqueue_claim
	$(PY) -m bench.worker --backlog 1000000
	$(PY) -m bench.notify --processes 4 --threads 4
	$(PY) -m bench.pickup_profile

# Installs the peers into bench/.peers on its first run (pinned in bench/compare.py).
bench-peers: setup
	$(PY) -m bench.compare

clean:
	rm -rf $(VENV) $(LOWEST) build dist *.egg-info instance docs/_build

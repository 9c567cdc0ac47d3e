# Everything runs from a virtualenv this Makefile creates: `make test` and `make demo` need
# nothing installed by hand but python3 (3.11+). PostgreSQL comes from RATCHET_TEST_DATABASE_URL.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup lint test test-lowest demo bench bench-peers clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e . --group dev
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict flask_ratchet console
	$(VENV)/bin/lint-imports --no-cache

# The console's browser test drives Debian's chromium through chromedriver; install them once.
browser-deps:
	@test -x /usr/bin/chromedriver || (apt-get update && apt-get install -y chromium chromium-driver)

test: lint browser-deps
	$(PY) -m pytest

# The unit and integration tiers on the lowest versions pyproject.toml allows (.ci/lowest.txt),
# in a virtualenv of their own.
LOWEST ?= .venv-lowest
test-lowest:
	python3 -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	$(LOWEST)/bin/python -m pip install --quiet -c .ci/lowest.txt -e . --group dev
	$(LOWEST)/bin/python -m pytest tests/unit tests/integration

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
	rm -rf $(VENV) $(LOWEST) build dist *.egg-info instance

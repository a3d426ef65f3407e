# Two commands on a fresh machine: `make demo` and `make test`. Each builds .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=

# The console's browser tests drive Debian's Chromium through its chromedriver (never a
# downloaded browser): installed here when missing and running as root; the tests fail without.
browser:
	@if ! { test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; }; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null || \
			{ apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null; }; \
		else echo 'install chromium and chromium-driver (apt-get) for the console tests' >&2; fi; \
	fi

.PHONY: browser demo test test-long lint bench chaos chaos-ha explore sim-scale clean venv

$(STAMP): pyproject.toml
	rm -f $(VENV)/.installed-*
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,dev,embedded,spark,console]'
	$(MAKE) --no-print-directory browser
	touch $@

venv: $(STAMP)

# make demo DEMO_ARGS=--console also serves the web console (its URL is printed first).
demo: $(STAMP)
	$(PY) -m readergroup.demo $(DEMO_ARGS)

test: $(STAMP)
	mkdir -p .artifacts
	$(PY) -m pytest -m "not long" --junitxml=.artifacts/junit.xml $(PYTEST_ARGS)

# End-to-end runs of a minute or less each (examples, the demo, a short chaos run, a Spark
# query killed and restarted): their own target so `make test` stays well under 10 minutes.
test-long: $(STAMP)
	mkdir -p .artifacts
	$(PY) -m pytest -m long --junitxml=.artifacts/junit-long.xml $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/statesync_bench.py
	$(PY) bench/group_state_bench.py
	$(PY) bench/stream_bench.py
	$(PY) bench/readergroup_bench.py
	$(PY) bench/read_path_bench.py
	$(PY) bench/coordination_bench.py --session-timeout 30
	$(PY) bench/segment_cap_bench.py
	$(PY) bench/spark_bench.py
	$(PY) bench/write_bench.py
	$(PY) bench/acks_bench.py
	$(PY) bench/console_bench.py

clean:
	rm -rf $(VENV) .artifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info

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

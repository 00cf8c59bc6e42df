# Two entry points a newcomer needs: `make demo` and `make test`. Both create .venv when missing.
# Any Python 3.11 or later (as the README says): the first of these that is >= 3.11, unless
# PYTHON=... is given.
PYTHON ?= $(firstword $(foreach p,python3.13 python3.12 python3.11 python3,$(shell \
	command -v $(p) >/dev/null 2>&1 && \
	$(p) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $(p))))
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck docs bench notebooks clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || test -n "$(PYTHON)" || \
		{ echo "no Python 3.11 or later found: install one, or run make PYTHON=/path/to/python"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	LANGSMITH_TRACING=false $(BIN)/replay-guard demo

# The whole suite in parallel (pytest-xdist: two workers more than the cores, as a few tests wait
# on servers, timeouts and child processes and the other workers fill those waits; `--dist
# loadgroup` keeps a module that shares a server on one worker), slow group included, then the
# 15 slowest tests.
# TEST_WORKERS=0 runs it in one process; `pytest -m "not slow"` is the quick loop.
# Property tests draw a quarter of their examples here and all of them under CI=true (.ci/run;
# tests/hypothesis_budget.py). PYTHONDONTWRITEBYTECODE is cleared for the run: without .pyc
# files every worker and every child process compiles the package and rewrites the test
# modules' asserts again (about 9 s of CPU per worker, more per child). The run's temporary
# files go to one directory on /dev/shm when it has room, removed after a pass
# (tests/memory_tmp.py).
TEST_WORKERS ?= $(shell expr $$(nproc 2>/dev/null || echo 1) + 2)
test: $(STAMP)
	LANGSMITH_TRACING=false PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q \
		-n $(TEST_WORKERS) --dist loadgroup --durations=15

lint: $(STAMP)
	$(BIN)/ruff check langgraph_replay_guard tests benchmarks examples notebooks
	$(BIN)/ruff format --check langgraph_replay_guard tests benchmarks examples notebooks

typecheck: $(STAMP)
	$(BIN)/mypy --strict langgraph_replay_guard

# The documentation site with the API reference generated from the docstrings, into site/.
# --strict: any warning (a reference that does not resolve, a missing page) fails the build.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

# Execute notebooks/*.ipynb in place and store their outputs (deterministic: running it twice
# gives identical files; the suite checks the stored outputs against a fresh run).
notebooks: $(STAMP)
	cd notebooks && LANGSMITH_TRACING=false ../$(BIN)/python ../tests/notebook_runner.py *.ipynb

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_engine.py
	PYTHONPATH=. $(BIN)/python benchmarks/bench_ledger.py

clean:
	rm -rf $(VENV) .venv-newest site .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist

# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install bytecode browser test lint typecheck pytest demo bench bench-full bench-engine clean engine demo-engine test-engine

install: $(STAMP) browser

# Headless Chromium for the status-page tests: apt-get when absent and possible (a no-op when present).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || $(PY) deploy/install_chromium.py

# uv (from PyPI, into the virtualenv) installs the project in seconds; pip does it when uv cannot be had or fails.
# Both write the packages' bytecode at install (uv only when asked): where PYTHONDONTWRITEBYTECODE is set, as on
# these machines, every process would otherwise compile what it imports from source (XGBoost + scikit-learn: 7 s).
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	{ $(BIN)/pip install -q uv && $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[dev]'; } || \
	  { $(BIN)/pip install -q --upgrade pip && $(BIN)/pip install -q -e '.[dev]'; }
	$(BIN)/python deploy/install_kubectl.py
	touch $(STAMP)

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

# pytest on PYTEST_WORKERS xdist workers; the tests of the shared stack stay on one (tests/conftest.py). One OpenMP
# thread per process: the workers already fill the cores, and XGBoost's parallel regions (DMatrix building ignores
# nthread) otherwise start a thread per core in every worker and test server and spin on the core another needs.
PYTEST_WORKERS ?= 2
PYTEST_ARGS := -n $(PYTEST_WORKERS) --dist loadgroup --durations=25
SOURCES := shared trainer predictor router_client sim demo bench deploy tests

# Our own modules' bytecode, written once (the suite starts ~200 Python processes; PYTHONDONTWRITEBYTECODE would
# have each compile them again).
bytecode: install
	@$(BIN)/python -m compileall -q -j 0 $(SOURCES) > /dev/null

pytest: install bytecode
	OMP_NUM_THREADS=1 $(BIN)/pytest $(PYTEST_ARGS)

# ruff (seconds) first; mypy runs beside pytest and its output follows pytest's; fails if any of them fails.
test: install lint bytecode
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	OMP_NUM_THREADS=1 $(BIN)/pytest $(PYTEST_ARGS); tests=$$?; \
	wait $$mypy; types=$$?; echo "$(BIN)/mypy:"; cat $(VENV)/mypy.log; \
	[ $$tests -eq 0 ] && [ $$types -eq 0 ]

demo: install bytecode
	$(BIN)/python -m demo

# A real vLLM (CPU build) in its own virtualenv + the default tiny model (deploy/install_engine.py; idempotent).
engine:
	$(PY) deploy/install_engine.py

demo-engine: install bytecode engine
	$(BIN)/python -m demo --engines 2

# The tests that need real engines (pytest marker `engine`); .ci/run runs them after `make test`.
test-engine: install bytecode engine
	$(BIN)/pytest -m engine tests/engine

# Benchmark tiers (bench/common/tiers.py; bench/README.md lists every benchmark and its tier). Results go to
# bench/results/<area>/. quick: 7 min 12 s measured on 2 cores; full: every other offline benchmark (~1.5 h); engine: on real
# vLLM engines (make engine), under flock /tmp/engine.lock.
bench: install
	$(BIN)/python -m bench.common.tiers quick

bench-full: install
	$(BIN)/python -m bench.common.tiers full

bench-engine: install bytecode engine
	$(BIN)/python -m bench.common.tiers engine

clean:
	rm -rf $(VENV) .venv-engine .pytest_cache .mypy_cache .ruff_cache

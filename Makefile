VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-heavy lint docs bench gpu-pack
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

demo: setup
	$(PY) -m specdec.demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The suite runs in TEST_WORKERS processes (pytest-xdist) of one torch thread each: on the 2-core machines of this
# project that took 7.7 min against 19.4 min for one process of two threads (AMD Zen 3, 2026-11-28), since the tiny
# models' forwards gain nothing from a second thread. The first line printed is the CPU and the flags that decide
# the kernels (tests/conftest.py), which decide what skips.
TEST_WORKERS ?= 2
PYTEST := OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

test: lint
	$(PYTEST) -m "not heavy"

# The heavy statistical configurations (CI's second step): together with `make test`, the whole suite.
test-heavy: setup
	$(PYTEST) -m heavy

docs: setup
	$(VENV)/bin/mkdocs build --strict

bench: setup
	$(PY) -m specdec.cli bench

# The GPU check's device calls (issue 46): the model, wheels and PLAN.md in .gpu/ (scripts/gpu_pack.py says how).
gpu-pack: setup
	$(PY) scripts/gpu_pack.py

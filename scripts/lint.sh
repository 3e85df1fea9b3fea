#!/usr/bin/env bash
# The project's guardrails, with its own configuration (pyproject.toml): ruff lint and format,
# mypy, and the import-layer contract. Run by scripts/run-tests.sh (so by CI) before pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=.venv/bin
echo "[lint] ruff check";            "$py/ruff" check src tests benchmarks examples
echo "[lint] ruff format --check";   "$py/ruff" format --check src tests benchmarks examples
echo "[lint] mypy";                  "$py/mypy"
echo "[lint] import-linter";         "$py/lint-imports" > .venv/lint-imports.log || { cat .venv/lint-imports.log; exit 1; }
echo "[lint] ok"

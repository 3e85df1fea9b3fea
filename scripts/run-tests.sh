#!/usr/bin/env bash
# Set up everything (venv, Python deps, Slurm/munge when root) and run the whole test suite.
# Extra arguments go to pytest, e.g.: scripts/run-tests.sh -k slurm -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup-env.sh --slurm --browser

bash scripts/lint.sh

echo "[run-tests] $(.venv/bin/python --version), pytest $(.venv/bin/python -m pytest --version 2>&1 | awk '{print $2}')"
set +e
.venv/bin/python -m pytest tests -q -p no:cacheprovider --timeout="${PYTEST_TIMEOUT:-300}" --durations=15 "$@"
rc=$?
set -e
case "$rc" in
  0) echo "[run-tests] all tests passed" ;;
  5) echo "[run-tests] FAILED: pytest collected no tests (exit 5)" >&2 ;;
  *) echo "[run-tests] FAILED: pytest exited with $rc" >&2 ;;
esac
exit "$rc"

#!/usr/bin/env bash
# Set up what each step needs, then run the suite in layers, fastest first:
#   1. the Python side of the venv (pip only, no apt)   2. scripts/lint.sh
#   3. tests/unit (fail fast)   4. tests/unit on Python 3.10 and 3.12 (scripts/unit-other-pythons.sh)
#   5. Slurm, munge and chromium (apt, as root; only for the system layer)   6. tests/system
# Extra arguments go to pytest (both layers), e.g.: scripts/run-tests.sh -k slurm -x
#   SHARDWRIGHT_LAYERS="unit"   runs steps 1-4 only (no apt install, no servers)
#   SHARDWRIGHT_LAYERS="system" runs steps 1, 2, 5 and 6
#   SHARDWRIGHT_OTHER_PYTHONS="" skips step 4
#   SHARDWRIGHT_SYSTEM_WORKERS=N runs step 6 in N pytest processes (default 2; 0: in one process)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

layers="${SHARDWRIGHT_LAYERS:-unit system}"
log() { echo "[run-tests] $*"; }
step_start=$SECONDS
el=0
elapsed() { el=$((SECONDS - step_start)); step_start=$SECONDS; }  # sets $el (no subshell: keeps the clock)

pytest_args=(-q -p no:cacheprovider --timeout="${PYTEST_TIMEOUT:-300}")
# report LAYER RC [ARGS...]: prints the outcome; returns non-zero if the layer failed. Exit 5
# (nothing collected) is a failure, unless pytest arguments selected tests of the other layer.
report() {
  local layer="$1" code="$2"
  shift 2
  case "$code" in
    0) elapsed; log "$layer layer passed in ${el}s" ;;
    5) if [ $# -gt 0 ]; then log "no $layer tests selected by: $*"; return 0; fi
       log "FAILED: pytest collected no $layer tests (exit 5)" >&2 ;;
    *) log "FAILED: the $layer layer (pytest exited with $code)" >&2 ;;
  esac
  return "$code"
}

bash scripts/setup-env.sh
bash scripts/lint.sh
elapsed; log "setup and lint took ${el}s"
log "$(.venv/bin/python --version), pytest $(.venv/bin/python -m pytest --version 2>&1 | awk '{print $2}')"

if [[ " $layers " == *" unit "* ]]; then
  set +e
  .venv/bin/python -m pytest tests/unit -x "${pytest_args[@]}" --durations=5 "$@"
  rc=$?
  set -e
  report unit "$rc" "$@" || exit "$rc"
  if [ -n "${SHARDWRIGHT_OTHER_PYTHONS-3.10 3.12}" ]; then
    bash scripts/unit-other-pythons.sh "$@"
    elapsed; log "unit layer on the other Pythons took ${el}s"
  fi
fi

if [[ " $layers " == *" system "* ]]; then
  bash scripts/setup-env.sh --slurm --browser  # apt, only now: the unit layer never waits for it
  elapsed; log "system dependencies took ${el}s"
  set +e
  # Two pytest processes (pytest-xdist), each taking whole files (--dist loadfile: a file's
  # module fixtures and its servers stay in one process). Most system tests wait on servers and
  # child processes, so two at once nearly halve the wall time; each process starts its own
  # S3/GCS/Azure servers, Slurm cluster and Ray cluster on free ports. SHARDWRIGHT_SYSTEM_WORKERS=0
  # runs the layer in this one process.
  .venv/bin/python -m pytest tests/system "${pytest_args[@]}" --durations=15 \
      -n "${SHARDWRIGHT_SYSTEM_WORKERS:-2}" --dist loadfile "$@"
  rc=$?
  set -e
  report system "$rc" "$@" || exit "$rc"
fi
log "all tests passed"

#!/usr/bin/env bash
# The unit layer (tests/unit) on the other Pythons `requires-python` promises (3.10 and 3.12),
# each in a small venv with the core dependencies only (no torch, pyarrow, litdata: the tests
# that need them skip there through importorskip and run on the main interpreter).
#   scripts/unit-other-pythons.sh            # every version in $SHARDWRIGHT_OTHER_PYTHONS (default: 3.10 3.12)
#   scripts/unit-other-pythons.sh 3.12 -x    # one version; further arguments go to pytest
# A version whose interpreter is not installed is skipped with a line saying so (under
# CI=true it fails instead). Venvs: .venv-py3.10, .venv-py3.12 (refreshed when pyproject.toml changes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

versions="${SHARDWRIGHT_OTHER_PYTHONS:-3.10 3.12}"
if [ $# -gt 0 ] && [[ "$1" =~ ^3\.[0-9]+$ ]]; then
  versions="$1"
  shift
fi

log() { echo "[unit-other-pythons] $*"; }

# python3.X on PATH if it runs (a pyenv shim without that version selected does not), else
# pyenv's own install of it.
find_python() {
  local v="$1" cand
  if command -v "python$v" >/dev/null 2>&1 && "python$v" -c 'import sys' >/dev/null 2>&1; then
    command -v "python$v"
    return 0
  fi
  local root="${PYENV_ROOT:-$HOME/.pyenv}"
  for cand in "$root"/versions/"$v".*/bin/"python$v"; do
    if [ -x "$cand" ]; then
      echo "$cand"
      return 0
    fi
  done
  return 1
}

rc=0
for v in $versions; do
  if ! py="$(find_python "$v")"; then
    if [ "${CI:-}" = true ]; then
      log "FAILED: python$v is not installed (CI needs it: pyenv install $v)" >&2
      rc=1
    else
      log "skipping Python $v: python$v is not installed"
    fi
    continue
  fi
  venv=".venv-py$v"
  stamp="$venv/.shardwright-setup-stamp"
  inputs="$(cat pyproject.toml | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$inputs" ]; then
    log "building $venv with $("$py" --version 2>&1) (core dependencies only; log: $venv/pip-install.log)"
    t0=$SECONDS
    rm -rf "$venv"
    "$py" -m venv "$venv"
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
        -e . pytest pytest-timeout > "$venv.pip-install.log" 2>&1; then
      tail -n 40 "$venv.pip-install.log" >&2
      log "FAILED: pip install into $venv" >&2
      rc=1
      continue
    fi
    mv "$venv.pip-install.log" "$venv/pip-install.log"
    echo "$inputs" > "$stamp"
    log "$venv ready in $((SECONDS - t0))s"
  fi
  log "tests/unit on $("$venv/bin/python" --version 2>&1)"
  t0=$SECONDS
  # PYTHONPATH=src: the source tree under test, whatever the editable install points at.
  set +e
  PYTHONPATH="$PWD/src" "$venv/bin/python" -m pytest tests/unit -q -p no:cacheprovider -x "$@"
  code=$?
  set -e
  if [ "$code" = 0 ] || { [ "$code" = 5 ] && [ $# -gt 0 ]; }; then  # 5: the arguments selected no unit test
    log "Python $v: unit layer passed in $((SECONDS - t0))s"
  else
    log "FAILED: the unit layer on Python $v (pytest exited with $code)" >&2
    rc=1
  fi
done
exit "$rc"

#!/usr/bin/env bash
# Create/refresh the project's virtualenv (.venv) with the package (+torch, service, gcs, azure, ray extras) and the
# test requirements. Idempotent: a second run is a quick no-op.
#   scripts/setup-env.sh            # Python side only
#   scripts/setup-env.sh --slurm    # also Debian's slurm-wlm + munge (needs root) for Slurm tests
#   scripts/setup-env.sh --browser  # also Debian's chromium + chromium-driver (needs root) for the dashboard test
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

want_slurm=0
want_browser=0
for arg in "$@"; do
  case "$arg" in
    --slurm) want_slurm=1 ;;
    --browser) want_browser=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "setup-env.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { echo "[setup-env] $*"; }

# --- Python virtualenv -------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  py=""
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
  done
  [ -n "$py" ] || { echo "setup-env.sh: no python3.11/python3 found" >&2; exit 1; }
  log "creating .venv with $($py --version 2>&1)"
  "$py" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi

# Skip pip entirely when nothing it reads has changed since the last successful install.
stamp=.venv/.shardwright-setup-stamp
inputs="$(cat pyproject.toml requirements-test.txt constraints.txt 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ] && .venv/bin/python -c 'import shardwright' 2>/dev/null; then
  log "python deps up to date"
else
  log "installing python deps (torch pinned by constraints.txt to the CPU wheel; log: .venv/pip-install.log)"
  t0=$SECONDS
  # -c constraints.txt is essential: without it torchvision (via litdata) drags in a CUDA torch.
  set +e
  .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off \
      -c constraints.txt -e '.[torch,service,gcs,azure,ray]' -r requirements-test.txt > .venv/pip-install.log 2>&1
  pip_rc=$?
  set -e
  if [ "$pip_rc" != 0 ]; then
    tail -n 60 .venv/pip-install.log >&2
    echo "setup-env.sh: pip install failed ($pip_rc)" >&2
    exit "$pip_rc"
  fi
  grep -E '^Successfully installed' .venv/pip-install.log | cut -c1-300 || true
  log "python deps installed in $((SECONDS - t0))s"
  echo "$inputs" > "$stamp"
fi

# --- Azurite (npm), the Azure Blob emulator of the az:// tests -----------------------------
# Installed under .venv/azurite (found there by tests/support/cloudemulators.py); idempotent.
AZURITE_VERSION=3.35.0
azurite_bin=.venv/azurite/node_modules/.bin/azurite-blob
if [ -x "$azurite_bin" ] && grep -q "\"version\": \"$AZURITE_VERSION\"" .venv/azurite/node_modules/azurite/package.json 2>/dev/null; then
  log "azurite $AZURITE_VERSION already installed"
elif ! command -v npm >/dev/null 2>&1; then
  log "NOT installing azurite: no npm (node 20) on this machine. Azure tests will be skipped (they fail under CI=true)."
else
  log "installing azurite $AZURITE_VERSION under .venv/azurite (log: .venv/npm-install.log)"
  t0=$SECONDS
  mkdir -p .venv/azurite
  set +e
  npm install --prefix .venv/azurite --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" > .venv/npm-install.log 2>&1
  npm_rc=$?
  set -e
  if [ "$npm_rc" != 0 ]; then
    tail -n 40 .venv/npm-install.log >&2
    echo "setup-env.sh: npm install azurite failed ($npm_rc)" >&2
    exit "$npm_rc"
  fi
  log "azurite installed in $((SECONDS - t0))s"
fi

# --- Slurm + munge (Debian packages) -----------------------------------------------------
if [ "$want_slurm" = 1 ]; then
  need=""
  for pkg in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need="$need $pkg"
  done
  if [ -z "$need" ]; then
    log "slurm-wlm and munge already installed"
  elif [ "$(id -u)" != 0 ]; then
    log "NOT installing$need: not root. Slurm tests will be skipped (they fail under CI=true)."
    log "  install them with: sudo apt-get install -y --no-install-recommends slurm-wlm munge"
  elif ! command -v apt-get >/dev/null 2>&1; then
    log "NOT installing$need: no apt-get on this machine. Slurm tests will be skipped."
  else
    log "installing Debian packages:$need (log: .venv/apt-install.log)"
    export DEBIAN_FRONTEND=noninteractive
    # Keep the packages' maintainer scripts from starting the system munged/slurmctld/slurmd
    # (the tests run their own, on private sockets and ports): a policy-rc.d that says "no",
    # only for this install and only if the machine has none already.
    made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
      made_policy=1
    fi
    t0=$SECONDS
    set +e
    { apt-get update -qq && apt-get install -y -q --no-install-recommends slurm-wlm munge; } > .venv/apt-install.log 2>&1
    apt_rc=$?
    set -e
    [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
    if [ "$apt_rc" != 0 ]; then
      tail -n 40 .venv/apt-install.log >&2
      echo "setup-env.sh: apt-get install slurm-wlm munge failed ($apt_rc)" >&2
      exit "$apt_rc"
    fi
    log "installed slurm-wlm + munge in $((SECONDS - t0))s ($(dpkg-query -W -f='${Version}' slurm-wlm))"
  fi
fi
# --- chromium + chromium-driver (Debian packages) for the dashboard test --------------------
if [ "$want_browser" = 1 ]; then
  need=""
  for pkg in chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need="$need $pkg"
  done
  if [ -z "$need" ]; then
    log "chromium and chromium-driver already installed"
  elif [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "NOT installing$need (not root, or no apt-get). The dashboard test will be skipped (it fails under CI=true)."
  else
    log "installing Debian packages:$need (log: .venv/apt-browser.log)"
    t0=$SECONDS
    set +e
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver; } \
      > .venv/apt-browser.log 2>&1
    apt_rc=$?
    set -e
    if [ "$apt_rc" != 0 ]; then
      tail -n 40 .venv/apt-browser.log >&2
      echo "setup-env.sh: apt-get install chromium chromium-driver failed ($apt_rc)" >&2
      exit "$apt_rc"
    fi
    log "installed chromium + chromium-driver in $((SECONDS - t0))s"
  fi
fi
log "done"

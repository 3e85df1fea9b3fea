#!/usr/bin/env bash
# Set up the venv and run the quickstart example (writes a small dataset, reads it back).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup-env.sh
exec .venv/bin/python examples/quickstart.py "$@"

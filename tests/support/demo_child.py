"""The quickstart demo's child run (examples/quickstart.py) for tests/system/test_trust_demo.py,
with one change: each worker process makes ``HOLD_AFTER`` samples, then waits in fn until it is
killed. The run has committed chunks by then and can never finish first, so the demo's kill
lands mid-run at any machine load (never "the run is surely still going after N seconds").

Run as ``python -c "from support.demo_child import main; main()" OUTPUT_DIR`` (fn is then
importable by name in a worker process); argv: the output dir."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))  # `import quickstart`, here and in a spawned worker
HOLD_AFTER = 120  # more than two chunks of the demo's chunk_size=50 per worker

_made = 0
_never = threading.Event()


def held_sample(i: int) -> dict:
    """quickstart.make_sample for this worker's first HOLD_AFTER inputs; then it waits to be killed."""
    global _made
    _made += 1
    if _made > HOLD_AFTER:
        _never.wait()
    import quickstart

    return quickstart.make_sample(i)


def main() -> None:
    import quickstart

    quickstart.run(sys.argv[1], fn=held_sample)


if __name__ == "__main__":
    main()

"""Whether a process of this host still runs (stale leases, stale temp files, cache pins)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process of this host still exists and has not exited.

    A zombie (exited, not yet reaped by its parent: in a container whose PID 1 never reaps,
    forever) is dead: ``os.kill(pid, 0)`` still succeeds for it, so its state is read from
    /proc where there is one.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS) or it just vanished: trust kill(0)
    return state not in (b"Z", b"X")

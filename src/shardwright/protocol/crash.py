"""Fault injection for the crash tests: die between two protocol writes, as a power cut would."""

from __future__ import annotations

import os


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: ``SHARDWRIGHT_CRASH_AT=name`` dies right here, as a
    power cut would, between two writes of the protocol."""
    if os.environ.get("SHARDWRIGHT_CRASH_AT") == name:
        os._exit(77)

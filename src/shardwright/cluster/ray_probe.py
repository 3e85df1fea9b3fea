"""A look at ``RAY_ADDRESS`` before ``ray.init()``: a wrong address made ray.init() retry for
13.7 minutes before a raw ConnectionError (issue 33). One TCP connection, a few seconds at
most, then one line naming the address and the fix."""

from __future__ import annotations

import os
import socket

from ..errors import UsageError

__all__ = ["probe_ray_address"]

PROBE_TIMEOUT = 5.0  # seconds: a live head answers a TCP connect in milliseconds


def probe_ray_address(environ: dict[str, str] | None = None) -> None:
    """UsageError unless nothing is to be probed (no RAY_ADDRESS, or "auto"/"local") or the
    address's host:port accepts a TCP connection."""
    address = (environ if environ is not None else os.environ).get("RAY_ADDRESS", "").strip()
    if not address or address in ("auto", "local"):
        return
    target = address.split("://", 1)[1] if "://" in address else address
    host, sep, port_text = target.rstrip("/").rpartition(":")
    if not sep:
        host, port_text = target, "10001" if address.startswith("ray://") else "6379"
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"RAY_ADDRESS={address!r} is not HOST:PORT; fix it or unset it") from None
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=PROBE_TIMEOUT):
            return
    except OSError as exc:
        raise UsageError(
            f"RAY_ADDRESS={address}: nothing answers at {host}:{port} ({exc.strerror or type(exc).__name__}); "
            "start the cluster there (ray start --head) or fix or unset RAY_ADDRESS"
        ) from None

"""Holding a local output directory for the whole life of a job (the jobs service, issue 33).

The service checks a job's ``output_dir`` when it is submitted and when its process starts;
a directory on the way renamed and replaced by a symbolic link *while the job runs* (or the
engine's own ``.shardwright/shards`` swapped for a link) would still redirect every later
write. So the job process pins the directory once it is checked (:func:`pin_directory`: its
resolved path, device and inode, kept in the environment so every worker process inherits
it), and every :class:`~shardwright.storage.local.LocalStorage` under that path checks,
before each access, that the path still resolves to itself (no component is a link) and
that the directory is still the pinned one (same ``st_dev``/``st_ino``). A breach is an
:class:`~shardwright.errors.OutputDirError` naming the path, raised before the write.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..errors import OutputDirError

__all__ = ["PIN_ENV", "Pin", "check_pinned", "pin_directory", "pin_for"]

PIN_ENV = "SHARDWRIGHT_PINNED_OUTPUT"


@dataclass(frozen=True)
class Pin:
    path: str  # resolved, absolute
    dev: int
    ino: int


def pin_directory(path: str) -> Pin:
    """Pin the existing directory ``path`` (already resolved) for this process and its children."""
    if os.path.realpath(path) != path:
        raise OutputDirError(f"output_dir {path} resolves to {os.path.realpath(path)} (a symbolic link); refusing it")
    st = os.stat(path)
    pin = Pin(path, st.st_dev, st.st_ino)
    os.environ[PIN_ENV] = json.dumps([pin.path, pin.dev, pin.ino])
    return pin


def pin_for(root: str) -> Pin | None:
    """The pin a storage at ``root`` keeps to: the process's pin when ``root`` is under it."""
    raw = os.environ.get(PIN_ENV)
    if not raw:
        return None
    try:
        path, dev, ino = json.loads(raw)
    except ValueError:
        return None
    if root == path or root.startswith(path.rstrip("/") + "/"):
        return Pin(path, dev, ino)
    return None


def check_pinned(pin: Pin, path: str) -> None:
    """OutputDirError unless ``path`` (under the pin) still resolves to itself and the pinned
    directory is the same one."""
    if os.path.realpath(path) != path:
        link = path
        while link != pin.path and not os.path.islink(link):
            link = os.path.dirname(link)
        raise OutputDirError(
            f"output_dir {pin.path}: {link} was replaced by a symbolic link while the job ran; "
            "refusing to write or read through it (the job's output stays where it was checked)"
        )
    try:
        st = os.stat(pin.path)
    except FileNotFoundError:
        st = None
    if st is None or (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
        raise OutputDirError(
            f"output_dir {pin.path} was moved or replaced by another directory while the job ran; "
            "refusing to write there (the job's output stays where it was checked)"
        )

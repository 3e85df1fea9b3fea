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

The engine's own atomic writes (``write_bytes``/``write_parts``: temp file, fsync, rename)
leave no window between that check and the write: :func:`open_pinned_dir` opens the pinned
directory and then each directory below it with ``O_DIRECTORY | O_NOFOLLOW`` (checking the
first is the pinned one by device and inode), and the temp file, the rename and its cleanup
use that descriptor (``dir_fd``), so a link swapped in after the check is never followed.
Other accesses (reads, listings, deletes, ``create_exclusive``) are checked before each
access: a swap in the microseconds between that check and the call is the residual window
(docs/design.md).
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass

from ..errors import OutputDirError

__all__ = ["PIN_ENV", "Pin", "check_pinned", "open_pinned_dir", "pin_directory", "pin_for"]

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


def open_pinned_dir(pin: Pin, directory: str) -> int:
    """A descriptor of ``directory`` (the pinned directory or one under it, made if missing),
    reached from the pinned directory one name at a time without following a link: no later
    swap of a name on the way can redirect a write made through it (``dir_fd``)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(pin.path, flags)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
        os.close(fd)
        raise OutputDirError(
            f"output_dir {pin.path} was moved or replaced by another directory while the job ran; "
            "refusing to write there (the job's output stays where it was checked)"
        )
    relative = os.path.relpath(directory, pin.path)
    at = pin.path
    for name in [] if relative == "." else relative.split(os.sep):
        at = os.path.join(at, name)
        try:
            try:
                child = os.open(name, flags, dir_fd=fd)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(name, flags, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if os.path.islink(at) or exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OutputDirError(
                    f"output_dir {pin.path}: {at} was replaced by a symbolic link while the job ran; "
                    "refusing to write or read through it (the job's output stays where it was checked)"
                ) from None
            raise
        os.close(fd)
        fd = child
    return fd

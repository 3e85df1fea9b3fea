"""Which files fn writes outside the directory :func:`~shardwright.map` gave it (issue 33).

Nothing outside fn's staging directory is kept, so a file written there would be dropped
silently. Looking next to the directory after fn returns catches one level of ``../`` only;
a write through ``../../``, an absolute path into the output, or a link fn made in its
directory pointing out would still go unseen. So while fn runs (in the thread that calls it)
an audit hook (:func:`sys.addaudithook`: Python's own ``open``, ``os.open``, ``os.rename`` /
``os.replace``, ``os.mkdir``, ``os.symlink`` and ``os.link`` events) refuses every write
that leaves the directory through ``..`` or a link, or lands in the output outside it: a
:class:`~shardwright.errors.UsageError` naming the file, raised before the write happens,
and raised again after fn returns if fn swallowed it. Writes elsewhere (caches, logs, temp
files) are fn's business and pass. Writes made by C code that bypasses Python's I/O
(``fopen`` in an extension) are not seen by the hook; the check next to the directory
after fn returns still covers their ``../``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from ..errors import UsageError

__all__ = ["watching"]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_state = threading.local()
_installed = False
_lock = threading.Lock()


class _Watch:
    def __init__(self, staging: str, output: str | None):
        self.given = os.path.normpath(os.path.abspath(staging))  # as fn was given it
        self.staging = os.path.realpath(staging)
        self.output = os.path.realpath(output) if output else None
        self.stray: str | None = None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _cwd(dir_fd: object) -> bool:
    """A path relative to the working directory (no dir_fd: audited as None or AT_FDCWD, < 0)."""
    return dir_fd is None or (isinstance(dir_fd, int) and dir_fd < 0)


def _target(event: str, args: tuple) -> object:
    """The path an audited event writes, or None (a read, a descriptor, a dir_fd call)."""
    if event == "open":
        path, mode, flags = args
        if isinstance(mode, str):
            return path if any(c in mode for c in "wax+") else None
        return path if isinstance(flags, int) and flags & _WRITE_FLAGS else None
    if event == "os.rename":  # also os.replace
        return args[1] if _cwd(args[3]) else None
    if event == "os.mkdir":
        return args[0] if _cwd(args[2]) else None
    if event == "os.symlink":
        return args[1] if _cwd(args[2]) else None
    if event == "os.link":
        return args[1] if _cwd(args[3]) else None
    return None


def _hook(event: str, args: tuple) -> None:
    watch: _Watch | None = getattr(_state, "watch", None)
    if watch is None or event not in ("open", "os.rename", "os.mkdir", "os.symlink", "os.link"):
        return
    raw = _target(event, args)
    if raw is None or isinstance(raw, int):
        return
    try:
        path = os.fsdecode(os.fspath(raw))  # type: ignore[call-overload]
    except TypeError:
        return
    _state.watch = None  # the checks below call os functions that audit too
    try:
        problem = _problem(watch, path if os.path.isabs(path) else os.path.join(os.getcwd(), path))
    finally:
        _state.watch = watch
    if problem is not None:
        if watch.stray is None:
            watch.stray = problem
        raise UsageError(problem)


def _problem(watch: _Watch, path: str) -> str | None:
    lexical = os.path.normpath(path)
    resolved = os.path.join(os.path.realpath(os.path.dirname(lexical)), os.path.basename(lexical))
    inside = _under(lexical, watch.given) or _under(lexical, watch.staging)
    if inside and _under(resolved, watch.staging):
        return None
    how = None
    if not inside and any(path.startswith(top.rstrip(os.sep) + os.sep) for top in (watch.given, watch.staging)):
        how = "through '../'"
    elif inside:
        how = "through a symbolic link in it"
    elif watch.output is not None and (_under(resolved, watch.output) or _under(lexical, watch.output)):
        how = "into the output directory, not under the directory fn was given"
    if how is None:
        return None
    shown = os.path.relpath(lexical, watch.given) if how == "through '../'" else path
    return (
        f"map: fn wrote {shown!r} outside the directory it was given ({how}); "
        "files outside it are not kept: write every file under that directory"
    )


@contextlib.contextmanager
def watching(staging: str, output: str | None) -> Iterator[None]:
    """While the block runs in this thread, refuse fn's writes out of ``staging`` (see the
    module's doc); ``output``: the local output directory, when it is local."""
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)  # once per process; inactive outside a watched block
            _installed = True
    watch = _Watch(staging, output)
    previous = getattr(_state, "watch", None)
    _state.watch = watch
    try:
        yield
    finally:
        _state.watch = previous
    if watch.stray is not None:
        raise UsageError(watch.stray)

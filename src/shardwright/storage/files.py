"""Local-file helpers shared by the local backend, the S3 backend's downloads and the reader's
chunk cache: scratch names, durable renames, quiet cleanup and the one disk-full mapping.

Every function here is about *this machine's* file system; none knows about keys or backends.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import random
import re
import stat
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import IO

from ..errors import CorruptStateError, StorageError

__all__ = [
    "DISK_FULL_ERRNOS",
    "NOT_WRITABLE_ERRNOS",
    "TMP_NAME_RE",
    "disk_full_error",
    "download_atomically",
    "fsync_dir",
    "is_disk_full",
    "open_regular",
    "open_regular_fd",
    "raising_disk_full",
    "syncfs",
    "tmp_name",
    "unlink_quiet",
    "write_all",
]

#: errno values that mean "no space left" (a full device, or the user's quota).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
#: errno values that mean "this user may not write here".
NOT_WRITABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def open_regular(path: str, *, follow_links: bool = True) -> IO[bytes]:
    """``open(path, "rb")`` that never blocks and never reads a device: a FIFO planted where a
    state file, index.json or a chunk is expected blocked the open (a reader, verify, a run)
    for ever, and a link to ``/dev/zero`` read without end. Raises IsADirectoryError for a
    directory (as ``open`` does) and CorruptStateError for anything else that is not a
    regular file; FileNotFoundError when it is missing. With ``follow_links=False`` a symbolic
    link at ``path`` (its last part) is refused too (CorruptStateError): the local backend never
    reads its own keys through links (an index.json replaced by a link to another dataset's
    was read as this one's)."""
    fd, _ = open_regular_fd(path, follow_links=follow_links)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_regular_fd(path: str, *, follow_links: bool = True) -> tuple[int, os.stat_result]:
    """:func:`open_regular`'s checks, giving the raw descriptor (the caller closes it) and its
    ``fstat``: for small state files read whole with ``os.read``, with no buffered file object
    and no second ``fstat`` per read (a worker reads its leases before every record write)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links and os.path.islink(path):
            raise CorruptStateError(
                f"{path} is a symbolic link; shardwright never reads a dataset's files or state through "
                "links (one could point at another dataset or a secret): put the file itself there"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        refuse_unless_regular(st.st_mode, path)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def refuse_unless_regular(mode: int, path: str) -> None:
    """CorruptStateError when the file opened at ``path`` (its fstat ``mode``) is not a regular
    file: a FIFO, device or socket put where our state or a dataset's file should be."""
    if not stat.S_ISREG(mode):
        raise CorruptStateError(
            f"{path} is not a regular file (a FIFO, a device or a socket was put there); "
            "shardwright keeps its state and datasets in regular files only: remove it"
        )


def append_regular(path: str, data: bytes, create: bool, dir_fd: int | None = None) -> None:
    """Append ``data`` to the regular file ``path`` (``create``: a new one, O_EXCL), never
    through a link (O_NOFOLLOW) and never into a FIFO, device or socket planted there
    (O_NONBLOCK: a FIFO fails instead of blocking; then the fstat)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if create:
        flags |= os.O_CREAT | os.O_EXCL
    fd = os.open(path, flags, 0o644, dir_fd=dir_fd)
    try:
        refuse_unless_regular(os.fstat(fd).st_mode, path)
        write_all(fd, [data])
    finally:
        os.close(fd)


#: Names made by :func:`tmp_name`: ``.{name}.tmp-{pid}-{tid}-{random}``. Groups ``name`` (the
#: final file's name, possibly shortened) and ``pid`` (the writer, to tell a crash leftover
#: from a write in progress).
TMP_NAME_RE = re.compile(r"^\.(?P<name>.*)\.tmp-(?P<pid>\d+)-\d+-[0-9a-f]+$")


def tmp_name(path: str) -> str:
    """A scratch name next to ``path`` that no other process or thread can pick.

    pid + thread id + random: two runs writing the same key at the same time (which the
    leases should prevent, but a stale run may still be alive) never share a temp file. It is
    in the same directory as ``path`` so that the final rename stays within one file system
    (atomic) and it starts with a dot so listings can skip it (see :data:`TMP_NAME_RE`).
    """
    d, name = os.path.split(path)
    # 180 characters of the name keep the whole scratch name under NAME_MAX (255).
    return os.path.join(d, f".{name[:180]}.tmp-{os.getpid()}-{threading.get_ident()}-{random.getrandbits(40):010x}")


def fsync_dir(path: str) -> None:
    """Make a rename/link/unlink in directory ``path`` durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; their renames are durable anyway
    finally:
        os.close(fd)


_LIBC: ctypes.CDLL | None = None


def syncfs(path: str) -> bool:
    """Linux syncfs(2) on the file system holding ``path``.

    One journal commit makes every earlier write on it durable, far cheaper than an fsync per
    file for many small chunks. Returns False where unavailable (callers then fsync per
    file); raises OSError when the flush itself failed (the data is not durable).
    """
    global _LIBC
    if sys.platform != "linux":
        return False
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        if _LIBC.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return True
    finally:
        os.close(fd)


def unlink_quiet(path: str) -> None:
    """Remove ``path`` if possible; cleanup must never hide the error that caused it."""
    try:
        os.unlink(path)
    except OSError:
        pass


def download_atomically(dst: str, pieces: Iterable[bytes], *, durable: bool) -> None:
    """Write ``pieces`` to the local file ``dst`` so that it appears whole or not at all: a
    fresh temp file next to it, fsync-ed when ``durable``, then renamed over it; the temp file
    is removed if anything fails (a full disk stays an OSError: the caller's directory, the
    caller's fix)."""
    dst = os.path.abspath(dst)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = tmp_name(dst)
    try:
        with open(tmp, "xb") as out:
            for piece in pieces:
                out.write(piece)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.replace(tmp, dst)
    except BaseException:
        unlink_quiet(tmp)
        raise


def is_disk_full(exc: BaseException) -> bool:
    """True if ``exc`` is an OSError saying the device or the quota is full."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def disk_full_error(exc: OSError, where: str, fix: str) -> StorageError:
    """The StorageError for a full disk: ``disk full while {where}: {fix}``.

    Only the caller knows the fix (a writer resumes by rerunning the call; the reader's
    cache can be bounded lower or moved), so each caller passes its own. Raise it ``from
    exc`` to keep the errno.
    """
    return StorageError(f"disk full while {where}: {fix}")


@contextlib.contextmanager
def raising_disk_full(where: str, fix: str) -> Iterator[None]:
    """Turn a disk-full OSError raised in the block into :func:`disk_full_error`; other
    errors pass through unchanged."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(exc, where, fix) from exc
        raise


_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def write_all(fd: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
    """Write every byte of ``parts`` in order: writev in batches of IOV_MAX buffers, going on
    after a short write (Linux caps one call at about 2 GiB)."""
    views = [view for view in (memoryview(part).cast("B") for part in parts) if len(view)]
    while views:
        batch = views[:_IOV_MAX]
        written = os.writev(fd, batch)
        done = 0
        while done < len(batch) and written >= len(batch[done]):
            written -= len(batch[done])
            done += 1
        del views[:done]
        if written:  # a part written in part: its rest goes first
            views[0] = views[0][written:]

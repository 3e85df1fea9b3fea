"""Placing a file whose name is derived from its content (a chunk named by its checksum) on
local disk without ever replacing a complete copy already there.

Why not a plain rename: the copy there may be the one a durable commit record names (written
and flushed by the writer that holds the shard's claim). A fenced writer that wakes up late
writes the same name with the same bytes; a rename would swap the flushed inode for its fresh,
unflushed one, and a power cut before its next barrier would leave the recorded chunk torn.
link(2) never replaces, so the flushed copy stays. A copy there that does *not* hold our bytes
can only be the torn leftover of a crash (names follow content; a torn file is one whose
barrier never completed, so no durable record names it): that one is replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence

from .files import TMP_NAME_RE, fsync_dir, unlink_quiet, write_all

__all__ = ["holds", "place_keeping_same", "remove_leftover_temps", "write_temp_at"]

# link(2) errors of file systems without hard links (some FUSE and network mounts)
NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV)
_READ = 1 << 20


def holds(directory: int | None, name: str, parts: Sequence[bytes]) -> bool:
    """Whether ``name`` (in ``directory``, not followed if a link) holds exactly ``parts``.
    Reads at most the expected size, a block at a time: a huge leftover costs one fstat."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
    except OSError:
        return False
    try:
        expected = sum(len(p) for p in parts)
        if os.fstat(fd).st_size != expected:
            return False
        for part in parts:
            view, offset = memoryview(part).cast("B"), 0
            while offset < len(view):
                block = os.read(fd, min(_READ, len(view) - offset))
                if not block or block != view[offset : offset + len(block)]:
                    return False
                offset += len(block)
        return True
    finally:
        os.close(fd)


def place_keeping_same(directory: int | None, tmp: str, name: str, parts: Sequence[bytes], replace_locked) -> bool:
    """Put the written temp file ``tmp`` at ``name`` (both in ``directory``) unless ``name``
    already holds exactly ``parts``; returns True when the existing copy was kept. With
    ``directory`` None the names are paths. The caller
    removes ``tmp`` afterwards either way. ``replace_locked(fn)`` runs ``fn`` under the key's
    side lock: every replace of an existing name goes through it (a torn leftover, or any
    write where the file system has no hard links)."""

    def check_then_replace() -> bool:
        if holds(directory, name, parts):
            return True
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
        return False

    try:
        os.link(tmp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        return False
    except FileExistsError:
        pass
    except OSError as e:
        if e.errno not in NO_HARD_LINKS:
            raise
        return bool(replace_locked(check_then_replace))
    if holds(directory, name, parts):
        return True
    # A torn leftover, named by no durable record. Replaced under the key's lock, checked
    # again there: two writers that both saw it torn must not both replace it, or the second
    # could put its unflushed copy over the first's, already flushed and recorded.
    return bool(replace_locked(check_then_replace))


def write_temp_at(directory: int, tmp: str, parts: Sequence[bytes], durable: bool) -> None:
    """Write a fresh temp file ``tmp`` in ``directory`` (a pinned output's descriptor: never
    through a link), fsync-ed when ``durable``; removed again if the write fails."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=directory)
    try:
        try:
            write_all(fd, parts)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise


def remove_leftover_temps(root: str, prefix: str, lock_suffix: str) -> int:
    """Temp files (``storage.files.tmp_name``) directly in ``root`` for names starting with
    ``prefix``: what writers SIGKILLed between creating and placing a file left; and the side
    lock files (``.{name}{lock_suffix}``) that replacing a torn leftover took. Hidden from
    listings and never read, but they are files in the dataset's folder, so two datasets of
    the same call would not hold the same files (issue 35)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return 0
    removed = 0
    for name in names:
        match = TMP_NAME_RE.match(name)
        if (match and match["name"].startswith(prefix)) or (
            name.startswith("." + prefix) and name.endswith(lock_suffix)
        ):
            unlink_quiet(os.path.join(root, name))
            removed += 1
    if removed:
        fsync_dir(root)
    return removed

"""An exclusive lock on a side file, across processes and threads: the local backend's
compare-and-swap and content-named writes serialise on one (:mod:`.local`)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["FileLock"]


class FileLock:
    """An exclusive lock on a side file; excludes other processes and other threads.

    ``flock`` locks belong to the open file description, so two opens in one process also
    exclude each other (unlike ``fcntl``/POSIX record locks).
    """

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._fallback: Any = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - non-POSIX
            os.close(fd)
            import filelock

            self._fallback = filelock.FileLock(self.path + ".filelock")
            self._fallback.acquire()
            return
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        elif self._fallback is not None:  # pragma: no cover
            self._fallback.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

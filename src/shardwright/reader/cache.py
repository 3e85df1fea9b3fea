"""The local chunk cache of a remote dataset: atomic, shared between processes, bounded, and
safe against a cache directory planted by someone else.

Layout: ``<root>/<name>/<chunk files>``; ``<name>`` is :func:`cache_name` of the dataset's
location and version. See the package docstring for the guarantees; this module adds:

* **ownership**: the root and the dataset directory are created owner-only (0700). An
  existing one that is a symlink, is owned by another user, or is writable by others is
  refused (:class:`~shardwright.errors.StorageError`): a planted link would make the cache
  write through it and eviction delete the files it points to.
* eviction only walks real directories marked by :data:`CACHE_MARKER`, never a symlink, and
  only deletes regular files.
"""

from __future__ import annotations

import errno
import hashlib
import json
import mmap
import os
import re
import stat
import threading
import time

from ..errors import CorruptStateError, StorageError
from ..format import ChunkEntry, check_checksum
from ..process import pid_alive
from ..protocol.index import index_source
from ..storage.files import TMP_NAME_RE, disk_full_error, is_disk_full, unlink_quiet
from .metrics import cache_outcome

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX: no in-use protection against eviction
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CACHE_DIR_ENV", "CACHE_MARKER", "DEFAULT_MAX_CACHE_BYTES", "ChunkCache", "Pin", "cache_name",
    "check_private_dir", "default_cache_root", "try_evict",
]  # fmt: skip

DEFAULT_MAX_CACHE_BYTES = 10 * 1000**3
CACHE_DIR_ENV = "SHARDWRIGHT_CACHE_DIR"
CACHE_MARKER = ".shardwright-cache.json"  # marks a directory eviction may touch
_CACHE_LOCK = ".shardwright-cache.lock"  # cache-wide eviction lock, in the cache root
_LOCK_SUFFIX = ".lock"
_LOCK_DIR = ".locks"  # per-chunk download locks: not in the chunks' directory, whose mtime we watch
_CACHE_FULL_FIX = "free space, lower max_cache_bytes or pass another cache_dir"
_STALE_TMP_SECONDS = 60.0
_FETCH_ATTEMPTS = 5
_RESCAN_SECONDS = 1.0


def default_cache_root(cache_dir: str | os.PathLike | None) -> str:
    """``cache_dir``, else ``$SHARDWRIGHT_CACHE_DIR``, else ``~/.cache/shardwright`` (absolute)."""
    root = (
        os.fspath(cache_dir)
        if cache_dir is not None
        else (os.environ.get(CACHE_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "shardwright"))
    )
    return os.path.abspath(os.path.expanduser(root))


def _refuse(path: str, why: str) -> StorageError:
    return StorageError(
        f"refusing the chunk cache directory {path}: {why}. A cache directory must be a real directory "
        f"owned by you and not writable by others; pass cache_dir= (or set {CACHE_DIR_ENV}) to such a directory"
    )


def check_private_dir(path: str) -> None:
    """Create ``path`` owner-only if missing; refuse a symlink, another user's or a world-writable one.

    Raises:
        StorageError: the directory is unsafe (or cannot be created).
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, f"it is a symbolic link (to {os.readlink(path)!r})")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a directory")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise _refuse(path, f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})")
    if st.st_mode & stat.S_IWOTH:
        raise _refuse(path, "it is writable by every user")


def cache_name(url: str, storage, index_bytes: bytes) -> str:
    """Cache directory name: the dataset's location and version."""
    try:
        version = json.loads(index_bytes).get("updated_at")
    except Exception:
        version = None
    if version is None:
        version = hashlib.sha256(index_bytes).hexdigest()
    endpoint = getattr(storage, "endpoint", "")
    digest = hashlib.sha256(f"{url}\0{endpoint}\0{version}".encode()).hexdigest()[:20]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.split("://", 1)[-1])[-40:].strip("-.")
    return f"{tail}-{digest}" if tail else digest


class Pin:
    """An open, shared-``flock``ed cache file: while it is open, no process evicts the file."""

    def __init__(self, path: str, fd: int, size: int):
        self.path, self.fd, self.size = path, fd, size

    def map(self) -> bytes | memoryview:
        if self.size == 0:
            return b""
        return memoryview(mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ))

    def read(self) -> bytes:
        with os.fdopen(os.dup(self.fd), "rb") as f:
            return f.read()

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)  # drops the shared flock (mmaps keep their own reference)
            except OSError:
                pass
            self.fd = -1

    def __del__(self):
        self.close()


def _filelock(path: str):
    import filelock

    # Short polls: a reader waiting for a chunk another thread or process is downloading
    # should get it as soon as it is there.
    return filelock.FileLock(path, poll_interval=0.005)


class ChunkCache:
    """Chunk files of one remote dataset in ``root/name``; the bound covers all of ``root``."""

    def __init__(
        self,
        root: str,
        name: str,
        url: str,
        storage,
        max_bytes: int,
        check_checksums: bool = True,
        sizes_known: bool = False,
    ):
        self.root, self.name, self.url, self.storage, self.max_bytes = root, name, url, storage, max_bytes
        self.check_checksums = check_checksums  # verify each download against index.json's checksum
        # Uncompressed chunks: index.json gives the file size, and a file of another size is
        # left to the reader's size check, whose message says "truncated" plainly.
        self.sizes_known = sizes_known
        self.directory = os.path.join(root, name)
        self._ready_pid: int | None = None
        self.reader_waits = 0  # reads (not prefetches) that found their chunk missing, in this process
        self._estimate: tuple | None = None  # (pid, bytes, monotonic time of the scan, dir mtime)
        self._inflight: tuple[int, threading.Lock, list[int]] | None = None  # (pid, lock, [bytes downloading])

    def _downloads(self) -> tuple[threading.Lock, list[int]]:
        """This process's lock and running total of bytes being downloaded by its threads (the
        reader and its prefetchers): each download makes room for the others' too."""
        if self._inflight is None or self._inflight[0] != os.getpid():  # new, or a forked copy
            self._inflight = (os.getpid(), threading.Lock(), [0])
        return self._inflight[1], self._inflight[2]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_inflight"] = None  # a lock does not pickle; each process makes its own
        return state

    def check_existing(self) -> None:
        """Refuse now (not at the first download) a root or dataset directory that is unsafe."""
        for path in (self.root, self.directory):
            if os.path.lexists(path):
                check_private_dir(path)

    def _ensure_dir(self) -> None:
        if self._ready_pid == os.getpid():
            return
        try:
            check_private_dir(self.root)
            check_private_dir(self.directory)
            check_private_dir(os.path.join(self.directory, _LOCK_DIR))
            marker = os.path.join(self.directory, CACHE_MARKER)
            if not os.path.exists(marker):
                tmp = f"{marker}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w") as f:
                    json.dump({"url": self.url, "created_at": time.time()}, f)
                os.replace(tmp, marker)
        except OSError as exc:
            raise StorageError(
                f"cannot use the chunk cache {self.directory} ({exc.strerror or exc}): pass cache_dir= (or set "
                f"{CACHE_DIR_ENV}) to a writable directory with free space"
            ) from exc
        self._ready_pid = os.getpid()

    def path_of(self, entry: ChunkEntry) -> str:
        return os.path.join(self.directory, *entry.filename.split("/"))

    def lock_path(self, path: str) -> str:
        rel = os.path.relpath(path, self.directory).replace(os.sep, "%")
        return os.path.join(self.directory, _LOCK_DIR, rel + _LOCK_SUFFIX)

    # -- pinning ------------------------------------------------------------------------

    @staticmethod
    def _pin(path: str) -> Pin | None:
        """Open and share-lock ``path``; None if it is missing or was evicted meanwhile."""
        try:
            # O_NOFOLLOW: a link in the cache is never read through (the cache only holds regular files).
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"{path} in the chunk cache is a symbolic link; refusing to read through it"
                ) from None
            raise
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits while an evictor holds it exclusively
            st = os.fstat(fd)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                now = None
            if now is None or st.st_nlink == 0 or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
                os.close(fd)  # evicted (or replaced) between open and lock
                return None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.utime(fd)  # most recently used: evicted last
        except OSError:
            pass
        return Pin(path, fd, st.st_size)

    def open(self, entry: ChunkEntry, still_wanted=None) -> Pin | None:
        """The chunk's cache file, pinned; downloaded first if it is not cached.

        ``still_wanted`` (prefetch): checked before downloading; None is returned if it says no.
        """
        self._ensure_dir()
        path = self.path_of(entry)
        for attempt in range(_FETCH_ATTEMPTS):
            pin = self._pin(path)
            if pin is not None:
                if attempt == 0:
                    cache_outcome(False, 0)
                return pin
            if attempt == 0 and still_wanted is None:
                self.reader_waits += 1  # a reader needs a chunk that is not here: it waits for it
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            downloaded = False
            with _filelock(self.lock_path(path)):
                pin = self._pin(path)  # another process may have fetched it while we waited
                if pin is None and still_wanted is not None and not still_wanted():
                    return None
                if pin is None:
                    lock, downloading = self._downloads()
                    with lock:
                        others = downloading[0]
                        downloading[0] += entry.chunk_bytes
                    try:
                        self.evict(self.max_bytes - entry.chunk_bytes - others)
                        self._download(entry, path)
                    except FileNotFoundError:
                        raise CorruptStateError(
                            f"chunk {self.url}/{entry.filename} named in {index_source(self.url)} is missing; "
                            "restore it or rerun optimize with mode='overwrite'"
                        ) from None
                    except OSError as exc:
                        if is_disk_full(exc):
                            raise disk_full_error(
                                exc, f"caching {self.url}/{entry.filename} in {self.directory}", _CACHE_FULL_FIX
                            ) from exc
                        raise
                    finally:
                        with lock:
                            downloading[0] -= entry.chunk_bytes
                    downloaded = True
                    pin = self._pin(path)
                    if pin is not None:
                        self._added(pin.size)
                        cache_outcome(True, pin.size)
            if pin is not None:
                if downloaded:
                    self.evict(self.max_bytes)
                return pin
        raise StorageError(
            f"chunk {self.url}/{entry.filename} was evicted from the cache {self.directory} {_FETCH_ATTEMPTS} times "
            f"before it could be read: max_cache_bytes ({self.max_bytes:,}) is too small for the readers sharing "
            f"{self.root}; raise it"
        )

    def _download(self, entry: ChunkEntry, path: str) -> None:
        """Fetch a chunk into ``path`` and check its checksum (the bytes crossed the network
        and the object store): a mismatch is fetched once more, then CorruptStateError. What
        lands in the cache was checked, so later loads from the cache (by any process) are not."""
        for attempt in range(2):
            self.storage.download_to(entry.filename, path, durable=False)  # sizes are checked on use
            if not (self.check_checksums and entry.checksum):
                return
            try:
                try:
                    f = open(path, "rb", buffering=0)
                except FileNotFoundError:
                    return  # evicted by another process already: the caller's pin sees it gone and fetches again
                with f:
                    size = os.fstat(f.fileno()).st_size
                    if self.sizes_known and size not in (
                        entry.chunk_bytes,
                        entry.chunk_bytes + 4 * (entry.chunk_size + 2),
                    ):
                        return
                    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
                try:
                    check_checksum(
                        data,
                        entry.checksum,
                        f"{self.url}/{entry.filename}",
                        "restore it from a good copy or rerun optimize with mode='overwrite' "
                        "(`shardwright verify` lists every damaged chunk)",
                    )
                finally:
                    if isinstance(data, mmap.mmap):
                        data.close()
                return
            except CorruptStateError:
                unlink_quiet(path)
                if attempt:
                    raise

    def discard(self, pin: Pin) -> None:
        """Delete a bad cache file (if it is still the one pinned), then unpin it."""
        try:
            with _filelock(self.lock_path(pin.path)):
                st = os.fstat(pin.fd)
                try:
                    now = os.stat(pin.path)
                    if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                        os.unlink(pin.path)
                except FileNotFoundError:
                    pass
        finally:
            pin.close()

    # -- eviction -----------------------------------------------------------------------

    def _scan(self) -> tuple[int, list[tuple[float, int, str]]]:
        """(bytes in the cache root, evictable chunk files as (mtime, size, path))."""
        total = 0
        files: list[tuple[float, int, str]] = []
        now = time.time()
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return 0, []
        for sub in names:
            directory = os.path.join(self.root, sub)
            try:
                if not stat.S_ISDIR(os.lstat(directory).st_mode):
                    continue  # a symlink (or a file) in the root is never followed
                if not stat.S_ISREG(os.lstat(os.path.join(directory, CACHE_MARKER)).st_mode):
                    continue
            except OSError:
                continue  # not ours: never touched
            for dirpath, dirs, filenames in os.walk(directory):
                dirs[:] = [d for d in dirs if d != _LOCK_DIR]
                for fname in filenames:
                    path = os.path.join(dirpath, fname)
                    if fname == CACHE_MARKER or fname.endswith(_LOCK_SUFFIX):
                        continue
                    try:
                        st = os.lstat(path)
                    except FileNotFoundError:
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        continue  # only files this cache wrote (regular files) are counted or evicted
                    m = TMP_NAME_RE.match(fname)  # Storage.download_to's temp files
                    if m is not None:  # a download in progress, or left by a killed process
                        if now - st.st_mtime > _STALE_TMP_SECONDS and not pid_alive(int(m.group("pid"))):
                            unlink_quiet(path)
                            continue
                        total += st.st_size
                        continue
                    if fname.endswith(".tmp"):  # a marker being written
                        continue
                    total += st.st_size
                    files.append((st.st_mtime, st.st_size, path))
        return total, files

    # A scan stats every file of the cache root: with many small chunks that costs more than
    # the download. So this process remembers the total of its last scan plus its own
    # downloads, and skips the scan while that stays under the target, the scan is younger
    # than _RESCAN_SECONDS and the dataset directory's mtime (which other processes' downloads
    # and evictions change) is the one seen last. An eviction frees a tenth of the bound more
    # than asked, so that a full cache is not scanned again on every download.

    def _dir_mtime(self) -> int | None:
        try:
            return os.stat(self.directory).st_mtime_ns
        except OSError:
            return None

    def _known_total(self) -> int | None:
        known = self._estimate
        if known is None or known[0] != os.getpid() or time.monotonic() - known[2] > _RESCAN_SECONDS:
            return None
        if self._dir_mtime() != known[3]:
            return None
        return known[1]

    def _added(self, size: int) -> None:
        # under the downloads lock: two threads finishing together must not lose an update
        # (an estimate below the truth lets evict() skip its scan and the bound be overrun)
        lock, downloading = self._downloads()
        with lock:
            known = self._estimate
            if downloading[0] > 0:
                self._estimate = None  # other threads' files are landing too: rescan next time
            elif known is not None and known[0] == os.getpid():
                self._estimate = (known[0], known[1] + size, known[2], self._dir_mtime())

    def evict(self, target: int) -> None:
        """Delete least recently used, unpinned chunk files until the root holds <= target bytes."""
        target = max(0, target)
        known = self._known_total()
        if known is not None and known <= target:
            return
        try:
            lock = _filelock(os.path.join(self.root, _CACHE_LOCK))
            with lock:
                scanned_at = time.monotonic()
                mtime = self._dir_mtime()  # before the scan: a file landing during it invalidates the estimate
                total, files = self._scan()
                evicted = False
                if total > target:
                    low = max(0, target - self.max_bytes // 10)
                    for _mtime, size, path in sorted(files):
                        if try_evict(path, self.lock_path(path)):
                            total, evicted = total - size, True
                            if total <= low:
                                break
                # After our own deletions the directory's mtime cannot tell them from a file that
                # landed meanwhile: keep an estimate only when it is exact (else rescan next time).
                self._estimate = None if evicted else (os.getpid(), total, scanned_at, mtime)
        except OSError:
            pass  # eviction is best effort; reading must go on


def try_evict(path: str, lock_path: str) -> bool:
    """Delete ``path`` unless someone has it pinned (shared flock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # in use
        st = os.fstat(fd)
        try:
            now = os.stat(path)
        except FileNotFoundError:
            return False
        if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
            return False  # replaced meanwhile: a fresh download
        os.unlink(path)  # while holding the lock: a reader that opened it sees nlink == 0
        unlink_quiet(lock_path)  # filelock copes with a lock file unlinked under it
        return True
    finally:
        os.close(fd)

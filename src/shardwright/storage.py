"""Where a dataset's bytes live: one small interface, two backends (local disk and S3).

The engine never touches files or boto3 directly; it goes through :class:`Storage`, whose
handful of operations are exactly the guarantees "write once, resume after any crash" needs:

* ``write_bytes`` is an **atomic replace**: a reader (or a resuming run after a crash) sees
  either the old object or the new one, never a torn half-written file. Locally that is a
  temp file in the same directory + ``fsync`` + ``rename`` + ``fsync`` of the directory (so
  the rename itself survives a power cut); on S3 a single PUT (or a multipart upload, which
  only becomes visible when it is completed) is already all-or-nothing.
* ``create_exclusive`` is **create-if-absent**: of several processes or nodes racing to
  create the same key, exactly one gets ``True``. It is what makes a shard claimed or
  committed exactly once.
* ``read_versioned`` + ``replace_if_version`` are **compare-and-swap**. They exist for
  leases: a run holds a lease object that it renews (heartbeats) and that another run may
  take over only when it has expired. Renewing or stealing must be conditional on the lease
  still being the one we read, otherwise two runs could both believe they own the output
  and write the same shards twice.

The S3 backend lives in ``s3.py``.

Keys are ``'/'``-separated paths relative to the root (the ``output_dir``), e.g.
``"chunks/chunk-0-3.bin"``. Use :func:`open_storage` to get the right backend for a path or
an ``s3://bucket/prefix`` URL.
"""

from __future__ import annotations

import abc
import sys
import ctypes
import errno
import hashlib
import os
import random
import re
import threading


from .errors import OutputDirError, StorageError

__all__ = ["Storage", "LocalStorage", "open_storage"]


# Names of our own scratch files next to real keys (never reported by ``list``):
#   .{name}.tmp-{pid}-{tid}-{random}   a write in progress (or left by a crash)
#   .{name}.cas-lock                   the side lock that serialises compare-and-swap
_TMP_RE = re.compile(r"^\..*\.tmp-\d+-\d+-[0-9a-f]+$")
_LOCK_SUFFIX = ".cas-lock"
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


def _is_internal_name(name: str) -> bool:
    return name.startswith(".") and (bool(_TMP_RE.match(name)) or name.endswith(_LOCK_SUFFIX))


def _check_key(key: str) -> str:
    """Reject keys that could escape the root or alias another key ('a//b', '../x', '/x')."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"storage key must be a non-empty str, got {key!r}")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid storage key {key!r}: use '/'-separated names without '.', '..' or empty parts")
    return key


class Storage(abc.ABC):
    """The operations the engine and the reader need, with their atomicity guarantees.

    Implementations must be safe to use from several threads, and picklable so that worker
    processes (forked or spawned) can get a copy; a copy opens its own connections.
    """

    #: What to show users for this location (never contains secrets).
    url: str

    @abc.abstractmethod
    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        """Create or atomically replace ``key`` with ``data``.

        Readers see the old content or the new, never a mix. With ``durable=True`` the data
        survives a crash of this process or machine once this returns. ``durable=False``
        defers the (expensive, local-disk) flush to the next :meth:`barrier`, so one flush
        serves many writes; until then a power cut may lose or truncate what was written,
        so nothing durable may name such a key before the barrier.
        """

    def barrier(self) -> None:
        """Make every earlier ``durable=False`` write of this object (this process) durable.

        A no-op where every write is durable anyway (S3).
        """

    @abc.abstractmethod
    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` only if it does not exist yet.

        Returns True if this call created it, False if the key already existed. Of any
        number of concurrent callers (threads, processes, machines) exactly one wins.
        Put something unique to the caller in ``data`` (e.g. a run id) if you need to tell,
        after a retried request on a flaky network, who won.
        """

    @abc.abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """Return the whole content of ``key``; raise FileNotFoundError if it is missing."""

    @abc.abstractmethod
    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """Return ``(content, version)`` or None if missing.

        ``version`` is an opaque token that changes on every replace; pass it to
        :meth:`replace_if_version`.
        """

    @abc.abstractmethod
    def replace_if_version(self, key: str, data: bytes, version: str) -> bool:
        """Compare-and-swap: replace ``key`` with ``data`` only if it is still at ``version``.

        Returns False (and changes nothing) if someone replaced it since it was read, or it
        was deleted. This is what makes lease renewal and lease takeover safe.
        """

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """True if ``key`` exists."""

    @abc.abstractmethod
    def size(self, key: str) -> int:
        """Size of ``key`` in bytes; FileNotFoundError if missing."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """All keys starting with ``prefix`` (recursively), sorted, relative to the root.

        ``prefix`` is a plain string prefix ("chunks/" lists a directory, "chunks/chunk-1"
        lists the keys starting so). Scratch files of in-progress writes are never listed.
        """

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is fine."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Delete every key starting with ``prefix`` ("" empties the whole output)."""

    @abc.abstractmethod
    def local_path(self, key: str) -> str | None:
        """Filesystem path of ``key`` when it is on local disk (so readers can mmap it), else None."""

    @abc.abstractmethod
    def download_to(self, key: str, local_path: str, *, durable: bool = True) -> None:
        """Copy ``key`` to the file ``local_path`` atomically (temp file + rename).

        Meant for a reader's cache: a crash mid-download never leaves a partial file at
        ``local_path``. FileNotFoundError if ``key`` is missing. ``durable=False`` skips the
        fsync, for copies that are checked on use and can be fetched again.
        """

    def with_short_retries(self, seconds: float = 5.0) -> "Storage":
        """This storage, giving up on a failing operation after about ``seconds`` (for
        best-effort calls such as releasing a lease, which expires on its own anyway)."""
        return self

    def check(self) -> None:
        """Cheap sanity check at run start; raises a StorageError/OutputDirError with the fix."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


# --------------------------------------------------------------------------------------
# Local disk
# --------------------------------------------------------------------------------------


def _tmp_name(path: str) -> str:
    """A scratch name next to ``path`` that no other process or thread can pick.

    pid + thread id + random: two runs writing the same key at the same time (which the
    leases should prevent, but a stale run may still be alive) never share a temp file.
    """
    d, name = os.path.split(path)
    return os.path.join(
        d, f".{name[:180]}.tmp-{os.getpid()}-{threading.get_ident()}-{random.getrandbits(40):010x}"
    )


def _fsync_dir(path: str) -> None:
    """Make a rename/link/unlink in directory ``path`` durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _syncfs(path: str) -> bool:
    """Linux syncfs(2) on the filesystem holding ``path``: one journal commit that makes every
    earlier write on it durable (far cheaper than an fsync per file for many small chunks).
    False where unavailable, so callers fall back to fsync per file."""
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


_LIBC = None


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class LocalStorage(Storage):
    """A directory on a local (or network) filesystem.

    Durability: every write goes to a unique temp file in the target's directory, is
    ``fsync``-ed, then renamed (or hard-linked, for create-if-absent) into place, and the
    directory is ``fsync``-ed so the new name itself survives a power loss. Rename and link
    within one directory are atomic on POSIX filesystems, so readers never see a torn file.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.url = self.root
        self._pending_pid: int | None = None  # durable=False writes awaiting barrier()

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_pending_pid", "_pending", "_pending_lock"):
            state.pop(k, None)
        state["_pending_pid"] = None
        return state

    def _pending_set(self) -> tuple[threading.Lock, set]:
        # Per process: a forked child starts with no pending writes and a fresh lock.
        if self._pending_pid != os.getpid():
            self._pending_lock = threading.Lock()
            self._pending: set[str] = set()
            self._pending_pid = os.getpid()
        return self._pending_lock, self._pending

    # -- helpers -------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *_check_key(key).split("/"))

    def _mkdirs(self, directory: str) -> None:
        try:
            os.makedirs(directory, exist_ok=True)
        except (NotADirectoryError, FileExistsError) as e:
            raise OutputDirError(
                f"cannot create directory {directory}: a parent path is a file, not a directory; "
                f"remove or rename that file, or choose another output_dir"
            ) from e
        except OSError as e:
            self._raise_os_error(e, directory)

    def _raise_os_error(self, e: OSError, path: str) -> None:
        if e.errno in _DISK_FULL:
            raise StorageError(
                f"disk full while writing {path}: free space and rerun the same call to resume; "
                f"nothing committed was lost"
            ) from e
        if e.errno in _NOT_WRITABLE:
            raise OutputDirError(
                f"cannot write {path}: {e.strerror}; make {self.root} writable for this user "
                f"or choose another output_dir"
            ) from e
        raise e

    def _write_tmp(self, path: str, data: bytes, fsync: bool = True) -> str:
        """Write ``data`` to a fresh (fsync-ed) temp file next to ``path``; return its name."""
        tmp = _tmp_name(path)
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:  # first write into this directory (no stat per write)
                self._mkdirs(os.path.dirname(path))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            self._raise_os_error(e, path)
        try:
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException as e:
            _unlink_quiet(tmp)
            if isinstance(e, OSError):
                self._raise_os_error(e, path)
            raise
        return tmp

    # -- Storage API ---------------------------------------------------------------------

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        path = self._path(key)
        tmp = self._write_tmp(path, data, fsync=durable)
        try:
            os.replace(tmp, path)
        except BaseException as e:
            _unlink_quiet(tmp)
            if isinstance(e, OSError):
                self._raise_os_error(e, path)
            raise
        if durable:
            _fsync_dir(os.path.dirname(path))
        else:
            lock, pending = self._pending_set()
            with lock:
                pending.add(path)

    def barrier(self) -> None:
        """fsync every file written with ``durable=False`` since the last barrier, then their
        directories (so the names survive too). One barrier per batch of chunks replaces an
        fsync per file and per directory entry."""
        lock, pending = self._pending_set()
        with lock:
            paths = sorted(pending)
            pending.clear()
        if not paths:
            return
        try:
            if _syncfs(self.root):
                return  # one flush of the filesystem: every file, its data and its name
        except OSError as e:
            with lock:  # not durable: a later barrier must try again
                pending.update(paths)
            self._raise_os_error(e, self.root)
        dirs = set()
        i, path = 0, self.root
        try:
            for i, path in enumerate(paths):
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    continue  # deleted or replaced since: whoever did that owns durability
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                dirs.add(os.path.dirname(path))
            for d in sorted(dirs):
                _fsync_dir(d)
        except OSError as e:
            with lock:  # not durable: a later barrier must try again
                pending.update(paths[i:])
            self._raise_os_error(e, path)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        # Write the full content first, then hard-link it into place: link() fails with
        # EEXIST if the name exists, atomically, so exactly one racer wins and the winner's
        # file is complete from the moment it becomes visible.
        path = self._path(key)
        if os.path.lexists(path):
            return False
        tmp = self._write_tmp(path, data)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                    self._raise_os_error(e, path)
                # Filesystem without hard links: serialise through the side lock instead.
                with self._cas_lock(path):
                    if os.path.lexists(path):
                        return False
                    os.replace(tmp, path)
            _fsync_dir(os.path.dirname(path))
            return True
        finally:
            _unlink_quiet(tmp)

    def read_bytes(self, key: str) -> bytes:
        with open(self._path(key), "rb") as f:
            return f.read()

    @staticmethod
    def _version_of(f, data: bytes) -> str:
        # Inode + mtime change on every atomic replace (the new content is a new inode);
        # the content hash guards against inode reuse with an equal mtime.
        st = os.fstat(f.fileno())
        return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{hashlib.sha1(data).hexdigest()}"

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
                return data, self._version_of(f, data)
        except FileNotFoundError:
            return None

    def _cas_lock(self, path: str):
        d, name = os.path.split(path)
        return _FileLock(os.path.join(d, f".{name}{_LOCK_SUFFIX}"))

    def replace_if_version(self, key: str, data: bytes, version: str) -> bool:
        # All compare-and-swaps of one key serialise on a side lock file, so "read the
        # current version, compare, replace" is one step for every CAS caller. (Plain
        # write_bytes does not take the lock: leases are only ever written through CAS or
        # create_exclusive.)
        path = self._path(key)
        if not os.path.isdir(os.path.dirname(path)):
            return False
        try:
            lock = self._cas_lock(path)
            lock.acquire()
        except OSError as e:
            self._raise_os_error(e, path)
        try:
            try:
                with open(path, "rb") as f:
                    current = self._version_of(f, f.read())
            except FileNotFoundError:
                return False
            if current != version:
                return False
            self.write_bytes(key, data)
            return True
        finally:
            lock.release()

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def size(self, key: str) -> int:
        path = self._path(key)
        st = os.stat(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, "not a file", path)
        return st.st_size

    def _walk(self, prefix: str, include_internal: bool = False):
        """Yield (key, path) of files whose key starts with ``prefix``."""
        # Start walking at the deepest directory the prefix fully names.
        head = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(self.root, *head.split("/")) if head else self.root
        if not os.path.isdir(start):
            return
        for dirpath, dirnames, filenames in os.walk(start):
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            # Prune directories that cannot contain matching keys.
            dirnames[:] = [
                d for d in dirnames if (rel + d + "/").startswith(prefix) or prefix.startswith(rel + d + "/")
            ]
            for name in filenames:
                key = rel + name
                if key.startswith(prefix) and (include_internal or not _is_internal_name(name)):
                    yield key, os.path.join(dirpath, name)

    def list(self, prefix: str = "") -> list[str]:
        return sorted(k for k, _ in self._walk(prefix))

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as e:
            self._raise_os_error(e, path)
        _fsync_dir(os.path.dirname(path))

    def delete_prefix(self, prefix: str) -> None:
        # Also removes our scratch files (crash leftovers) and then empty directories, but
        # never the root itself.
        dirs = set()
        for _key, path in list(self._walk(prefix, include_internal=True)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                self._raise_os_error(e, path)
            dirs.add(os.path.dirname(path))
        for d in sorted(dirs, key=len, reverse=True):
            while d != self.root and d.startswith(self.root + os.sep):
                try:
                    os.rmdir(d)
                except OSError:
                    break
                d = os.path.dirname(d)
        for d in dirs:
            if os.path.isdir(d):
                _fsync_dir(d)
        _fsync_dir(self.root)

    def local_path(self, key: str) -> str | None:
        return self._path(key)

    def download_to(self, key: str, local_path: str, *, durable: bool = True) -> None:
        src = self._path(key)
        dst = os.path.abspath(local_path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = _tmp_name(dst)
        try:
            with open(src, "rb") as fin, open(tmp, "xb") as fout:
                while True:
                    buf = fin.read(8 << 20)
                    if not buf:
                        break
                    fout.write(buf)
                fout.flush()
                if durable:
                    os.fsync(fout.fileno())
            os.replace(tmp, dst)
        except BaseException as e:
            _unlink_quiet(tmp)
            if isinstance(e, OSError) and e.errno in _DISK_FULL:
                raise StorageError(
                    f"disk full while writing {dst}: free space and rerun the same call to resume; "
                    f"nothing committed was lost"
                ) from e
            raise

    def check(self) -> None:
        """Raise OutputDirError unless the root is a directory we can create files in."""
        _check_local_dir(self.root, create=False)


class _FileLock:
    """An exclusive lock on a side file; excludes other processes and other threads.

    ``flock`` locks belong to the open file description, so two opens in one process also
    exclude each other (unlike ``fcntl``/POSIX record locks).
    """

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

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
        elif getattr(self, "_fallback", None) is not None:  # pragma: no cover
            self._fallback.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def _check_local_dir(path: str, *, create: bool) -> None:
    """Make sure ``path`` is (or, with ``create``, becomes) a directory we can write into."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputDirError(
            f"output_dir {path} is a file, not a directory: remove it or choose another output_dir"
        )
    if not os.path.isdir(path):
        if not create:
            return
        try:
            os.makedirs(path, exist_ok=True)
        except (NotADirectoryError, FileExistsError) as e:
            raise OutputDirError(
                f"cannot create output_dir {path}: a parent path is a file, not a directory; "
                f"remove or rename that file, or choose another output_dir"
            ) from e
        except OSError as e:
            if e.errno in _NOT_WRITABLE:
                raise OutputDirError(
                    f"cannot create output_dir {path}: {e.strerror}; create it yourself or choose "
                    f"a location this user can write to"
                ) from e
            if e.errno in _DISK_FULL:
                raise StorageError(f"disk full while creating {path}: free space and rerun") from e
            raise
    # os.access lies for root and on some network filesystems: really create a file.
    probe = os.path.join(path, f".shardwright-probe.tmp-{os.getpid()}-{threading.get_ident()}-{random.getrandbits(40):010x}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
    except OSError as e:
        if e.errno in _DISK_FULL:
            raise StorageError(f"disk full in output_dir {path}: free space and rerun the same call") from e
        raise OutputDirError(
            f"output_dir {path} is not writable ({e.strerror}): fix its permissions "
            f"(e.g. chmod u+w, or a read-only mount) or choose another output_dir"
        ) from e
    finally:
        _unlink_quiet(probe)


# --------------------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------------------


def open_storage(
    output_dir: str | os.PathLike, storage_options: dict | None = None, *, create: bool = False
) -> Storage:
    """Return the Storage for a local path or an ``s3://bucket/prefix`` URL.

    ``storage_options`` only applies to S3 (boto3 client kwargs such as ``endpoint_url``,
    ``aws_access_key_id``, ``region_name``; plus ``config``, a dict merged into
    ``botocore.config.Config``); it is ignored for local paths.

    ``create=True`` (writers) makes a local directory if needed and checks that it is
    writable, raising OutputDirError naming the path and the fix. For S3 nothing is created;
    call :meth:`Storage.check` to validate bucket and credentials.
    """
    if isinstance(output_dir, str) and output_dir.startswith("s3://"):
        from .s3 import S3Storage  # boto3 is imported only by those who use S3

        return S3Storage(output_dir, storage_options)
    path = os.fspath(output_dir)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if path.startswith("file://"):
        path = path[len("file://"):]
    if "://" in path:
        raise OutputDirError(
            f"unsupported output_dir URL {path!r}: use a local path or s3://bucket/prefix"
        )
    storage = LocalStorage(path)
    if create:
        _check_local_dir(storage.root, create=True)
    elif os.path.exists(storage.root) and not os.path.isdir(storage.root):
        raise OutputDirError(
            f"output_dir {storage.root} is a file, not a directory: remove it or choose another output_dir"
        )
    return storage

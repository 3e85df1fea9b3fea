"""The :class:`Storage` interface: the few operations the engine and the reader need, each
with the guarantee "write once, resume after any crash" relies on.

* ``write_bytes`` is an **atomic replace**: a reader (or a resuming run after a crash) sees
  either the old object or the new one, never a torn half-written file.
* ``create_exclusive`` is **create-if-absent**: of several callers racing to create the same
  key, exactly one gets ``True`` — provided their ``data`` differ (see the method: on a
  flaky network a retried request is recognised as ours by its bytes). It is what lets
  exactly one run create the manifest, claim the on-disk format or take a free lease.
* ``read_versioned`` + ``replace_if_version`` are **compare-and-swap**. They exist for leases:
  a run holds a lease object that it renews (heartbeats) and that another run may take over
  only when it has expired. Renewing or stealing must be conditional on the lease still
  being the one we read, otherwise two runs could both believe they own the output.
* ``barrier`` ends a batch of ``durable=False`` writes: after it returns they survive a
  crash; before, any of them may be lost.
* ``read_range`` and ``list_info`` serve *inputs* (``shardwright.sources``): a ranged read
  (what pyarrow's file object needs) and a listing with each object's size and version
  (etag, generation, or a size+mtime token on local disk), which is how a source's identity
  is its metadata and a changed file is noticed on whichever host resumes.

Output keys and input keys
==========================
Keys a run *writes* are ours, so they are strict (:func:`check_key`): no ``//``, ``.`` or
``..`` part, which could alias another key or escape the root. Keys a run *reads as input*
are the user's, and in an object store ``a//b``, ``./x`` and ``../y`` are ordinary distinct
names. They are read through :meth:`Storage.input_view`: a read-only copy of the handle
whose key checks are :func:`check_input_key` (any non-empty key; on local disk, where
``..`` is navigation and not a name, no ``..`` part), and whose every write operation
raises PermissionError. So a relaxed key can never reach a write, and the strict check
stays the only one on every write path.

Keys are ``'/'``-separated paths relative to the root (the ``output_dir``), e.g.
``"index.json"``, ``"chunk-0-00003-000001.bin"`` or ``".shardwright/manifest.json"``.
Backends: :mod:`.local`, :mod:`.s3`, :mod:`.gcs`, :mod:`.azure`, :mod:`.memory`; :func:`~shardwright.storage.open_storage`
picks one by URL scheme.
"""

from __future__ import annotations

import abc
import builtins
import copy
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar, TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")

__all__ = ["ObjectInfo", "Storage", "check_input_key", "check_key", "check_range"]

#: The operations that change storage; an input view refuses every one of them.
WRITE_OPERATIONS = (
    "write_bytes",
    "write_parts",
    "write_content_named",
    "append_bytes",
    "remove_leftover_temps",
    "create_exclusive",
    "replace_if_version",
    "write_if_version",
    "delete_if_version",
    "delete",
    "delete_prefix",
    "barrier",
)


_ASK_SIZE_FROM = 64 << 20  # read_at_most: a HEAD before a GET that could be this large


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key (relative to the root), size in bytes, and a version token
    that changes whenever the content is replaced (S3 etag, GCS generation, Azure etag, or
    ``"{size}-{mtime_ns}"`` of a local file); ``mtime`` in seconds since 1970 when known."""

    key: str
    size: int
    version: str
    mtime: float | None = None


def check_range(start: int, length: int) -> None:
    """ValueError unless ``start`` and ``length`` of a ranged read are ints >= 0."""
    if type(start) is not int or type(length) is not int or start < 0 or length < 0:
        raise ValueError(f"read_range needs ints start >= 0 and length >= 0, got {start!r}, {length!r}")


def check_key(key: str) -> str:
    """Return ``key``; ValueError if it could escape the root or alias another key
    ('a//b', '../x', '/x', '')."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"storage key must be a non-empty str, got {key!r}")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid storage key {key!r}: use '/'-separated names without '.', '..' or empty parts")
    return key


def check_input_key(key: str, *, local: bool = False) -> str:
    """Return ``key`` as an input key: any non-empty str (``a//b``, ``./x`` and ``../y`` are
    names in an object store); on local disk (``local=True``) no ``..`` part, which is
    navigation there and could leave the root."""
    if not isinstance(key, str) or not key or "\0" in key:
        raise ValueError(f"input key must be a non-empty str without NUL, got {key!r}")
    if local and ".." in key.split("/"):
        raise ValueError(f"invalid local input key {key!r}: a '..' part would leave the directory")
    return key


def _read_only(*_args: object, **_kwargs: object) -> None:
    raise PermissionError("this storage handle is a read-only input view: it never writes")


class Storage(abc.ABC):
    """The operations the engine and the reader need, with their atomicity guarantees.

    Implementations must be safe to use from several threads. The local and S3 backends are
    picklable, so worker processes (forked or spawned) can get a copy that opens its own
    connections; :class:`~shardwright.storage.memory.MemoryStorage` is single-process.

    Subclasses implement the abstract operations; the other methods have defaults a backend
    may override (as fsspec's ``AbstractFileSystem`` does).
    """

    #: What to show users for this location (never contains secrets).
    url: str

    #: True on the read-only handle :meth:`input_view` returns (users' keys, no writes).
    is_input_view: bool = False

    #: False for a store that lives in one process's memory: no other process (a worker, a
    #: node of a multi-node run) can share it.
    shared_across_processes: ClassVar[bool] = True

    #: :meth:`map_requests` uses threads from this many requests on. An object store's round
    #: trip (milliseconds) is worth hiding behind 16 threads from two requests on; a local
    #: file answers in microseconds, where starting the threads costs more than a few dozen
    #: reads (a network file system's round trips make threads pay off again beyond that).
    PARALLEL_FROM: ClassVar[int] = 2
    #: Most requests :meth:`map_requests` has in flight at once.
    MAX_PARALLEL: ClassVar[int] = 16
    #: Seconds of calls :meth:`map_requests` makes in the caller's thread before it hands the
    #: rest to threads (None: none, the threads start at once). A local disk answers 80 reads
    #: of the page cache in ~0.6 ms, where 16 threads cost ~9 ms to start and share the GIL
    #: (issue 36: publish reading 80 record files); a network file system's first slow calls
    #: use up the budget and the rest overlap as before.
    SERIAL_FIRST: ClassVar[float | None] = None

    def checked_key(self, key: str, *, local: bool = False) -> str:
        """``key`` checked as this handle takes keys: strictly (:func:`check_key`), or as an
        input key on an :meth:`input_view`. Backends call it wherever a key becomes a name."""
        return check_input_key(key, local=local) if self.is_input_view else check_key(key)

    def input_view(self) -> Storage:
        """A read-only copy of this handle for reading users' inputs: keys are taken as they
        are (see the module docstring) and every write operation raises PermissionError.
        Picklable when this handle is."""
        view = copy.copy(self)
        view.mark_input_view()
        return view

    def mark_input_view(self) -> None:
        """Make this very handle the read-only input view (for backends whose pickling
        rebuilds the handle: they call it when unpickling a view)."""
        self.is_input_view = True
        for name in WRITE_OPERATIONS:
            setattr(self, name, _read_only)

    # -- abstract operations -------------------------------------------------------------

    @abc.abstractmethod
    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        """Create or atomically replace ``key`` with ``data``.

        Readers see the old content or the new, never a mix. With ``durable=True`` the data
        survives a crash of this process or machine once this returns. ``durable=False``
        defers the (expensive, local-disk) flush to the next :meth:`barrier`, so one flush
        serves many writes; until then a power cut may lose what was written, so nothing
        durable may name such a key before the barrier.
        """

    def write_parts(self, key: str, parts: Sequence[bytes], *, durable: bool = True) -> None:
        """:meth:`write_bytes` of the concatenation of ``parts`` (any bytes-like objects).

        A chunk of large items is its header and the items: a backend that can write them
        as they are (local disk: writev) skips a copy of the whole chunk. The default joins."""
        self.write_bytes(key, b"".join(parts), durable=durable)

    def write_content_named(self, key: str, parts: Sequence[bytes], *, durable: bool = True) -> None:
        """:meth:`write_parts` of a key whose name is derived from its content (a chunk named
        by its checksum): whoever writes ``key`` writes these very bytes, so a copy already
        there is as good as ours.

        The default replaces, which is harmless where a write is atomic and durable when it
        returns (the object stores): a late writer replaces the object with identical bytes.
        A backend whose fresh writes are durable only at :meth:`barrier` (local disk) must
        instead keep an existing complete copy: replacing a durable file that a commit record
        names with a not-yet-durable one would let a power cut tear it (docs/design.md)."""
        if len(parts) == 1:  # no joined copy of a chunk already in one piece
            self.write_bytes(key, parts[0], durable=durable)
        else:
            self.write_parts(key, parts, durable=durable)

    #: True where :meth:`append_bytes` adds to a file in place (local disk). An object store
    #: replaces a whole object on every write, so the protocol writes one record file per
    #: commit round there instead of appending to a log (protocol.record_log).
    APPENDS: ClassVar[bool] = False

    def append_bytes(self, key: str, data: bytes, *, create: bool) -> None:
        """Add ``data`` at the end of ``key``, a file only this process appends to.

        ``create=True``: ``key`` must not exist yet (FileExistsError, nothing written);
        ``create=False``: it must (FileNotFoundError). Unlike every other write this one is
        not atomic: a crash may leave a prefix of ``data`` at the end, so callers frame what
        they append and check every frame when they read. It is durable at the next
        :meth:`barrier`. Only backends with APPENDS implement it."""
        raise NotImplementedError(f"{type(self).__name__} cannot append to an object (check APPENDS first)")

    def remove_leftover_temps(self, prefix: str) -> int:
        """Remove the temp files a writer killed between creating and placing a top-level key
        starting with ``prefix`` left behind; returns how many. Only call it when no writer
        may still be placing such a key (a published run's chunks). The default has none to
        remove: an object store's write is one request."""
        return 0

    @abc.abstractmethod
    def create_exclusive(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        """Create ``key`` with ``data`` (durably) only if it does not exist yet.

        ``durable=False`` may leave the new key (and its bytes) to the next :meth:`barrier`,
        as for a write: for objects whose loss at a power cut is harmless (a shard claim, see
        :mod:`shardwright.protocol.claims`). Exclusivity between live callers holds either way.

        Returns True if this call created it, False if the key already existed. Of
        concurrent callers (threads, processes, machines) passing different ``data``,
        exactly one gets True. Callers passing *identical* bytes may both get True on S3:
        a conditional PUT whose reply was lost is retried, and the retry's "already exists"
        counts as our own success when the object holds exactly our bytes. So put something
        unique to the caller in ``data`` (e.g. a run id) whenever the winner matters.
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
        """Compare-and-swap: replace ``key`` with ``data`` (durably) only if it is still at
        ``version``.

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

        ``prefix`` is a plain string prefix (".shardwright/shards/" lists a directory,
        "chunk-1-" lists the keys starting so). Scratch files of in-progress writes are
        never listed.
        """

    @abc.abstractmethod
    def delete(self, key: str, *, durable: bool = True) -> None:
        """Delete ``key`` (durably); a missing key is fine. ``durable=False``: the deletion
        may be undone by a power cut until the next :meth:`barrier` (live readers see it at
        once)."""

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

        Errors of the *destination* (a full disk, no permission) propagate as the OSError
        they are: ``local_path`` belongs to the caller, and only the caller knows the fix
        (map it with :func:`shardwright.storage.files.disk_full_error`).
        """

    @abc.abstractmethod
    def read_range(self, key: str, start: int, length: int) -> bytes:
        """Return ``length`` bytes of ``key`` from offset ``start`` (fewer at the end of the
        object, b"" from or past its end); FileNotFoundError if it is missing. ValueError for a
        negative ``start`` or ``length``. Retried like every read."""

    @abc.abstractmethod
    def list_info(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """What :meth:`list` lists, with each object's size and version, sorted by key."""

    # -- defaults a backend may override -------------------------------------------------

    def read_at_most(self, key: str, limit: int) -> bytes | None:
        """The content of ``key`` when it holds at most ``limit`` bytes, else None (the caller
        refuses it): never more than ``limit + 1`` bytes in memory, whatever the object's size
        (a state file planted or damaged to be huge). FileNotFoundError if it is missing.
        Small limits cost one ranged GET; large ones ask the size first, so a huge object is
        refused without being downloaded."""
        if limit >= _ASK_SIZE_FROM and self.size(key) > limit:
            return None
        data = self.read_range(key, 0, limit + 1)
        return data if len(data) <= limit else None

    def read_versioned_at_most(self, key: str, limit: int) -> tuple[bytes | None, str] | None:
        """:meth:`read_versioned` bounded like :meth:`read_at_most`: None when ``key`` is
        missing, ``(None, version)`` when it holds more than ``limit`` bytes (the caller
        refuses it), else ``(content, version)``. The compare-and-swap path reads lease and
        claim files, which anyone with write access to the output can plant huge.
        This default asks the size first; a backend that can bound the versioned read itself
        (a ranged GET, a file's fstat) overrides it so no swap in between can slip past."""
        try:
            if self.size(key) > limit:
                return None, ""
        except FileNotFoundError:
            return None
        got = self.read_versioned(key)
        if got is None:
            return None
        return (got[0], got[1]) if len(got[0]) <= limit else (None, got[1])

    def write_if_version(
        self, key: str, data: bytes, version: str | None, *, durable: bool = True
    ) -> tuple[bool, str | None]:
        """:meth:`create_exclusive` (``version`` None) or :meth:`replace_if_version`, and the
        version of the object this call wrote: ``(False, None)`` when the condition failed,
        ``(True, v)`` with ``v`` the version of exactly ``data``, ``(True, None)`` when it was
        written but replaced or deleted since (the lease path then starts over).

        This default reads the object back (one more request): a backend whose conditional
        write returns the new version (an object store's ETag or generation) overrides it,
        and a takeover after the write cannot lend us the new holder's version either way."""
        if version is None:
            written = self.create_exclusive(key, data, durable=durable)
        else:
            written = self.replace_if_version(key, data, version)
        if not written:
            return False, None
        got = self.read_versioned_at_most(key, len(data))
        return True, (got[1] if got is not None and got[0] == data else None)

    def delete_if_version(self, key: str, version: str) -> bool | None:
        """Delete ``key`` only if it is still at ``version``, in one conditional request: True
        when this call deleted it, False when it was replaced or is gone. None (this default)
        when the backend has no conditional delete it can trust; the caller then reads the
        object and compares before an unconditional :meth:`delete`. (S3's If-Match on DELETE
        is new, and an S3-compatible store that ignores it would delete another's file;
        fake-gcs-server ignores ``ifGenerationMatch`` on a DELETE, so GCS's cannot be tested
        here and is not used.)"""
        return None

    def barrier(self) -> None:
        """Make every earlier ``durable=False`` write of this object (this process) durable.

        The default is a no-op, right for backends where every write is durable (S3).
        """

    def map_requests(self, fn: Callable[[_T], _R], items: Iterable[_T]) -> builtins.list[_R]:
        """``[fn(item) for item in items]`` (e.g. reads of many small keys), in order, with
        up to MAX_PARALLEL calls in flight once there are PARALLEL_FROM items or more."""
        todo = list(items)
        if len(todo) < max(2, self.PARALLEL_FROM):
            return [fn(item) for item in todo]
        done: builtins.list[_R] = []
        if self.SERIAL_FIRST is not None:  # in this thread while they are quick (see SERIAL_FIRST)
            until = time.perf_counter() + self.SERIAL_FIRST
            for item in todo:
                done.append(fn(item))
                if time.perf_counter() >= until:
                    break
            todo = todo[len(done) :]
            if len(todo) < 2:
                return done + [fn(item) for item in todo]
        with ThreadPoolExecutor(max_workers=min(self.MAX_PARALLEL, len(todo))) as pool:
            return done + list(pool.map(fn, todo))

    def with_short_retries(self, seconds: float = 5.0) -> Storage:
        """This storage, giving up on a failing operation after about ``seconds`` (for
        best-effort calls such as releasing a lease, which expires on its own anyway).

        The default returns ``self``: a backend without retries already gives up at once.
        """
        return self

    def check(self) -> None:
        """Cheap sanity check at run start; raises a StorageError/OutputDirError with the fix.

        The default checks nothing (nothing can be wrong before the first operation).
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

"""The in-memory backend, for fast protocol tests: the same guarantees as the local and S3
backends, plus hooks that inject failures and crashes.

``open_storage("memory://name")`` returns a :class:`MemoryStorage` on the store ``name``;
every handle on one name (in this process) sees the same objects and the same faults, so a
test can arm a fault on its handle and watch the code under test, which opened its own,
run into it.

Guarantees, as the other backends give them:

* ``write_bytes`` replaces atomically (an object is one ``bytes`` value swapped under a lock);
* ``create_exclusive`` and ``replace_if_version`` are decided under the store's lock, so of
  racing threads exactly one wins; versions are never reused, not even after a crash;
* ``list`` is sorted;
* durability is modelled: a ``durable=False`` write, create or delete is *pending* until a
  :meth:`barrier` of the handle that made it; :meth:`crash` (a simulated power cut) reverts every pending key
  to its last durable content (or removes it if it had none).

Fault hooks: :meth:`fail_next` (the next N calls of one operation raise, before or after
taking effect: the latter is a lost reply), :meth:`fail_when` (a predicate on every call),
:meth:`crash`, :meth:`clear_faults`. :meth:`operations` lists what took effect, in order.

Single-process by design: a store lives in this process's memory. A handle pickles by name
(an unpickled copy in the same process shares the store), but using a handle in another
process (forked, spawned or unpickled there) raises StorageError instead of silently
working on a diverging copy. Use a local directory for multi-process runs.
"""

from __future__ import annotations

import builtins
import dataclasses
import errno
import itertools
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import OutputDirError, StorageError
from .base import ObjectInfo, Storage, check_range
from .files import download_atomically
from .registry import register_backend

__all__ = ["OPERATIONS", "MemoryStorage", "open_memory"]

#: Operations the fault hooks can target (the Storage method names).
OPERATIONS = frozenset(
    {
        "write_bytes",
        "barrier",
        "create_exclusive",
        "read_bytes",
        "read_versioned",
        "replace_if_version",
        "exists",
        "size",
        "list",
        "delete",
        "delete_prefix",
        "download_to",
        "read_range",
        "list_info",
    }
)

#: ``predicate(op, key)`` -> the exception to raise for this call, or None to let it run.
FaultPredicate = Callable[[str, "str | None"], "BaseException | None"]


@dataclasses.dataclass(frozen=True)
class _Object:
    data: bytes
    version: str


@dataclasses.dataclass
class _Fault:
    op: str
    exc: BaseException
    times: int
    after: bool


class _Store:
    """One named store: current objects, what would survive a crash, and armed faults."""

    def __init__(self, name: str, pid: int):
        self.name = name
        self.pid = pid
        self.lock = threading.Lock()
        self.objects: dict[str, _Object] = {}
        self.durable: dict[str, _Object] = {}  # the state a crash() falls back to
        # key -> (writing handle, object; None: deleted)
        self.pending: dict[str, tuple[int, _Object | None]] = {}
        self.versions = itertools.count(1)
        self.faults: list[_Fault] = []
        self.predicates: list[FaultPredicate] = []
        self.applied: list[tuple[str, str | None]] = []

    def new_object(self, data: bytes) -> _Object:
        return _Object(bytes(data), f"v{next(self.versions)}")


_STORES: dict[str, _Store] = {}
_STORES_LOCK = threading.Lock()
_HANDLES = itertools.count(1)
_ANONYMOUS = itertools.count(1)


class MemoryStorage(Storage):
    """A handle on the in-process store ``name`` (a fresh private store when ``name`` is None)."""

    PARALLEL_FROM = 64  # as LocalStorage: in-process calls gain nothing from threads
    shared_across_processes = False  # see the module docstring: single-process by design

    def __init__(self, name: str | None = None):
        if name is None:
            name = f"anonymous-{os.getpid()}-{next(_ANONYMOUS)}"
        if not name or "/" in name:
            raise ValueError(f"memory store name must be non-empty without '/', got {name!r}")
        self.name = name
        self.url = f"memory://{name}"
        self._handle = next(_HANDLES)  # tells this handle's pending writes from other handles'
        with _STORES_LOCK:
            store = _STORES.get(name)
            if store is None:
                store = _STORES[name] = _Store(name, os.getpid())
        self._store_ref = store

    # -- single process, pickling ----------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self._store_ref.pid, "input_view": self.is_input_view}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]
        self.url = f"memory://{self.name}"
        self._handle = next(_HANDLES)
        with _STORES_LOCK:
            store = _STORES.get(self.name)
        # In another process the name finds nothing (or another store): _store() then refuses.
        self._store_ref = store if store is not None else _Store(self.name, state["pid"])
        if state.get("input_view"):
            self.mark_input_view()

    def _store(self) -> _Store:
        store = self._store_ref
        if store.pid != os.getpid():
            raise StorageError(
                f"{self.url} is an in-memory store of process {store.pid}, used from process {os.getpid()}: "
                f"MemoryStorage is single-process; use a local directory for multi-process runs"
            )
        return store

    @classmethod
    def drop(cls, name: str) -> None:
        """Forget the store ``name`` (its objects and faults); later handles start empty."""
        with _STORES_LOCK:
            _STORES.pop(name, None)

    # -- fault hooks -----------------------------------------------------------------------

    def fail_next(self, op: str, exc: BaseException | None = None, *, times: int = 1, after: bool = False) -> None:
        """Make the next ``times`` calls of ``op`` raise ``exc`` (default: a StorageError).

        ``after=False``: the call fails before doing anything. ``after=True``: it takes
        effect, then raises, as when a request was applied but its reply was lost.
        """
        if op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}: use one of {sorted(OPERATIONS)}")
        if times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        store = self._store()
        error = exc if exc is not None else StorageError(f"injected failure of {op} on {self.url}")
        with store.lock:
            store.faults.append(_Fault(op, error, times, after))

    def fail_when(self, predicate: FaultPredicate) -> None:
        """Call ``predicate(op, key)`` before every operation (``key`` is the prefix for
        list/delete_prefix, None for barrier); raise what it returns unless None."""
        store = self._store()
        with store.lock:
            store.predicates.append(predicate)

    def clear_faults(self) -> None:
        """Disarm every fail_next and fail_when of this store."""
        store = self._store()
        with store.lock:
            store.faults.clear()
            store.predicates.clear()

    def crash(self) -> list[str]:
        """Simulate a power cut: every write not yet made durable (``durable=False`` without
        a later barrier) is lost, its key back at its last durable content or gone.

        Returns the keys that changed, sorted. Faults stay armed.
        """
        store = self._store()
        with store.lock:
            lost = sorted(store.pending)
            store.objects = dict(store.durable)
            store.pending.clear()
            store.applied.append(("crash", None))
        return lost

    def operations(self) -> list[tuple[str, str | None]]:
        """What took effect on this store, in order: ``(op, key or prefix)`` for every write,
        create, replace, delete, barrier and crash (reads are not recorded)."""
        store = self._store()
        with store.lock:
            return list(store.applied)

    def _fault(self, op: str, key: str | None) -> tuple[_Store, BaseException | None]:
        """Raise a 'before' fault of this call; return the 'after' one to raise once done."""
        store = self._store()
        with store.lock:
            predicates = list(store.predicates)
        for predicate in predicates:  # outside the lock: a predicate may use the storage
            exc = predicate(op, key)
            if exc is not None:
                raise exc
        after: BaseException | None = None
        with store.lock:
            for fault in store.faults:
                if fault.op == op:
                    fault.times -= 1
                    if fault.times == 0:
                        store.faults.remove(fault)
                    if not fault.after:
                        raise fault.exc
                    after = fault.exc
                    break
        return store, after

    # -- Storage API -----------------------------------------------------------------------

    def _put(self, store: _Store, key: str, data: bytes, durable: bool) -> None:
        """Store ``data`` at ``key`` (the store's lock held): durable at once, or pending until
        this handle's next barrier (a power cut before it loses the write)."""
        obj = store.new_object(data)
        store.objects[key] = obj
        if durable:
            store.durable[key] = obj
            store.pending.pop(key, None)
        else:
            store.pending[key] = (self._handle, obj)

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        self.checked_key(key)
        store, after = self._fault("write_bytes", key)
        with store.lock:
            self._put(store, key, data, durable)
            store.applied.append(("write_bytes", key))
        _raise(after)

    def barrier(self) -> None:
        store, after = self._fault("barrier", None)
        with store.lock:
            mine = [k for k, (handle, _obj) in store.pending.items() if handle == self._handle]
            for key in mine:
                _handle, obj = store.pending.pop(key)
                if obj is None:
                    if key not in store.objects:
                        store.durable.pop(key, None)
                elif store.objects.get(key) is obj:
                    store.durable[key] = obj
            store.applied.append(("barrier", None))
        _raise(after)

    def create_exclusive(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        self.checked_key(key)
        store, after = self._fault("create_exclusive", key)
        with store.lock:
            if key in store.objects:
                created = False
            else:
                self._put(store, key, data, durable)
                store.applied.append(("create_exclusive", key))
                created = True
        _raise(after)
        return created

    def _get(self, op: str, key: str) -> _Object | None:
        self.checked_key(key)
        store, after = self._fault(op, key)
        with store.lock:
            obj = store.objects.get(key)
        _raise(after)
        return obj

    def read_bytes(self, key: str) -> bytes:
        obj = self._get("read_bytes", key)
        if obj is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", f"{self.url}/{key}")
        return obj.data

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        obj = self._get("read_versioned", key)
        return None if obj is None else (obj.data, obj.version)

    def replace_if_version(self, key: str, data: bytes, version: str) -> bool:
        self.checked_key(key)
        store, after = self._fault("replace_if_version", key)
        with store.lock:
            current = store.objects.get(key)
            if current is None or current.version != version:
                swapped = False
            else:
                obj = store.new_object(data)
                store.objects[key] = store.durable[key] = obj
                store.pending.pop(key, None)
                store.applied.append(("replace_if_version", key))
                swapped = True
        _raise(after)
        return swapped

    def exists(self, key: str) -> bool:
        return self._get("exists", key) is not None

    def size(self, key: str) -> int:
        obj = self._get("size", key)
        if obj is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", f"{self.url}/{key}")
        return len(obj.data)

    def list(self, prefix: str = "") -> list[str]:
        store, after = self._fault("list", prefix)
        with store.lock:
            keys = sorted(k for k in store.objects if k.startswith(prefix))
        _raise(after)
        return keys

    def read_at_most(self, key: str, limit: int) -> bytes | None:
        data = self.read_bytes(key)  # held in memory already; faults as read_bytes
        return data if len(data) <= limit else None

    def read_range(self, key: str, start: int, length: int) -> bytes:
        check_range(start, length)
        obj = self._get("read_range", key)
        if obj is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", f"{self.url}/{key}")
        return obj.data[start : start + length]

    def list_info(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        store, after = self._fault("list_info", prefix)
        with store.lock:
            infos = [ObjectInfo(k, len(o.data), o.version) for k, o in store.objects.items() if k.startswith(prefix)]
        _raise(after)
        return sorted(infos, key=lambda info: info.key)

    def delete(self, key: str, *, durable: bool = True) -> None:
        self.checked_key(key)
        store, after = self._fault("delete", key)
        with store.lock:
            if durable:
                self._forget(store, [key])
            elif key in store.objects:
                store.objects.pop(key)
                store.pending[key] = (self._handle, None)
            store.applied.append(("delete", key))
        _raise(after)

    def delete_prefix(self, prefix: str) -> None:
        store, after = self._fault("delete_prefix", prefix)
        with store.lock:
            self._forget(store, [k for k in store.objects if k.startswith(prefix)])
            store.applied.append(("delete_prefix", prefix))
        _raise(after)

    @staticmethod
    def _forget(store: _Store, keys: Iterable[str]) -> None:
        for key in keys:  # durable deletes, as on disk (fsync of the directory) and S3
            store.objects.pop(key, None)
            store.durable.pop(key, None)
            store.pending.pop(key, None)

    def local_path(self, key: str) -> str | None:
        return None

    def download_to(self, key: str, local_path: str, *, durable: bool = True) -> None:
        obj = self._get("download_to", key)
        if obj is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", f"{self.url}/{key}")
        download_atomically(local_path, [obj.data], durable=durable)

    def __repr__(self) -> str:
        return f"MemoryStorage({self.name!r})"


def _raise(exc: BaseException | None) -> None:
    if exc is not None:
        raise exc


def open_memory(url: str, storage_options: dict[str, Any] | None = None, *, create: bool = False) -> MemoryStorage:
    """The registry's factory for ``memory://name`` (``storage_options`` is ignored)."""
    name = url[len("memory://") :].strip("/")
    if not name or "/" in name:
        raise OutputDirError(f"invalid memory URL {url!r}: use memory://name (one name, no '/')")
    return MemoryStorage(name)


register_backend("memory", open_memory)

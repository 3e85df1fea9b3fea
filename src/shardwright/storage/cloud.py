"""What every object-store backend (S3, GCS, Azure) shares: the key prefix, a client per
process, one bounded retry loop with backoff, the lost-reply rule of conditional writes, the
error mapping, ``exists``/``size`` from ``head``, and the atomic download into a local file.

Each backend supplies how to make its SDK client, :meth:`CloudStorage.failure` (which
:class:`~.failure.Failure` an exception is, from its tables of codes and types), its fix texts
as data (:class:`~.failure.Fixes`), and its single attempts (GET, HEAD, LIST, PUT). The SDKs'
own retry policies are turned off, so that one loop with one budget (``retry_timeout``)
decides. Model: mosaicml-streaming's ``CloudDownloader`` and its per-cloud subclasses.
"""

from __future__ import annotations

import abc
import copy
import errno
import os
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from ..errors import StorageError, UsageError
from ..process import ForkSafeLock
from ..telemetry import get as run_counters
from .base import ObjectInfo, Storage
from .failure import Failure, Fixes, storage_error
from .files import tmp_name, unlink_quiet

__all__ = ["BoundedBuffer", "CloudStorage", "TooLarge", "TruncatedBody", "pop_number", "refuse_options"]

T = TypeVar("T")

_CLIENT_LOCK = ForkSafeLock()  # one client per process; a forked child starts with it unlocked


class TruncatedBody(Exception):
    """A body shorter than announced, or a checksum that does not match: retried."""


class TooLarge(Exception):
    """A bounded download went past its limit (:class:`BoundedBuffer`): the object is refused."""


class BoundedBuffer:
    """A write-only in-memory file that refuses to hold more than ``limit`` bytes: a body
    without (or lying about) its Content-Length still cannot make a bounded read allocate
    more (:meth:`CloudStorage.get_at_most`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> int:
        self._size += len(data)
        if self._size > self.limit:
            raise TooLarge(f"more than {self.limit} bytes")
        self._parts.append(bytes(data))
        return len(data)

    def tell(self) -> int:
        return self._size

    def getvalue(self) -> bytes:
        return self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)


def refuse_options(scheme: str, options: dict[str, Any], wrong_names: dict[str, str], accepted: Iterable[str]) -> None:
    """One line for fsspec-style or unknown option names (never silently mapped or ignored:
    an ignored credential option connects with other credentials)."""
    wrong = [k for k in options if k in wrong_names]
    if wrong:
        fixes = "; ".join(f"{k!r} -> {wrong_names[k]}" for k in wrong)
        raise UsageError(
            f"storage_options for {scheme}:// uses fsspec-style names, which shardwright does not map: {fixes}"
        )
    accepted = sorted(accepted)
    unknown = [k for k in options if k not in accepted]
    if unknown:
        raise UsageError(
            f"storage_options for {scheme}:// has unknown key(s) {', '.join(repr(k) for k in unknown)}: "
            f"use {', '.join(accepted)}"
        )


def pop_number(options: dict[str, Any], name: str, default: float, *, minimum: float, maximum: float) -> float:
    """``options.pop(name)``, checked to be a real number in [minimum, maximum] (no bools, no strings)."""
    value = options.pop(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value <= maximum:
        raise UsageError(f"storage_options[{name!r}] must be a number from {minimum:g} to {maximum:g}; got {value!r}")
    return value


def _printable(text: str) -> str:
    """``text`` safe to print and log (a name that is not valid Unicode keeps its escapes)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_THROTTLING_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestLimitExceeded"}
)


def is_throttling(e: BaseException) -> bool:
    """Whether ``e`` is a store's 429 (or S3's SlowDown family), read from the attributes the
    SDKs share: ``status_code`` (Azure), ``code`` (google-api-core), ``response`` (botocore)."""
    for name in ("status_code", "code"):
        if getattr(e, name, None) == 429:
            return True
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        meta = response.get("ResponseMetadata") or {}
        return meta.get("HTTPStatusCode") == 429 or error.get("Code") in _THROTTLING_CODES
    return False


class CloudStorage(Storage):
    """Common machinery of the object-store backends (see the module docstring)."""

    #: total seconds one operation may spend retrying transient failures
    retry_timeout: float = 60.0
    scheme: str = ""
    prefix: str = ""
    #: how messages name this backend and its containers, and the fix for each failure
    fixes: ClassVar[Fixes] = Fixes("object store", "bucket")

    def __init__(self) -> None:
        self._client: Any = None
        self._client_pid: int | None = None
        self._reached = False  # has the service ever answered in this process?

    # -- what a backend supplies -----------------------------------------------------------

    @abc.abstractmethod
    def make_client(self) -> Any:
        """A new SDK client (called once per process)."""

    @abc.abstractmethod
    def failure(self, e: BaseException) -> Failure:
        """Which kind of failure ``e`` is (by the backend's tables of codes and types)."""

    def detail(self, e: BaseException) -> str | None:
        """The service's own words for ``e`` (its status, code, message) for a message; None
        when ``e`` is not the service's error (then it is raised as it is)."""
        return None

    def retry_unreached(self, attempt: int) -> bool:
        """Whether a service never reached in this process is tried once more (default: no,
        a wrong endpoint is reported at once)."""
        return False

    @property
    def container_name(self) -> str:
        """The bucket or container, for messages."""
        return str(getattr(self, "bucket", ""))

    @property
    def endpoint(self) -> str:
        """Where requests go, for messages (no credentials)."""
        return ""

    @abc.abstractmethod
    def object_url(self, full_key: str) -> str:
        """``scheme://container/full_key`` for messages."""

    def classify(self, e: BaseException, key: str | None) -> Failure:
        """:meth:`failure`, with the rules every store shares: a connection that worked
        before in this process is a blip (retried); a listing or check that finds nothing has
        no bucket."""
        kind = self.failure(e)
        if kind is Failure.UNREACHABLE and self._reached:
            return Failure.TRANSIENT
        if kind is Failure.MISSING:
            return Failure.NO_BUCKET if key is None else Failure.OTHER
        return kind

    def to_storage_error(
        self, op: str, key: str | None, e: BaseException, attempts: int, elapsed: float, kind: Failure
    ) -> BaseException:
        """The one-line error for a final failure (StorageError, or ``e`` itself when it is
        not the service's)."""
        where = _printable(f"{op} {self.object_url(self._key(key)) if key else self.url}")
        if isinstance(e, UnicodeError):  # a name the SDK cannot put on the wire (not fn's fault)
            return StorageError(
                f"{self.fixes.service} {where} at {self.endpoint}: a name is not valid Unicode ({e}): "
                "object names must be UTF-8 text; fix the URL or the key"
            )
        err = storage_error(
            kind,
            self.fixes,
            where=where,
            endpoint=self.endpoint,
            name=self.container_name,
            url=self.url,
            detail=self.detail(e),
            error_type=type(e).__name__,
            attempts=attempts,
            elapsed=elapsed,
        )
        return e if err is None else err

    # -- pickling: no client (worker processes open their own), no secrets in repr --------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state["_client_pid"] = None
        return state

    def client(self) -> Any:
        """The SDK client of this process (created on first use, recreated after a fork)."""
        pid = os.getpid()
        client = self._client
        if client is not None and self._client_pid == pid:
            return client
        with _CLIENT_LOCK:
            if self._client is None or self._client_pid != pid:
                self._client = self.make_client()
                self._client_pid = pid
            return self._client

    # -- keys --------------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        self.checked_key(key)  # strict, or a user's input key on a read-only input view
        return f"{self.prefix}/{key}" if self.prefix else key

    def _full_prefix(self, prefix: str) -> str:
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def _rel(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    def _missing(self, key: str) -> FileNotFoundError:
        return FileNotFoundError(errno.ENOENT, "no such object", self.object_url(self._key(key)))

    # -- the retry loop --------------------------------------------------------------------

    def run(self, op: str, key: str | None, fn: Callable[[int], T]) -> T:
        """``fn(attempt)`` with bounded retries (exponential backoff with jitter, about
        ``retry_timeout`` seconds in all); a final failure becomes one clear error."""
        start = time.monotonic()
        deadline = start + self.retry_timeout
        attempt = 0
        counters = run_counters()
        while True:
            try:
                result = fn(attempt)
                self._reached = True
                counters.store_request(op, "ok")
                return result
            except Exception as e:
                if isinstance(e, (StorageError, FileNotFoundError, UsageError)):
                    counters.store_request(op, "missing" if isinstance(e, FileNotFoundError) else "error")
                    raise  # ours
                kind = self.classify(e, key)
                if counters.enabled:
                    counters.store_request(op, kind.value)
                    if is_throttling(e):
                        counters.throttled(op)
                if kind is Failure.TRANSIENT or (kind is Failure.UNREACHABLE and self.retry_unreached(attempt)):
                    delay = min(4.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)
                    if time.monotonic() + delay < deadline:
                        counters.retry(f"store {kind.value}")
                        attempt += 1
                        time.sleep(delay)
                        continue
                elif isinstance(e, ValueError) and not isinstance(e, UnicodeError):
                    raise  # a bad argument (an SDK's reply it cannot parse is TRANSIENT: retried)
                err = self.to_storage_error(op, key, e, attempt + 1, time.monotonic() - start, kind)
                if err is e:
                    raise
                raise err from e

    def conditional_write(self, op: str, key: str, data: bytes, put: Callable[[], str | None]) -> str | None:
        """Run ``put()`` (the version it wrote, "" when the reply named none; None: the
        precondition failed) under the retry loop; the version written, or None.

        A conditional write is not idempotent: if the service applied our first attempt but
        the reply was lost, the retry's "precondition failed" is our own success. So after a
        retry, a refusal is checked by reading the object back: it was ours iff it holds
        exactly our bytes (callers put something unique, such as a run id, in ``data``).
        """
        full = self._key(key)

        def once(attempt: int) -> str | None:
            written = put()
            if written is not None:
                return written
            if attempt > 0:
                got = self.get_versioned(full)
                return got[1] if got is not None and got[0] == data else None
            return None

        return self.run(op, key, once)

    def create_exclusive(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        # durable is moot: a stored object is durable once the request returns
        return self.write_if_version(key, data, None)[0]

    def replace_if_version(self, key: str, data: bytes, version: str) -> bool:
        return self.write_if_version(key, data, version)[0]

    def write_if_version(
        self, key: str, data: bytes, version: str | None, *, durable: bool = True
    ) -> tuple[bool, str | None]:
        # The service's reply names the version of exactly the bytes sent (ETag, generation):
        # no read-back (issue 36: one request per lease or claim taken, renewed or confirmed).
        written = self.put_if(key, bytes(data), version)
        if written is None:
            return False, None
        if written:
            return True, written
        return self._read_back(key, data)

    def _read_back(self, key: str, data: bytes) -> tuple[bool, str | None]:
        """After a write whose reply named no version: the version if the object still holds ``data``."""
        got = self.read_versioned_at_most(key, len(data))
        return True, (got[1] if got is not None and got[0] == data else None)

    @abc.abstractmethod
    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        """A conditional PUT under :meth:`conditional_write`: created only if absent (``version``
        None) or replaced only if still at ``version``. The version written ("" when the
        reply named none), None when the condition failed."""

    @abc.abstractmethod
    def get_versioned(self, full_key: str) -> tuple[bytes, str] | None:
        """One GET of ``full_key``: (bytes, version) or None when missing (no retries)."""

    @abc.abstractmethod
    def get_at_most(self, full_key: str, limit: int) -> tuple[bytes | None, str] | None:
        """One GET of ``full_key`` (no retries), bounded: None when missing, ``(None,
        version)`` when it holds more than ``limit`` bytes, else ``(bytes, version)``. The
        size is judged from the response's headers before its body is read, and the body is
        read into at most ``limit + 1`` bytes whatever the headers say; TruncatedBody when it
        is shorter than announced."""

    def with_short_retries(self, seconds: float = 5.0) -> CloudStorage:
        impatient = copy.copy(self)  # shares the client; only the retry budget differs
        impatient.retry_timeout = min(seconds, self.retry_timeout)
        return impatient

    # -- shared Storage operations ----------------------------------------------------------

    def read_bytes(self, key: str) -> bytes:
        full = self._key(key)
        got = self.run("GET", key, lambda _a: self.get_versioned(full))
        if got is None:
            raise self._missing(key)
        return got[0]

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        full = self._key(key)
        return self.run("GET", key, lambda _a: self.get_versioned(full))

    def read_at_most(self, key: str, limit: int) -> bytes | None:
        # One GET, whatever the limit: the size is judged from the reply's headers before its
        # body is read (the default asks for it in a HEAD first, one more request per reader
        # start on index.json, per lease and claim read of a run).
        got = self.read_versioned_at_most(key, limit)
        if got is None:
            raise self._missing(key)
        return got[0]

    def read_versioned_at_most(self, key: str, limit: int) -> tuple[bytes | None, str] | None:
        # one request: the version is the one of the bytes read, and no swap in between can
        # slip a larger object past the bound
        full = self._key(key)
        return self.run("GET", key, lambda _a: self.get_at_most(full, limit))

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def size(self, key: str) -> int:
        info = self.head(key)
        if info is None:
            raise self._missing(key)
        return info.size

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size and version of ``key`` (None when missing)."""

    @abc.abstractmethod
    def list_info(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix`` with size and version, sorted by key."""

    def delete_prefix(self, prefix: str) -> None:
        """One delete per key, 8 at a time (a store with a batch delete, S3, overrides it)."""
        import concurrent.futures

        keys = [info.key for info in self.list_info(prefix)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(self.delete, keys))

    def list(self, prefix: str = "") -> list[str]:
        return [info.key for info in self.list_info(prefix)]

    def local_path(self, key: str) -> str | None:
        return None

    def download_into(self, key: str, local_path: str, durable: bool, fetch: Callable[[Any], int | None]) -> None:
        """Atomically copy ``key`` to ``local_path``: ``fetch(file)`` writes the object into an
        open temp file and returns the object's announced size (None when it is missing)."""
        dst = os.path.abspath(local_path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)

        def once(_attempt: int) -> bool:
            tmp = tmp_name(dst)
            try:
                with open(tmp, "xb") as f:
                    expected = fetch(f)
                    if expected is None:
                        return False
                    f.flush()
                    written = f.tell()
                    if written != expected:
                        raise TruncatedBody(f"got {written} of {expected} bytes")
                    if durable:
                        os.fsync(f.fileno())
                os.replace(tmp, dst)
                return True
            finally:
                # A full or unwritable local disk stays an OSError (not retried, not mapped):
                # the destination is the caller's and so is the fix.
                unlink_quiet(tmp)

        if not self.run("GET", key, once):
            raise self._missing(key)

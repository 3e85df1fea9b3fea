"""Rate limits and adaptive concurrency for the calls an fn makes (an LLM teacher, an API).

- :func:`parse_rate` reads a budget, strictly: ``"10/s"``, ``"600/min"``, ``"36000/h"``.
- :class:`SharedBudget` is one node's budget, shared by every worker process of the node with
  no server: a GCRA ("virtual scheduling") token bucket whose one number, the theoretical
  arrival time of the next call, lives in a 64-byte mmap'd file (``/dev/shm`` by default, or a
  path under the run's local state), updated under ``flock``. Each call reserves its start time
  before it starts, so calls start at most ``rate`` per second (plus ``burst``) whatever the
  number of processes, threads or coroutines: no call is started over the budget.
- Rate limits are per node: across nodes the budget is split evenly (:meth:`Rate.per_node`),
  with no coordination between nodes.
- :class:`AdaptiveLimit` is AIMD concurrency: the calls in flight are capped at ``limit``,
  which halves (``decrease``) when the server throttles (429s beyond a tolerated fraction:
  a provider's scattered 429s must not collapse it) and grows back by ``increase`` per
  window of successful calls.
- :class:`Limiter` joins them: ``async with limiter.slot():`` (asyncio) or ``with
  limiter.slot_sync():`` (threads) around each call.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import math
import mmap
import os
import re
import stat
import struct
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ..errors import ArgumentTypeError, UsageError, short_repr
from .call_count import InputCalls, call_ended, call_started
from .calls import http_status

_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*$")
MAX_RATE = 1_000_000.0  # calls per second: beyond this a limit is a typo, not a budget


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Rate:
    """A budget of calls per second; ``text`` is how it was written (for messages)."""

    per_second: float
    text: str

    def per_node(self, num_nodes: int) -> Rate:
        """This budget split evenly across ``num_nodes`` nodes: each node's share."""
        if not _is_int(num_nodes) or num_nodes < 1:
            raise UsageError(f"num_nodes must be an int >= 1; got {short_repr(num_nodes)}")
        if num_nodes == 1:
            return self
        return Rate(self.per_second / num_nodes, f"{self.text} / {num_nodes} nodes")

    @property
    def interval(self) -> float:
        return 1.0 / self.per_second


def parse_rate(value: object, name: str = "rate_limit") -> Rate:
    """A Rate from ``"10/s"``, ``"600/min"``, ``"2.5/s"``, ``"36000/h"`` (or a Rate). A bare
    number is refused: is 10 per second or per minute? The unit is part of the budget."""
    if isinstance(value, Rate):
        return value
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f'{name} must be a string such as "10/s" or "600/min"; got {short_repr(value)} ({type(value).__name__})'
        )
    match = _RATE.match(value.lower())
    if not match or match.group(2) not in _UNITS:
        raise UsageError(
            f'{name} must be a count per unit such as "10/s", "600/min" or "36000/h"; got {short_repr(value)}'
        )
    per_second = float(match.group(1)) / _UNITS[match.group(2)]
    if not (0.0 < per_second <= MAX_RATE):
        raise UsageError(f"{name} must be more than 0 and at most {MAX_RATE:g}/s; got {short_repr(value)}")
    return Rate(per_second, value.strip())


def node_rate(value: object, num_nodes: int, name: str = "rate_limit") -> Rate:
    """The share of a run's budget that one of ``num_nodes`` nodes may use (an even split)."""
    return parse_rate(value, name).per_node(num_nodes)


# The shared file: magic, version, the boot it belongs to (CLOCK_MONOTONIC restarts at boot),
# and the theoretical arrival time of the next call, in time.monotonic() seconds.
_LAYOUT = struct.Struct("<4sI16sd")
_MAGIC = b"SWRB"
_VERSION = 1
_FILE_SIZE = 64
_MAX_AHEAD = 86_400.0  # a reservation further ahead than this is a stale file, not a queue


def _boot_id() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return hashlib.blake2b(f.read().strip(), digest_size=16).digest()
    except OSError:
        return b"\0" * 16  # not Linux: the file lives in a temporary directory instead


def default_budget_path(name: str) -> str:
    """Where the budget called ``name`` lives on this node: /dev/shm when there is one (memory,
    gone at reboot), else the temporary directory."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", name):
        raise UsageError(
            f"a budget name must be 1-128 letters, digits, '.', '_' or '-'; got {short_repr(name)} (a run id, a teacher's name)"
        )
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    # the user id in the name: two users' budgets of the same name never meet (each user's
    # runs share theirs; another user's file is refused by _open_budget_file, never shared)
    return os.path.join(base, f"shardwright-budget-{os.geteuid()}-{name}")


def _open_budget_file(path: str) -> int:
    """The budget file's descriptor, opened (created 0600 if missing) without following a link
    and checked to be this user's own 64-byte file: /dev/shm is shared by every local user,
    so whatever is at the path may have been planted there by another one."""
    fix = (
        "a file there that this user's runs did not make is not used; delete it if it is yours, "
        "or pass Limiter(path=...) a file in a directory only you can write"
    )
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)  # O_NONBLOCK: a planted FIFO must not block the open
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # O_CREAT: the directory is what is missing
            raise UsageError(
                f"the rate budget file {path} cannot be created: its directory {os.path.dirname(path)} does not "
                "exist; create it, or pass Limiter(path=...) a file in a directory only you can write"
            ) from None
        what = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
        raise UsageError(f"the rate budget file {path} {what}: {fix}") from None
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "is not a regular file"
    elif st.st_uid != os.geteuid():
        problem = f"belongs to another user (uid {st.st_uid}); sharing it would share a budget across users"
    elif st.st_mode & 0o022:
        problem = f"can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    elif st.st_nlink != 1:
        problem = f"has {st.st_nlink} hard links (another name could change it)"
    elif st.st_size not in (0, _FILE_SIZE):
        problem = f"holds {st.st_size:,} bytes, not {_FILE_SIZE}"
    if problem is not None:
        os.close(fd)
        raise UsageError(f"the rate budget file {path} {problem}: {fix}")
    return fd


class SharedBudget:
    """A calls-per-second budget shared by every process on the node that opens the same file.

    :meth:`reserve` takes the next start time (``burst`` calls may start back to back after an
    idle spell; 1 spaces every call evenly) and returns how long to wait for it; a caller that
    gives up after reserving leaves its slot unused, never over the budget. Picklable: a worker
    process reopens the file by path."""

    def __init__(self, rate: object, *, name: str | None = None, path: str | None = None, burst: int = 1):
        self.rate = parse_rate(rate)
        if not _is_int(burst) or not 1 <= burst <= 100_000:
            raise UsageError(f"burst must be an int between 1 and 100000; got {short_repr(burst)}")
        if (name is None) == (path is None):
            raise UsageError("SharedBudget needs exactly one of name= (a file in /dev/shm) or path=")
        self.path = path if path is not None else default_budget_path(name)  # type: ignore[arg-type]
        self.burst = burst
        self._pid = -1
        self._fd = -1
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()
        self._boot = _boot_id()
        self._open()  # a refused file is one line now, before any run starts (see _open_budget_file)

    def __reduce__(self) -> Any:
        return (_rebuild_budget, (self.rate, self.path, self.burst))

    def _open(self) -> mmap.mmap:
        # After fork the inherited descriptor shares its flock with the parent: reopen per process.
        if self._pid != os.getpid() or self._map is None:
            self._lock = threading.Lock()
            self._map = None
            fd = _open_budget_file(self.path)
            try:
                st = os.fstat(fd)
                if st.st_size < _FILE_SIZE or st.st_blocks == 0:  # missing, or a hole (an older version's)
                    # written, not ftruncated: a hole in a full /dev/shm (Docker's is 64 MB, and
                    # DataLoader workers fill it) killed the process with SIGBUS, without a word,
                    # at the first store into the mapping; a write says ENOSPC here instead
                    os.pwrite(fd, bytes(_FILE_SIZE), 0)  # zero-filled: no magic yet, read as a fresh budget
                self._fd, self._map, self._pid = fd, mmap.mmap(fd, _FILE_SIZE), os.getpid()
            except OSError as exc:
                os.close(fd)
                raise UsageError(
                    f"the rate budget file {self.path} cannot be written ({exc.strerror}): its file system is "
                    "full; free space there (/dev/shm holds DataLoader workers' tensors too) or pass "
                    "Limiter(path=...) a file on another file system"
                ) from None
        elif self._replaced():
            # deleted (a cleanup of /dev/shm), renamed or truncated under this process: touching the mapping
            # of a truncated file is SIGBUS, and a deleted one left this process on a budget of its
            # own while new processes made another (two full rates): take the one at the path
            self._map.close()
            os.close(self._fd)
            self._pid = -1
            return self._open()
        return self._map

    def _replaced(self) -> bool:
        st = os.fstat(self._fd)
        if st.st_nlink == 0 or st.st_size != _FILE_SIZE:
            return True
        # renamed away (`mv` of the file, trust round 9): it stays linked under its new name
        # while new processes make another at the path; two budgets, each at the full rate
        try:
            at_path = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return True
        return (at_path.st_dev, at_path.st_ino) != (st.st_dev, st.st_ino)

    def reserve(self, now: float | None = None) -> float:
        """Reserve the next call's start; the seconds to wait before starting it (0: now)."""
        interval = self.rate.interval
        tolerance = (self.burst - 1) * interval
        with self._lock:
            shared = self._open()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                now = time.monotonic() if now is None else now
                magic, version, boot, tat = _LAYOUT.unpack_from(shared, 0)
                if (
                    magic != _MAGIC
                    or version != _VERSION
                    or boot != self._boot
                    or not math.isfinite(tat)  # a NaN would never be "ahead": no call would ever wait
                    or tat - now > _MAX_AHEAD
                ):
                    tat = now
                start = max(tat - tolerance, now)
                _LAYOUT.pack_into(shared, 0, _MAGIC, _VERSION, self._boot, max(tat, now) + interval)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        return start - now

    def acquire_sync(self) -> None:
        wait = self.reserve()
        if wait > 0:
            time.sleep(wait)

    async def acquire(self) -> None:
        wait = self.reserve()
        if wait > 0:
            await asyncio.sleep(wait)

    def close(self) -> None:
        with self._lock:
            if self._map is not None and self._pid == os.getpid():
                self._map.close()
                os.close(self._fd)
            self._map, self._fd, self._pid = None, -1, -1


def _rebuild_budget(rate: Rate, path: str, burst: int) -> SharedBudget:
    return SharedBudget(rate, path=path, burst=burst)


class AdaptiveLimit:
    """AIMD concurrency: at most ``limit`` calls in flight. A throttled call (HTTP 429) halves
    the limit (times ``decrease``, not below ``minimum``) when the throttled calls of the
    current window exceed ``tolerance`` of it, and only for calls started since the last
    decrease (their 429s answer the old limit); each successful call adds ``increase / limit``
    (``increase`` per window of calls), up to ``maximum``.

    Both asyncio (:meth:`acquire`) and threads (:meth:`acquire_sync`) may wait on the same
    object. Not shared between processes: each worker adapts its own share."""

    def __init__(
        self,
        initial: int = 16,
        *,
        minimum: int = 1,
        maximum: int = 256,
        decrease: float = 0.5,
        increase: float = 1.0,
        tolerance: float = 0.1,
    ):
        for label, value in (("initial", initial), ("minimum", minimum), ("maximum", maximum)):
            if not _is_int(value) or not 1 <= value <= 100_000:
                raise UsageError(f"AdaptiveLimit {label} must be an int between 1 and 100000; got {short_repr(value)}")
        if not minimum <= initial <= maximum:
            raise UsageError(f"AdaptiveLimit needs minimum <= initial <= maximum; got {minimum}, {initial}, {maximum}")
        if not _is_number(decrease) or not 0.0 < decrease < 1.0:
            raise UsageError(f"AdaptiveLimit decrease must be a number between 0 and 1; got {short_repr(decrease)}")
        if not _is_number(increase) or not 0.0 < increase <= 1000.0:
            raise UsageError(f"AdaptiveLimit increase must be a number in (0, 1000]; got {short_repr(increase)}")
        if not _is_number(tolerance) or not 0.0 <= tolerance < 1.0:
            raise UsageError(f"AdaptiveLimit tolerance must be a number in [0, 1); got {short_repr(tolerance)}")
        self.initial, self.minimum, self.maximum = initial, minimum, maximum
        self.decrease, self.increase, self.tolerance = float(decrease), float(increase), float(tolerance)
        self._limit = float(initial)
        self._in_flight = 0
        self._generation = 0  # bumped by each decrease
        self._window_calls = 0
        self._window_throttled = 0
        self._waiters: deque[Any] = deque()  # threading.Event or (loop, future)
        self._lock = threading.Lock()

    def __reduce__(self) -> Any:  # a worker process adapts afresh (locks and waiters stay here)
        return (
            _rebuild_adaptive,
            (self.initial, self.minimum, self.maximum, self.decrease, self.increase, self.tolerance),
        )

    @property
    def limit(self) -> int:
        return max(self.minimum, int(self._limit))

    @property
    def decreases(self) -> int:
        """How many times throttling has cut the limit."""
        return self._generation

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _wake_locked(self) -> None:
        while self._waiters and self._in_flight < self.limit:
            waiter = self._waiters.popleft()
            self._in_flight += 1  # handed over: the waiter owns the slot from here
            if isinstance(waiter, threading.Event):
                waiter.set()
            else:
                loop, future = waiter
                loop.call_soon_threadsafe(self._grant, future)

    def _grant(self, future: asyncio.Future) -> None:
        if future.done():  # cancelled while the slot was on its way: give it back
            self.release(-1, "error")
        else:
            future.set_result(None)

    async def acquire(self) -> int:
        """Wait for a slot; returns the ticket to pass to :meth:`release`."""
        with self._lock:
            if not self._waiters and self._in_flight < self.limit:
                self._in_flight += 1
                return self._generation
            future = asyncio.get_running_loop().create_future()
            waiter = (asyncio.get_running_loop(), future)
            self._waiters.append(waiter)
        try:
            await future
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    raise
            if future.done() and not future.cancelled():
                self.release(-1, "error")  # granted, then cancelled before it ran
            raise
        return self._generation

    def acquire_sync(self) -> int:
        with self._lock:
            if not self._waiters and self._in_flight < self.limit:
                self._in_flight += 1
                return self._generation
            event = threading.Event()
            self._waiters.append(event)
        event.wait()
        return self._generation

    def release(self, ticket: int, outcome: str = "ok") -> None:
        """Give the slot back: ``outcome`` is "ok" (a success: grow), "throttled" (a 429:
        maybe shrink) or "error" (anything else: neither)."""
        with self._lock:
            self._in_flight -= 1
            if outcome == "ok":
                self._window_calls += 1
                self._limit = min(float(self.maximum), self._limit + self.increase / self._limit)
            elif outcome == "throttled" and ticket == self._generation:
                self._window_calls += 1
                self._window_throttled += 1
                if self._window_throttled > self.tolerance * max(self._window_calls, self.limit):
                    self._limit = max(float(self.minimum), self._limit * self.decrease)
                    self._generation += 1
                    self._window_calls = self._window_throttled = 0
            if self._window_calls >= 4 * max(self.limit, 16):  # a fresh window: old 429s age out
                self._window_calls = self._window_throttled = 0
            self._wake_locked()


def _rebuild_adaptive(
    initial: int, minimum: int, maximum: int, decrease: float, increase: float, tolerance: float
) -> AdaptiveLimit:
    return AdaptiveLimit(
        initial, minimum=minimum, maximum=maximum, decrease=decrease, increase=increase, tolerance=tolerance
    )


class Slot:
    """One call's place under a :class:`Limiter`. Call :meth:`throttled` when the call was
    answered 429 but the exception did not leave the ``with`` block (a client that returns
    the response instead of raising)."""

    __slots__ = ("_calls", "_limiter", "_outcome", "_ticket")

    def __init__(self, limiter: Limiter):
        self._limiter = limiter
        self._ticket = -1
        self._outcome: str | None = None
        self._calls: InputCalls | None = None  # the input this call is counted for (engine.call_count)

    def throttled(self) -> None:
        self._outcome = "throttled"

    def _finish(self, exc: BaseException | None) -> None:
        call_ended(self._calls)
        self._calls = None
        if self._limiter.concurrency is None:
            return
        outcome = self._outcome
        if outcome is None:
            outcome = "ok" if exc is None else ("throttled" if http_status(exc) == 429 else "error")
        self._limiter.concurrency.release(self._ticket, outcome)

    async def __aenter__(self) -> Slot:
        limiter = self._limiter
        if limiter.concurrency is not None:
            self._ticket = await limiter.concurrency.acquire()
        try:
            if limiter.budget is not None:
                await limiter.budget.acquire()
        except BaseException as exc:
            self._finish(exc)
            raise
        self._calls = call_started()  # status: its input's calls in flight
        return self

    async def __aexit__(self, kind: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._finish(exc)

    def __enter__(self) -> Slot:
        limiter = self._limiter
        if limiter.concurrency is not None:
            self._ticket = limiter.concurrency.acquire_sync()
        try:
            if limiter.budget is not None:
                limiter.budget.acquire_sync()
        except BaseException as exc:
            self._finish(exc)
            raise
        self._calls = call_started()
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._finish(exc)


class Limiter:
    """A node's budget and a process's adaptive concurrency, around each call::

        limiter = Limiter("600/min", name="teacher", concurrency=AdaptiveLimit(32))
        async with limiter.slot():
            reply = await client.post(...)

    ``rate`` is the whole run's budget; with ``num_nodes`` > 1 this node takes an even share.
    The budget is reserved only once a concurrency slot is held, right before the call starts.
    Picklable (the adaptive state starts afresh in each process)."""

    def __init__(
        self,
        rate: object = None,
        *,
        name: str | None = None,
        path: str | None = None,
        burst: int = 1,
        num_nodes: int = 1,
        concurrency: AdaptiveLimit | None = None,
    ):
        if concurrency is not None and not isinstance(concurrency, AdaptiveLimit):
            raise ArgumentTypeError(
                f"concurrency must be an AdaptiveLimit or None; got {short_repr(concurrency)} ({type(concurrency).__name__})"
            )
        self.budget = (
            SharedBudget(node_rate(rate, num_nodes), name=name, path=path, burst=burst) if rate is not None else None
        )
        self.concurrency = concurrency

    def slot(self) -> Slot:
        """``async with limiter.slot():`` (asyncio) — the same object also works as ``with``."""
        return Slot(self)

    def slot_sync(self) -> Slot:
        """``with limiter.slot_sync():`` from threads (a plain fn run with concurrency=N)."""
        return Slot(self)

    def close(self) -> None:
        if self.budget is not None:
            self.budget.close()

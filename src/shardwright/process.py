"""Processes of this host: are they alive, are they still the same process, how did they end,
and how to stop them. The one home of these helpers for the engine's worker pool, the
protocol's liveness checks (stale leases, temp files, cache pins) and the jobs service's
local executor.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping

_PR_SET_PDEATHSIG = 1

HOST_ID_VAR = "SHARDWRIGHT_HOST_ID"  # tests, pods and Ray tasks set it: see host_identity()
JOB_NAME_VAR = "SHARDWRIGHT_JOB_NAME"  # a Kubernetes Job's name (the generated manifest sets it)


def host_identity(env: Mapping[str, str] | None = None) -> str:
    """THE identity of the host a process runs on, as leases, failure records and run records
    name it. Processes with the same identity see each other's pids, so a lease whose holder
    has this identity and a pid that is gone is stale at once.

    ``SHARDWRIGHT_HOST_ID`` when set (tests emulating several machines on one; a Ray task sets
    it to its host plus its Ray node, so two Ray nodes never judge each other by pid); in a
    pod of a Kubernetes Indexed Job (``JOB_COMPLETION_INDEX`` and ``SHARDWRIGHT_JOB_NAME``),
    ``k8s:{job}/{index}``, stable across restarts of the pod (its hostname is not); else the
    hostname.
    """
    env = os.environ if env is None else env
    explicit = env.get(HOST_ID_VAR)
    if explicit:
        return explicit[:200]
    index, job = env.get("JOB_COMPLETION_INDEX"), env.get(JOB_NAME_VAR)
    if index is not None and job:
        return f"k8s:{job[:100]}/{index[:20]}"
    return socket.gethostname()


def slurm_task(env: Mapping[str, str] | None = None) -> str | None:
    """The Slurm task this process runs in, ``JOB_ARRAYTASK`` (the array's job id and task
    index; the job id alone outside an array), None outside Slurm. The one home of the Slurm
    job's environment names for records (attempts, leases)."""
    env = os.environ if env is None else env
    job = env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID")
    return f"{job}_{env.get('SLURM_ARRAY_TASK_ID', '')}" if job else None


def slurm_restart_count(env: Mapping[str, str] | None = None) -> int:
    """How often Slurm has requeued this task (``SLURM_RESTART_COUNT``; 0 when unset or not a
    number): tells a requeued incarnation from the one before it, which share an identity."""
    env = os.environ if env is None else env
    value = env.get("SLURM_RESTART_COUNT", "0")
    return int(value) if value.isdigit() and len(value) < 10 else 0


def slurm_identity(env: Mapping[str, str] | None = None) -> str | None:
    """The Slurm task and step process (``SLURM_PROCID``) this process is, None outside Slurm."""
    env = os.environ if env is None else env
    task = slurm_task(env)
    return f"{task}_{env.get('SLURM_PROCID', '0')}" if task is not None else None


def _proc_stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name, None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode("ascii", "replace").split()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process of this host still exists and has not exited.

    A zombie (exited, not yet reaped by its parent: in a container whose PID 1 never reaps,
    forever) is dead: ``os.kill(pid, 0)`` still succeeds for it, so its state is read from
    /proc where there is one.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    fields = _proc_stat_fields(pid)
    if not fields:
        return True  # no /proc (macOS) or it just vanished: trust kill(0)
    return fields[0] not in ("Z", "X")


def process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if it is gone or a
    zombie. With the pid it names one process for good: a reused pid has another start time."""
    fields = _proc_stat_fields(pid)
    if not fields or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def is_same_process(pid: int | None, start: str | None) -> bool:
    """Whether ``pid`` still runs and is the process that had start time ``start``."""
    if not pid or start is None:
        return False
    return process_start(pid) == start


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, for a message: "was killed by SIGKILL (...)", "exited with code 3 ..."."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (what the OOM killer sends)" if exitcode == -signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode} without reporting (os._exit or a crash in native code)"


def die_with_parent(parent_pid: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG), so a
    SIGKILLed main process or server leaves nothing writing on. With ``parent_pid``: exit at
    once if the parent already died before the request took effect."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the pool's own watch still stops workers
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(70)


# glibc's mallopt(3) parameters (malloc.h) and the values worker processes use
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HEAP_ALLOCATIONS_BELOW = 32 << 20  # what glibc's own sliding threshold reaches at most (64-bit)
HEAP_KEPT_FOR_REUSE = 128 << 20
WORKER_MALLOC_VAR = "SHARDWRIGHT_WORKER_MALLOC"  # "default": leave glibc's settings alone


def reuse_freed_memory() -> bool:
    """In a process that makes large items over and over (an optimize worker): have glibc
    serve allocations under 32 MiB from the heap and keep up to 128 MiB of freed heap for the
    next ones, instead of handing memory back to the kernel after each chunk.

    Why: glibc's default returns a freed chunk's 64 MB of items to the kernel, and each new
    1 MiB item then lands on fresh pages the kernel must zero (issue 19's profile: making and
    encoding 1 GiB of 1 MiB arrays took 0.55 s, 0.16 s with this). The memory kept is what the
    worker used at its peak anyway, at most 128 MiB more. False (nothing changed) off glibc,
    or when SHARDWRIGHT_WORKER_MALLOC=default."""
    if os.environ.get(WORKER_MALLOC_VAR) == "default":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS): their allocators keep their own policies
    return bool(mallopt(_M_MMAP_THRESHOLD, HEAP_ALLOCATIONS_BELOW)) and bool(
        mallopt(_M_TRIM_THRESHOLD, HEAP_KEPT_FOR_REUSE)
    )


def terminate(pid: int) -> None:
    """Ask a process to stop at its next commit point (SIGTERM); gone already is fine."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def kill_group(pid: int) -> None:
    """SIGKILL a session leader's process group (the process and its workers), or the process."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def kill_stale(pid: int | None, start: str | None, timeout: float = 15.0) -> bool:
    """Kill a process (group) left behind by an earlier server, only if it is still that
    process (same pid and start time). Returns True once it is gone."""
    if pid is None or not is_same_process(pid, start):
        return True
    kill_group(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_same_process(pid, start):
            return True
        time.sleep(0.05)
    return False


class ForkSafeLock:
    """A lock that a forked child starts with unlocked: a plain lock held by another thread at
    the moment of the fork would stay locked forever in the child (the engine forks workers
    while a committer or prefetch thread may hold a storage client's lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

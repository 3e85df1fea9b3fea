"""``optimize(..., executor="ray")``: the run's shards spread over a Ray cluster's nodes.

The driver (the process that called optimize, ``engine/driver.py``) does what it does for
every executor before and after the work: it holds the run's node lease, decides what the
output needs (``decide``), creates the manifest, and publishes. In between this executor
hands the unfinished shards to Ray tasks, one per node by default (``scheduling_strategy="SPREAD"``, ``num_cpus``
= ``num_workers``), and each task runs its shards on ``num_workers`` local processes
exactly as a node of a Slurm run does, under each shard's claim (protocol 5).

Failures, and why each stays exactly once:
- a node dies: Ray retries its task elsewhere (``max_retries``), and the driver resubmits
  what is left when Ray gives up. The new task takes the dead node's claims over at once (a
  holder on a node Ray reports dead), resumes each shard from its committed chunks, and a
  task that is in fact alive but cut off is fenced by the claim's epoch.
- the driver is SIGKILLed: Ray ends its job's tasks; rerunning the same call resumes, and
  the new tasks take the old job's claims over at once (the old job is dead in Ray's table).
- the driver is stopped (Ctrl-C, SIGTERM): it cancels its tasks without force, which reaches
  each task's pool as a SIGINT, so they stop as a local run does, keeping their chunks in
  progress as pending tails (the same bytes after the resume), then it exits (143 on SIGTERM,
  as a local run, and the run history, so ``shardwright status``, names the signal); a task
  still running after STOP_WAIT_SECONDS, or a second signal, is killed (its tail is redone).
- Ray retries a task that had finished: its shards are done (it releases and returns), or
  the run is published already (the manifest is gone: it returns at once).

Ray is imported only when a call names this executor (``pip install 'shardwright[ray]'``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine.executors import ExecutorCall, OpenedRun, Placement, ShareTotals
from ..engine.inputs import RunInputs
from ..engine.messages import Committed, Progress
from ..engine.options import OptimizeOptions
from ..engine.planning import NodeIdentity
from ..engine.progress import Tracker, tqdm_class
from ..engine.share import run_share
from ..errors import ConcurrentRunError, LeaseLostError, ShardwrightError, UsageError
from ..process import HOST_ID_VAR, host_identity
from ..protocol.lease import HolderFields, LeaseHolder, lease_ttl
from ..protocol.manifest import Manifest, read_manifest
from ..protocol.records import ShardProgress, load_progress
from ..storage import open_storage
from .ray_probe import probe_ray_address

log = logging.getLogger("shardwright")

RESUBMITS = 3  # the driver's own resubmissions of a share after Ray's retries are spent
BOARD_FLUSH_SECONDS = 0.5
# How long a stopped driver waits for its tasks to stop on their own (each worker finishes the
# input it is on and writes its tail) before killing them; a second Ctrl-C kills them at once.
STOP_WAIT_SECONDS = 60.0


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("the ray package is not installed") from None
    return ray


class RayExecutor:
    """The driver's side (see the module docstring): where the shards go, and Ray's connection
    for the whole call; the driver (``engine/driver.py``) does the rest."""

    def __init__(self) -> None:
        self.ray: Any = None
        self.remote_args: dict = {}
        self.workers = 1
        self.tasks = 1

    @contextmanager
    def place(self, call: ExecutorCall) -> Iterator[Placement]:
        ray = import_ray()
        if call.options.node_rank is not None:
            raise UsageError(
                "executor='ray' spreads the run over the Ray cluster itself: do not pass node_rank "
                "(num_nodes= sets how many Ray tasks share the run)"
            )
        if ray.is_initialized():  # the caller's own connection: theirs to keep
            yield self._place(ray, call.options)
            return
        # RAY_ADDRESS, else a local cluster, as ray.init() does. A connection we opened we
        # close: a Ray driver's threads left in the caller's process make any later fork
        # there (a DataLoader's workers, a process pool) hang on a lock one of them held.
        probe_ray_address()  # a wrong RAY_ADDRESS: one line in seconds, not ray.init's 13.7 minutes
        ray.init(log_to_driver=call.options.verbose, configure_logging=False)
        try:
            yield self._place(ray, call.options)
        finally:
            ray.shutdown()

    def _place(self, ray: Any, options: OptimizeOptions) -> Placement:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.ray = ray
        self.remote_args = task_options(options, nodes)
        self.workers = task_workers(options, self.remote_args)
        self.tasks = options.num_nodes or max(1, len(nodes))
        shared_by = f"the {len(nodes)} nodes of the Ray cluster" if len(nodes) > 1 or self.tasks > 1 else None
        return Placement(NodeIdentity(0, 1, "the Ray driver"), self.tasks, shared_by, executor="ray")

    def run_shards(self, run: OpenedRun) -> ShareTotals:
        counts = _Driver(self.ray, run, self.remote_args, self.workers, self.tasks).run_all()
        return ShareTotals(items=counts.items, chunks=counts.chunks, bytes=counts.bytes, failed=counts.failed)


def task_options(options: OptimizeOptions, nodes: list[dict]) -> dict:
    """Ray's options of each share task: one per node (SPREAD), ``num_workers`` CPUs, retried
    on system failures only; ``ray_remote_args`` overrides any of them."""
    engines = options.engines
    defaults: dict = {
        "num_cpus": options.num_workers if engines.num_workers_given else 1,
        "max_retries": 3,
        "retry_exceptions": False,
        "scheduling_strategy": "SPREAD",
    }
    merged = {**defaults, **(engines.ray_remote_args or {})}
    wanted = merged.get("num_cpus") or 0
    most = max((float(n.get("Resources", {}).get("CPU", 0)) for n in nodes), default=0.0)
    if nodes and wanted > most:
        raise UsageError(
            f"each Ray task asks for {wanted} CPUs but the largest live node has {most:g}: the tasks could "
            f"never start. Pass num_workers= (and ray_remote_args={{'num_cpus': ...}}) at most {most:g}"
        )
    return merged


def task_workers(options: OptimizeOptions, remote_args: dict) -> int:
    """Worker processes per task: ``num_workers`` when given, else the CPUs the task asks for."""
    if options.engines.num_workers_given:
        return options.num_workers
    return max(1, int(remote_args.get("num_cpus") or 1))


@dataclass
class Counts:
    inputs: int = 0
    items: int = 0
    chunks: int = 0
    bytes: int = 0
    failed: int = 0

    def add(self, other: dict) -> None:
        for name in ("inputs", "items", "chunks", "bytes", "failed"):
            setattr(self, name, getattr(self, name) + int(other.get(name, 0)))


@dataclass(frozen=True)
class ShareCall:
    """What a share task needs besides fn and inputs (which travel as object refs)."""

    output_url: str
    options: OptimizeOptions
    manifest: Manifest
    workers: int
    board: Any  # the ProgressBoard actor (None: nobody shows a bar, nothing to report)
    task_index: int


@dataclass
class _Share:
    shards: list[int]
    index: int
    resubmits: int = 0
    ref: Any = None


@dataclass
class _Driver:
    """Ray's part of a run: distribution, resubmission, progress, liveness."""

    ray: Any
    run: OpenedRun
    remote_args: dict
    workers: int
    tasks: int
    counts: Counts = field(default_factory=Counts)
    done_inputs: int = 0  # inputs committed when the last look at the records was taken
    # the records' view the run history's attempt counts from (engine.attempts), kept current
    tracker: Tracker | None = None
    signals: list[int] = field(default_factory=list)  # the SIGTERMs the driver received

    @property
    def call(self) -> ExecutorCall:
        return self.run.call

    @property
    def manifest(self) -> Manifest:
        return self.run.manifest

    def unfinished(self) -> list[int]:
        progress = self._progress()
        self.done_inputs = sum(p.inputs_done for p in progress.values())
        if self.tracker is None:  # the attempt's run and its inputs done before this call
            self.tracker = Tracker(progress, verbose=False)
            self.run.attempt.attach(self.manifest, self.tracker)
        self.tracker.progress = progress
        return sorted(s for s, p in progress.items() if not p.done)

    def _progress(self) -> dict[int, ShardProgress]:
        storage = open_storage(self.call.output_dir, self.call.options.storage_options)
        return load_progress(
            storage, self.manifest.shard_bounds(), self.manifest.run_id, sealed=self.manifest.records_sealed
        )

    def _counts_from_records(self, before: dict[int, ShardProgress]) -> None:
        """What this call committed, from the records (the ground truth): a task that died with
        its node never returned its counts, yet its commits are in the dataset. Records that
        were there before this call (an earlier attempt's) are not this call's."""
        after, earlier = self._progress(), _committed(before, set(before))
        for name, value in _committed(after, set(before)).items():
            setattr(self.counts, name, max(0, value - earlier[name]))
        self.counts.failed = sum(len(after[s].failed) for s in before if s in after)

    def run_all(self) -> Counts:
        ray = self.ray
        remote = remote_share_task(ray).options(**self.remote_args)
        # the bar's actor starts a worker process (~1 s): only when a bar is shown, once per driver
        board = _progress_board(ray) if self.call.options.verbose else None
        fn_ref, inputs_ref = ray.put(self.call.fn), ray.put(self.call.inputs)
        bar = self._open_bar()
        deadline = None
        restore = _sigterm_as_exit(self.signals)
        try:
            pending = self.unfinished()
            before = {s: p for s, p in self._progress().items() if s in pending}
            if bar is not None:
                bar.n = self.done_inputs
            while pending:
                shares = [_Share(pending[i :: self.tasks], i) for i in range(min(self.tasks, len(pending)))]
                for share in shares:
                    share.ref = remote.remote(fn_ref, inputs_ref, self._share_call(board, share), share.shards)
                busy = self._wait(shares, remote, fn_ref, inputs_ref, board, bar)
                pending = self.unfinished()
                if pending and busy:
                    # claims another live process holds (a task of an earlier driver that Ray has
                    # not reported dead yet): wait for them to be released or to go stale
                    deadline = deadline or time.monotonic() + 3 * lease_ttl()
                    if time.monotonic() > deadline:
                        raise ConcurrentRunError(
                            f"shard(s) {sorted(busy)[:20]} of {self.call.output_dir} stay claimed by another live "
                            "process; stop that run, or wait for it to finish"
                        )
                    time.sleep(min(2.0, lease_ttl() / 4))
                elif pending:
                    raise ShardwrightError(f"shard(s) {pending[:20]} are still not done after every task returned")
        finally:
            restore()
            if bar is not None:
                bar.close()
        self._counts_from_records(before)
        if self.tracker is not None:
            self.tracker.items = self.counts.items  # the run history's items written by this call
        return self.counts

    def _share_call(self, board: Any, share: _Share) -> ShareCall:
        return ShareCall(self.call.output_dir, self.call.options, self.manifest, self.workers, board, share.index)

    def _open_bar(self) -> Any:
        if not self.call.options.verbose:
            return None
        return tqdm_class()(
            total=self.manifest.num_inputs, unit="input", desc="optimize (ray)", mininterval=0.5, dynamic_ncols=True
        )

    def _wait(self, shares: list[_Share], remote: Any, fn_ref: Any, inputs_ref: Any, board: Any, bar: Any) -> set:
        """Until every share returned: progress on the bar, failures raised or resubmitted."""
        ray = self.ray
        busy: set[int] = set()
        running = {share.ref: share for share in shares}
        base = self.done_inputs
        try:
            while running:
                ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
                if bar is not None and not ready:
                    self._refresh(board, bar, base)
                if self.run.lease.lost:
                    raise LeaseLostError(f"stopped: {self.run.lease.lost}")
                for ref in ready:
                    share = running.pop(ref)
                    try:
                        summary = ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:
                        raise _cause(exc) from None
                    except ray.exceptions.RayError as exc:  # the node, worker or object is gone
                        if share.resubmits >= RESUBMITS:
                            raise ShardwrightError(
                                f"the Ray task running shard(s) {share.shards[:20]} failed {RESUBMITS + 1} times "
                                f"({type(exc).__name__}: {str(exc)[:300]}); committed work is kept, rerun the "
                                "same call to resume"
                            ) from exc
                        log.warning("a Ray task failed (%s); its shards are resubmitted", type(exc).__name__)
                        share.resubmits += 1
                        share.ref = remote.remote(fn_ref, inputs_ref, self._share_call(board, share), share.shards)
                        running[share.ref] = share
                        continue
                    self.counts.add(summary)
                    busy.update(summary.get("busy", []))
        except (KeyboardInterrupt, SystemExit):
            # Ctrl-C, or SIGTERM (Ray's driver handler raises SystemExit): stop the tasks as a
            # signal stops a local run, so each keeps its chunk in progress as a pending tail
            self._stop_gracefully(list(running))
            if self.signals:  # raised inside ray.wait, the handler's SystemExit(143) comes out as exit 1
                raise SystemExit(128 + self.signals[0]) from None
            raise
        except BaseException:
            for ref in running:
                ray.cancel(ref, force=True)  # their committed work is kept
            raise
        self._refresh(board, bar, base)
        return busy

    def _stop_gracefully(self, refs: list) -> None:
        """Ask every running task to stop and wait until they returned. ``ray.cancel`` without
        force interrupts a task's main thread as a SIGINT would, which the task's pool takes as
        a stop: its workers finish the input they are on, commit their full chunks and keep the
        one in progress as a pending tail, then release their claims (engine.pool). A forced
        cancel kills the task's process at once, like a SIGKILL: its tail is lost and redone.
        Forced after STOP_WAIT_SECONDS (plus the inputs' ``stop_grace``), or at a second signal."""
        ray = self.ray
        for ref in refs:
            ray.cancel(ref, force=False)
        deadline = time.monotonic() + STOP_WAIT_SECONDS + self.call.options.inflight.stop_grace
        try:
            while refs and time.monotonic() < deadline:
                _ready, refs = ray.wait(refs, num_returns=len(refs), timeout=0.5)
        finally:  # out of time, or a second Ctrl-C / SIGTERM: stop now, the records stand
            for ref in refs:
                ray.cancel(ref, force=True)
        try:
            self.unfinished()  # the run history's attempt: the inputs done by the tasks' last commits
        except Exception as exc:
            log.debug("could not read the records after the stop: %s", exc)

    def _refresh(self, board: Any, bar: Any, base: int) -> None:
        if board is None:
            return
        try:
            totals = self.ray.get(board.totals.remote(self.manifest.run_id), timeout=2)
        except Exception:
            return  # the board's node is gone: the bar pauses, the run goes on
        if bar is not None:
            bar.n = min(self.manifest.num_inputs, base + totals.get("inputs", 0))
            bar.refresh()


def _sigterm_as_exit(seen: list[int]) -> Callable[[], object]:
    """SIGTERM raises SystemExit(143) in the driver while its tasks run, as in a local run (the
    run history says ``interrupted (SIGTERM)``, the exit code is 143; Ray's own handler exits
    with 1); each is noted in ``seen``. Returns what puts the previous handler back (nothing to do off the main thread,
    where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_sigterm(signum: int, frame: object) -> None:
        seen.append(signum)
        raise SystemExit(128 + signum)

    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, on_sigterm)
    # a handler set outside Python (None) cannot be put back: the default is the nearest
    return lambda: signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _committed(progress: dict[int, ShardProgress], shards: set[int]) -> dict[str, int]:
    """Items, chunks and stored bytes the records of ``shards`` name."""
    chunks = [r for s in shards if s in progress for r in progress[s].records if r.chunk is not None]
    return {
        "items": sum(r.chunk.chunk_size for r in chunks if r.chunk is not None),
        "chunks": len(chunks),
        "bytes": sum(r.stored_bytes for r in chunks),
    }


def _cause(exc: Any) -> BaseException:
    """The exception the task raised (FnError, ...), not Ray's wrapper."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _on_this_node(ray: Any) -> dict:
    """Put the progress board on the driver's node: it lives as long as the driver does."""
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node_id = ray.get_runtime_context().get_node_id()
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)}
    except Exception:
        return {}


# --- the task's side ---------------------------------------------------------------------------


class ProgressBoard:
    """A Ray actor summing what every task reports per run, read by the driver's progress bar
    (one per driver process, reused by its calls)."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, int]] = {}

    def add(self, run_id: str, delta: dict) -> None:
        totals = self.runs.setdefault(run_id, {})
        for name, value in delta.items():
            totals[name] = totals.get(name, 0) + int(value)

    def totals(self, run_id: str) -> dict:
        return dict(self.runs.get(run_id, {}))


class RayJudge:
    """Sees claim holders dead that only Ray can: on a node Ray reports dead, or started by a
    Ray job that has ended (a SIGKILLed driver). Asks Ray at most every two seconds."""

    def __init__(self, ray: Any, job_id: str):
        self.ray = ray
        self.job_id = job_id
        self.checked = 0.0
        self.dead_nodes: set[str] = set()
        self.dead_jobs: set[str] = set()

    def _refresh(self) -> None:
        if time.monotonic() - self.checked < 2.0:
            return
        self.checked = time.monotonic()
        try:
            self.dead_nodes = {n["NodeID"] for n in self.ray.nodes() if not n.get("Alive")}
        except Exception:
            self.dead_nodes = set()
        try:  # Ray's job table has no public API outside its dashboard
            from ray._private.state import state

            self.dead_jobs = {j["JobID"] for j in state.job_table() if j.get("IsDead")}
        except Exception:
            self.dead_jobs = set()

    def __call__(self, holder: LeaseHolder) -> str | None:
        node, job = holder.ray_node, holder.ray_job
        if not node and not job:
            return None
        self._refresh()
        if node in self.dead_nodes:
            return f"its Ray node {str(node)[:12]} is dead"
        if job and job != self.job_id and job in self.dead_jobs:
            return f"the Ray job {job} that started it has ended"
        return None


def share_task(fn: Callable, inputs: RunInputs, call: ShareCall, shards: list[int]) -> dict:
    """One Ray task: run ``shards`` of the run on ``call.workers`` local processes."""
    ray = import_ray()
    context = ray.get_runtime_context()
    node_id, job_id = context.get_node_id(), context.get_job_id()
    suffix = f"ray-{node_id[:16]}"
    if not os.environ.get(HOST_ID_VAR, "").endswith(suffix):
        # processes of two Ray nodes never judge each other by pid, even on one machine
        os.environ[HOST_ID_VAR] = f"{host_identity()}/{suffix}"
    storage = open_storage(call.output_url, call.options.storage_options)
    current = read_manifest(storage)
    if current is None or current.run_id != call.manifest.run_id:
        return {}  # published already (Ray retried a task that had finished), or another run's
    options = call.options
    if options.num_workers != call.workers:
        options = replace(options, num_workers=call.workers)
    delta: dict[str, int] = {}
    last_flush = [time.monotonic()]

    def flush() -> None:
        if delta and call.board is not None:
            call.board.add.remote(call.manifest.run_id, dict(delta))
            delta.clear()
        last_flush[0] = time.monotonic()

    def on_message(message: Any) -> None:
        if isinstance(message, Progress):
            delta["inputs"] = delta.get("inputs", 0) + message.inputs
        elif isinstance(message, Committed) and message.record.chunk is not None:
            delta["items"] = delta.get("items", 0) + message.record.chunk.chunk_size
            delta["chunks"] = delta.get("chunks", 0) + 1
            delta["bytes"] = delta.get("bytes", 0) + message.record.stored_bytes

    def on_idle(current_inputs: object) -> str | None:  # engine.share.CurrentInputs, unused here
        if time.monotonic() - last_flush[0] >= BOARD_FLUSH_SECONDS:
            flush()
        return None

    fields = HolderFields(
        ray_node=node_id, ray_job=job_id, ray_ip=_node_ip(ray), ray_task=call.task_index, host_name=socket.gethostname()
    )
    share = run_share(
        storage,
        call.manifest,
        fn,
        inputs,
        options,
        call.task_index,
        shards,
        claim_fields=fields,
        judge=RayJudge(ray, job_id),
        require_all=False,
        on_message=on_message,
        on_idle=on_idle,
    )
    flush()
    tracker = share.tracker
    return {
        "items": tracker.items,
        "chunks": tracker.chunks,
        "bytes": tracker.bytes,
        "failed": sum(len(p.failed) for p in share.progress.values()),
        "busy": sorted(share.busy),
    }


def _node_ip(ray: Any) -> str:
    try:
        return str(ray.util.get_node_ip_address())
    except Exception:
        return ""


_remote_cache: dict[str, Any] = {}


def remote_share_task(ray: Any) -> Any:
    if "share" not in _remote_cache:
        _remote_cache["share"] = ray.remote(share_task)
    return _remote_cache["share"]


def _board_class(ray: Any) -> Any:
    if "board" not in _remote_cache:
        _remote_cache["board"] = ray.remote(ProgressBoard)
    return _remote_cache["board"]


def _progress_board(ray: Any) -> Any:
    """This driver's ProgressBoard actor, created on first use (again after a reconnect)."""
    job = ray.get_runtime_context().get_job_id()
    cached = _remote_cache.get("board_actor")
    if cached is None or cached[0] != job:
        actor = _board_class(ray).options(num_cpus=0, **_on_this_node(ray)).remote()
        _remote_cache["board_actor"] = cached = (job, actor)
    return cached[1]

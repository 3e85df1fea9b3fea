"""A typed report of an output's run state (what ``shardwright status`` prints and the jobs
service serves). ``merge`` moved to :mod:`.publish`; the name stays importable here for one
release."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from ..names import printable
from ..storage import Storage
from .history import Attempt, read_history
from .layout import FAILED_PREFIX, INDEX_KEY, PROGRESS_PREFIX, snapshot_shard
from .lease import read_leases
from .manifest import read_manifest
from .progress import read_snapshot
from .publish import merge
from .records import ShardProgress, load_progress
from .run_record import read_run_record
from .shards import shards_of_node

__all__ = [
    "STATES",
    "InputInProgress",
    "LeaseStatus",
    "NodeProgress",
    "RunStatus",
    "merge",
    "read_status",
    "stop_reason",
]

STATES = ("empty", "complete", "running", "interrupted", "failed")


@dataclass(frozen=True)
class LeaseStatus:
    name: str
    host: str | None
    pid: int | None
    heartbeat_age_s: float
    live: bool
    current_inputs: list[int] = field(default_factory=list)  # the input each worker is on (-1: idle)
    shard: int | None = None  # a shard claim: its shard (protocol 5)
    node_rank: int | None = None
    num_nodes: int | None = None
    ray_node: str | None = None  # executor="ray": the Ray node holding it, and its address
    ray_ip: str | None = None

    @property
    def place(self) -> str:
        """Where the holder runs, for a person: a Ray node, a node rank, or a host."""
        if self.ray_node:
            return f"ray node {self.ray_node[:12]}" + (f" ({self.ray_ip})" if self.ray_ip else "")
        if self.node_rank is not None and (self.num_nodes or 1) > 1:
            return f"node {self.node_rank}"
        return f"host {self.host}"


@dataclass(frozen=True)
class NodeProgress:
    """One node's share of a multi-node run (its shards by the static map) and how far it is."""

    node: int
    shards: int
    shards_done: int
    inputs: int
    inputs_done: int
    live: bool  # its node lease is live


@dataclass(frozen=True)
class InputInProgress:
    """One input a live worker is on: ``doc007.txt: page 17`` (its name and ResumePoint state)."""

    input: int  # position among the call's inputs
    name: str  # shardwright.names: a file's path, a source row's file and row, a bounded repr
    worker: int
    place: str  # where the worker runs (a host, a node, a Ray node)
    state: str | None = None  # its last ResumePoint state as JSON, when one was recorded
    named: bool = True  # False: the holder published no name for it ("input 7")
    calls: int = 0  # its calls in flight under fn's Limiter (engine.call_count): 0 when none or not known

    def describe(self) -> str:
        """``doc007.txt: page 17, 3 calls in flight``."""
        # printable: names and states come from inputs and fn's ResumePoints (an LLM's reply, a
        # file name) by way of a lease file anyone who can write the output could have edited
        parts = [printable(_state_text(self.state))] if self.state else []
        if self.calls:
            parts.append(f"{self.calls} call{'s' if self.calls != 1 else ''} in flight")
        name = printable(self.name)
        return f"{name}: {', '.join(parts)}" if parts else name


def _state_text(state: str) -> str:
    """``{"page": 17}`` as ``page 17`` (anything else as it is)."""
    try:
        value = json.loads(state)
    except (ValueError, RecursionError):
        return state
    if isinstance(value, dict) and value:
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return state


@dataclass(frozen=True)
class RunStatus:
    """The state of an output: ``empty`` (nothing written), ``complete`` (published, no run in
    progress), ``running`` (a live lease), ``failed`` (the run's last attempt stopped on an
    error, saved in its history: ``stop_reason`` says which) or ``interrupted`` (stopped by a
    signal or killed). Failed and interrupted runs resume when the same call is rerun."""

    output_dir: str
    state: str
    published: bool
    last_run: dict | None
    failed_records: int
    # the run in progress (None / empty when there is none)
    run_id: str | None = None
    mode: str | None = None
    generation: int | None = None
    inputs: int = 0
    inputs_done: int = 0  # committed: their outputs are in chunks that records name
    # inputs whose outputs a graceful stop kept in its shards' pending tails (progress
    # snapshots, protocol 3b): done, not committed; the resume commits them without calling fn
    # again. Counted only while no worker is live (then the tails are what the resume takes up).
    inputs_in_tails: int = 0
    items_committed: int = 0
    chunks_committed: int = 0
    bytes_committed: int = 0  # chunk files as stored (the run telemetry's bytes written)
    shards: int = 0
    shards_done: list[int] = field(default_factory=list)
    shards_in_progress: list[int] = field(default_factory=list)
    shards_pending: list[int] = field(default_factory=list)
    leases: list[LeaseStatus] = field(default_factory=list)
    nodes: list[NodeProgress] = field(default_factory=list)  # multi-node runs: each node's progress
    fn: str | None = None
    started_at: float | None = None
    stop_reason: str | None = None  # "user error: FnError on input 150", "interrupted (SIGTERM)", ...
    last_attempt: Attempt | None = None
    attempts: int = 0  # attempts of this run in the history
    # in the user's terms (issue 32 item 6): each input a live worker is on, by name, with its
    # last ResumePoint state when one was recorded; inputs counted done / in progress / pending /
    # failed; the seconds left at the rate of this run so far (None: not known yet)
    in_progress: list[InputInProgress] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    eta_s: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


def read_status(storage: Storage) -> RunStatus:
    """What is done, in progress, pending and failed in ``storage``'s output."""
    published = storage.exists(INDEX_KEY)
    manifest = read_manifest(storage)
    record = read_run_record(storage)
    last_run = record.to_json() if record is not None else None
    failed_records = len([k for k in storage.list(FAILED_PREFIX) if k.endswith(".json")])
    if manifest is None:
        return RunStatus(storage.url, "complete" if published else "empty", published, last_run, failed_records)
    progress = load_progress(storage, manifest.shard_bounds(), manifest.run_id, sealed=manifest.records_sealed)
    holders = list(read_leases(storage))
    leases = [
        LeaseStatus(
            name,
            holder.host,
            holder.pid,
            round(holder.heartbeat_age(), 1),
            holder.is_live(),
            list(holder.current_inputs),
            holder.shard,
            holder.node_rank,
            holder.num_nodes,
            holder.ray_node,
            holder.ray_ip,
        )
        for name, holder in holders
    ]
    in_progress = _inputs_in_progress(holders, leases)
    history = [a for a in read_history(storage) if a.run_id == manifest.run_id]
    latest_per_node = {a.node_rank: a for a in history}  # oldest first: the newest of each node wins
    stopped_by_error = [a for a in latest_per_node.values() if a.ended == "failed"]
    last = stopped_by_error[-1] if stopped_by_error else (history[-1] if history else None)
    if any(lease.live for lease in leases):
        state, reason = "running", None
    elif stopped_by_error:  # a node whose last attempt failed holds the run up until it is fixed and rerun
        state, reason = "failed", stop_reason(stopped_by_error[-1])
    else:
        state, reason = "interrupted", stop_reason(last) if last is not None else None
    claimed = {lease.shard for lease in leases if lease.shard is not None and lease.live}
    done = sum(p.inputs_done for p in progress.values())
    busy = len(in_progress)
    # trust round 10: the inputs that failed inside a tail were counted as pending ("195
    # pending, 4 failed" beside 6 failure records); each input is counted once, where it is
    kept, failed_in_tails = (0, 0) if state == "running" else tail_counts(storage, manifest.run_id, progress)
    failed_committed = len({i for p in progress.values() for r in p.records for i, _ in r.failed})
    failed_now = failed_committed + failed_in_tails
    counts = {
        "done": done - failed_committed,  # the failed are counted once: as failed
        "in_tails": kept,
        "in_progress": busy,
        "pending": max(0, manifest.num_inputs - done - kept - busy - failed_in_tails),
        "failed": failed_now,
    }
    return RunStatus(
        output_dir=storage.url,
        state=state,
        stop_reason=reason,
        last_attempt=last,
        attempts=len(history),
        published=published,
        last_run=last_run,
        failed_records=failed_records,
        run_id=manifest.run_id,
        mode=manifest.mode,
        generation=manifest.generation,
        inputs=manifest.num_inputs,
        inputs_done=sum(p.inputs_done for p in progress.values()),
        inputs_in_tails=kept,
        items_committed=sum(c.chunk_size for p in progress.values() for c in p.chunks),
        chunks_committed=sum(len(p.chunks) for p in progress.values()),
        bytes_committed=sum(r.stored_bytes for p in progress.values() for r in p.records),
        shards=manifest.num_shards,
        shards_done=[s for s, p in progress.items() if p.done],
        shards_in_progress=[s for s, p in progress.items() if not p.done and (p.records or s in claimed)],
        shards_pending=[s for s, p in progress.items() if not p.records and s not in claimed],
        leases=leases,
        nodes=node_progress(progress, leases, manifest.num_shards),
        fn=manifest.fn_name,
        started_at=manifest.created_at,
        in_progress=in_progress,
        counts=counts,
        eta_s=_eta(done, manifest.num_inputs - done - failed_in_tails, history, manifest.created_at)
        if state == "running"
        else None,
    )


def tail_counts(storage: Storage, run_id: str, progress: dict[int, ShardProgress]) -> tuple[int, int]:
    """(inputs finished, inputs failed) past the records of the unfinished shards, in the
    progress snapshots the resume takes up: the snapshot that extends a shard's chain tip, read
    and verified by the same :func:`read_snapshot` (one that does not extend the tip, or is torn
    or damaged, or whose segments are, is ignored here as the resume ignores it). An input is
    finished when all its outputs are in the snapshot's buffer (not one stopped between a
    generator's outputs), or in a finished slot (a run with ``concurrency``); it failed when
    the buffer lists it as skipped (``on_error="skip"``: its failure record is written) or its
    slot gave up on it. One listing of the progress folder finds the shards that have a
    snapshot at all."""
    with_snapshot = {snapshot_shard(key) for key in storage.list(PROGRESS_PREFIX)}
    wanted = [p for s, p in sorted(progress.items()) if s in with_snapshot and not p.done]

    def counted(p: ShardProgress) -> tuple[int, int]:
        tip = p.records[-1].epoch if p.records else None
        snapshot = read_snapshot(storage, run_id, p.shard, p.next_seq, tip, (p.next_input, p.skip_outputs))
        if snapshot is None:
            return 0, 0
        head = snapshot.buffer.position[0]
        if not p.next_input <= head <= p.end:
            return 0, 0  # not this shard's inputs: the resume redoes them
        slots = [s for s in snapshot.slots if s.done and s.position < p.end]
        failed = len(snapshot.buffer.failed) + sum(1 for s in slots if s.failed)
        in_buffer = head - p.next_input - len(snapshot.buffer.failed)
        return max(0, in_buffer) + sum(1 for s in slots if not s.failed), failed

    counts = storage.map_requests(counted, wanted)
    return sum(kept for kept, _ in counts), sum(failed for _, failed in counts)


def node_progress(progress: dict, leases: list[LeaseStatus], num_shards: int) -> list[NodeProgress]:
    """Per-node progress of a run whose node leases say it has several nodes (Slurm,
    Kubernetes): each rank's shards by the static map."""
    counts = {lease.num_nodes for lease in leases if lease.shard is None and lease.num_nodes}
    count = max(counts, default=1)
    if count <= 1:
        return []
    live = {lease.node_rank for lease in leases if lease.shard is None and lease.live}
    nodes = []
    for rank in range(count):
        mine = [progress[s] for s in shards_of_node(num_shards, rank, count) if s in progress]
        nodes.append(
            NodeProgress(
                rank,
                len(mine),
                sum(1 for p in mine if p.done),
                sum(p.end - p.start for p in mine),
                sum(p.inputs_done for p in mine),
                rank in live,
            )
        )
    return nodes


def stop_reason(attempt: Attempt) -> str:
    """How an attempt ended, in a few words: ``user error: FnError on input 150``."""
    error = attempt.error
    if attempt.ended == "interrupted" and error is not None:
        return error.message  # "interrupted (SIGTERM)"
    if attempt.ended == "failed" and error is not None:
        where = f" on input {error.input_index:,}" if error.input_index is not None and error.input_index >= 0 else ""
        return f"{error.kind} error: {error.type}{where}"
    return attempt.ended


def _inputs_in_progress(holders: list, leases: list[LeaseStatus]) -> list[InputInProgress]:
    """Each input a live holder's worker is on, once (a node lease and its claims repeat them)."""
    seen: dict[int, InputInProgress] = {}
    for (_name, holder), lease in zip(holders, leases):
        if not lease.live:
            continue
        for worker, position in enumerate(holder.current_inputs):
            names, states, calls = holder.current_names, holder.current_states, holder.current_calls
            known = worker < len(names) and bool(names[worker])
            if position < 0 or (position in seen and (not known or seen[position].named)):
                continue
            name = names[worker] if known else f"input {position:,}"
            state = states[worker] if worker < len(states) and states[worker] else None
            count = calls[worker] if worker < len(calls) else 0
            seen[position] = InputInProgress(position, name, worker, lease.place, state, known, count)
    return sorted(seen.values(), key=lambda entry: entry.input)


def _eta(done: int, left: int, history: list[Attempt], started_at: float) -> float | None:
    """Seconds left at the rate of the running attempt so far (it started after the last one
    the history holds ended, or when the run was created); None before it made progress."""
    if left <= 0:
        return 0.0
    since, before = started_at, 0
    if history:
        since, before = history[-1].finished_at, history[-1].inputs_done_after
    elapsed, made = time.time() - since, done - before
    if elapsed <= 0 or made <= 0:
        return None
    return round(left * elapsed / made, 1)

"""Running a share of a run's shards in this process: claim them, read where each resumes,
run them on the worker pool, release them. The local engine runs its node's share this way;
an executor's task (a Ray task) runs the share its driver gave it the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConcurrentRunError, LeaseLostError
from ..protocol.claims import ShardClaims
from ..protocol.layout import CLAIM_PREFIX, claim_name, claimed_shard, lease_key
from ..protocol.lease import HolderFields, HolderJudge, LeaseHolder, read_leases, stale_reason
from ..protocol.manifest import Manifest
from ..protocol.records import ShardProgress, load_progress
from ..storage import Storage
from .attempts import AttemptLog
from .identity import fn_identity
from .inputs import RunInputs, SharedInputs, shard_skips
from .messages import Committed, InFlight
from .options import OptimizeOptions
from .pool import WorkerPool
from .progress import Tracker
from .result import raise_for_outcome
from .resume_guard import refuse_positional_resume
from .tasks import ShardTask, WorkerConfig


@dataclass
class ShareOutcome:
    """What a share's run did: the tracker (counts of what this call committed) and the
    progress of the shards it claimed; ``busy`` holds the shards another live process had
    claimed (their holder's record), which this call left alone."""

    tracker: Tracker
    progress: dict[int, ShardProgress]
    busy: dict[int, LeaseHolder] = field(default_factory=dict)


@dataclass(frozen=True)
class CurrentInputs:
    """The inputs the workers are on now, for ``shardwright status``: their names, last
    ResumePoint states and calls in flight (None: the plain loop, which has neither)."""

    inputs: list[int]
    names: list[str]
    states: list[str] | None = None
    calls: list[int] | None = None


def shard_tasks(
    progress: dict[int, ShardProgress], inputs: RunInputs, manifest: Manifest, shared: SharedInputs | None = None
) -> list[ShardTask]:
    """The unfinished shards of ``progress`` as worker tasks (each with the inputs it still needs:
    a lazy slice of a source, a list of a plain sequence's values, or a reference to the list
    ``shared`` registered for forked workers)."""
    tasks = []
    for p in progress.values():
        if p.done:
            continue
        values, ids = inputs.shard(manifest, p.next_input, p.end, shared)
        tasks.append(
            ShardTask(
                p.shard,
                p.start,
                p.end,
                p.next_input,
                p.skip_outputs,
                p.next_seq,
                values,
                ids,
                shard_skips(manifest, ids, p.next_input, p.end),
                p.records[-1].epoch if p.records else None,
            )
        )
    return tasks


def run_share(
    storage: Storage,
    manifest: Manifest,
    fn: Callable,
    inputs: RunInputs,
    options: OptimizeOptions,
    node_rank: int,
    shards: list[int],
    *,
    claim_fields: HolderFields | None = None,
    judge: HolderJudge | None = None,
    require_all: bool = True,
    attempt: AttemptLog | None = None,
    on_message: Callable[[Any], None] | None = None,
    on_idle: Callable[[CurrentInputs], str | None] | None = None,
    standing: Callable[[], str | None] | None = None,
    verbose: bool = False,
    fresh: bool = False,
) -> ShareOutcome:
    """Run ``shards`` on ``options.num_workers`` processes: each shard is claimed just before
    a worker can take it (so a node holds a few claims, not one per shard of its share),
    resumed from the records read after claiming, and released once it is done.

    ``require_all``: a shard claimed by another live process is a ConcurrentRunError (checked
    before anything is written, and again when the shard is claimed); otherwise it is
    skipped and reported in ``busy``. ``on_message`` sees every worker message after the
    tracker; ``on_idle`` (with the input each worker is on, by name) is called ten times a second and
    stops the pool with its reason. ``standing`` says why this call lost the right to run
    the share (its node lease was taken over): a busy claim is then a LeaseLostError.

    ``fresh``: the caller created the run's manifest (a new run id) and is its only node, so
    no record of the run exists yet and none is read, neither for the first look nor at each
    claim. Another process can only join such a run by taking its node lease over, and then
    the committer's lease check stops this one before its first record write.
    """
    bounds = manifest.shard_bounds()
    mine = {s: bounds[s] for s in shards}
    if manifest.use_checkpoint and not fresh:
        # a look without claims: the bar's start, and which shards are left at all
        progress = load_progress(storage, mine, manifest.run_id, sealed=manifest.records_sealed)
    else:
        progress = {s: ShardProgress(s, *b) for s, b in mine.items()}
    if require_all:
        refuse_live_claims(storage, [s for s, p in progress.items() if not p.done], judge)
    identity = fn_identity(fn) if manifest.use_checkpoint and not fresh else None
    # the workers take up progress snapshots (engine.inflight; a stopped writer's pending tail,
    # engine.shard_writer): an input they resume from its ResumePoint, or finished in a tail, is safe
    snapshots = storage
    if identity is not None:  # before anything is written: a changed generator must not resume by position
        refuse_positional_resume(
            progress.values(),
            manifest,
            fn,
            inputs,
            storage.url,
            allow=options.allow_fn_config_change,
            now=identity,
            snapshots=snapshots,
        )
    claims = ShardClaims(storage, claim_fields, judge)
    busy: dict[int, LeaseHolder] = {}
    tracker = Tracker(progress, verbose)
    if attempt is not None:
        attempt.attach(manifest, tracker)
    waiting = [s for s, p in progress.items() if not p.done]

    def next_task() -> ShardTask | None:
        while waiting:
            shard = waiting.pop(0)
            holder = claims.claim(shard)
            if holder is not None:
                if require_all:
                    lost = standing() if standing is not None else None
                    if lost is not None:  # we were paused: the claim belongs to the run that took over
                        raise LeaseLostError(f"stopped: {lost}")
                    raise ConcurrentRunError(busy_message(storage, shard, holder))
                busy[shard] = holder
                continue
            if manifest.use_checkpoint and not fresh:  # read after claiming: nobody else writes it now
                read = load_progress(
                    storage, {shard: bounds[shard]}, manifest.run_id, repair=True, sealed=manifest.records_sealed
                )
                tracker.progress[shard] = read[shard]
                if identity is not None and not options.allow_fn_config_change:  # warned above
                    refuse_positional_resume(
                        read.values(), manifest, fn, inputs, storage.url, allow=False, now=identity, snapshots=snapshots
                    )
            if tracker.progress[shard].done:
                claims.release(shard)
                continue
            task = shard_tasks({shard: tracker.progress[shard]}, inputs, manifest, shared)[0]
            return replace(task, claim=claims.ticket(shard), fresh=fresh)
        return None

    shared: SharedInputs | None = None
    try:
        if waiting:
            cfg = WorkerConfig.for_run(storage.url, options, manifest, node_rank)
            pool = WorkerPool(fn, cfg, max(1, min(options.num_workers, len(waiting))), options.start_method)

            in_flight: dict[int, InFlight] = {}  # worker -> its inputs in flight (concurrency)

            def message(msg: Any) -> None:
                if isinstance(msg, InFlight):
                    in_flight[msg.wid] = msg
                    return
                tracker.on_message(msg)
                if isinstance(msg, Committed) and msg.record.done:
                    claims.release_later(msg.record.shard)  # nobody writes a done shard again
                if on_message is not None:
                    on_message(msg)

            named: dict[int, str] = {}  # input -> its name, for the inputs workers are on now

            def idle() -> str | None:
                tracker.on_idle()
                current, states, calls = pool.current_inputs(), None, None
                if in_flight:  # every input in flight, with its last ResumePoint state and calls in flight
                    current = [i for m in in_flight.values() for i in m.inputs]
                    states = [s for m in in_flight.values() for s in m.states]
                    calls = [c for m in in_flight.values() for c in (m.calls or (0,) * len(m.inputs))]
                if any(i >= 0 and i not in named for i in current):
                    kept = {i: named.get(i) or inputs.display_name(i) for i in current if i >= 0}
                    named.clear()
                    named.update(kept)
                shown = CurrentInputs(current, [named.get(i, "") for i in current], states, calls)
                claims.show_current_inputs(shown.inputs, shown.names, shown.states, shown.calls)  # status: by name
                return claims.lost() or (on_idle(shown) if on_idle is not None else None)

            tracker.open_bar()
            try:
                with inputs.shared_for(options.start_method) as shared:  # registered before the fork
                    outcome = pool.run(next_task, message, idle)
            finally:
                tracker.close_bar()
            raise_for_outcome(outcome, inputs, tracker)
        return ShareOutcome(tracker, progress, busy)
    finally:
        claims.release_all()


def busy_message(storage: Storage, shard: int, holder: LeaseHolder) -> str:
    return (
        f"another run is already writing shard {shard} of {storage.url} "
        f"({holder.describe(lease_key(claim_name(shard)), storage.url)}); two runs must not interleave. "
        "Wait for it to finish or stop it; a dead run's claim expires one lease TTL after its last heartbeat"
    )


def refuse_live_claims(storage: Storage, shards: list[int], judge: HolderJudge | None = None) -> None:
    """ConcurrentRunError before anything is written when another live process (another
    executor's task, a run with another node count) holds a claim on one of ``shards``."""
    wanted = set(shards)
    for name, holder in read_leases(storage, CLAIM_PREFIX):
        shard = claimed_shard(name)
        if shard in wanted and stale_reason(holder, judge) is None:
            raise ConcurrentRunError(busy_message(storage, shard, holder))

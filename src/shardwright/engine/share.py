"""Running a share of a run's shards in this process: claim them, read where each resumes,
run them on the worker pool, release them. The local engine runs its node's share this way;
an executor's task (a Ray task) runs the share its driver gave it the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConcurrentRunError
from ..protocol.claims import ShardClaims
from ..protocol.layout import claim_name, lease_key
from ..protocol.lease import HolderJudge, describe_holder
from ..protocol.manifest import Manifest
from ..protocol.records import ShardProgress, load_progress
from ..storage import Storage
from .attempts import AttemptLog
from .messages import Committed
from .options import OptimizeOptions
from .pool import WorkerPool
from .progress import Tracker
from .result import raise_for_outcome
from .worker import ShardTask, WorkerConfig


@dataclass
class ShareOutcome:
    """What a share's run did: the tracker (counts of what this call committed) and the
    progress of the shards it claimed; ``busy`` holds the shards another live process had
    claimed (their holder's record), which this call left alone."""

    tracker: Tracker
    progress: dict[int, ShardProgress]
    busy: dict[int, dict] = field(default_factory=dict)


def shard_tasks(progress: dict[int, ShardProgress], inputs: Sequence, manifest: Manifest) -> list[ShardTask]:
    """The unfinished shards of ``progress`` as worker tasks (each with the inputs it still needs)."""
    ids, skips = manifest.input_ids, manifest.input_skips
    tasks = []
    for p in progress.values():
        if p.done:
            continue
        values = [inputs[i] for i in ids[p.next_input : p.end]] if ids else list(inputs[p.next_input : p.end])
        tasks.append(
            ShardTask(
                p.shard,
                p.start,
                p.end,
                p.next_input,
                p.skip_outputs,
                p.next_seq,
                values,
                ids[p.next_input : p.end] if ids else None,
                skips[p.next_input : p.end] if skips else None,
                p.records[-1].epoch if p.records else None,
            )
        )
    return tasks


def run_share(
    storage: Storage,
    manifest: Manifest,
    fn: Callable,
    inputs: Sequence,
    options: OptimizeOptions,
    node_rank: int,
    shards: list[int],
    *,
    claim_extra: dict | None = None,
    judge: HolderJudge | None = None,
    require_all: bool = True,
    attempt: AttemptLog | None = None,
    on_message: Callable[[Any], None] | None = None,
    on_idle: Callable[[list[int]], str | None] | None = None,
    verbose: bool = False,
) -> ShareOutcome:
    """Claim ``shards``, resume each from its committed records, run the unfinished ones on
    ``options.num_workers`` processes and release each claim once its shard is done.

    ``require_all``: a shard claimed by another live process is a ConcurrentRunError (raised
    before anything is written); otherwise it is skipped and reported in ``busy``.
    ``on_message`` sees every worker message after the tracker; ``on_idle`` (with the input
    each worker is on) is called ten times a second and stops the pool with its reason.
    """
    claims = ShardClaims(storage, claim_extra, judge)
    busy: dict[int, dict] = {}
    try:
        for shard in shards:
            holder = claims.claim(shard)
            if holder is not None:
                busy[shard] = holder
                if require_all:
                    raise ConcurrentRunError(
                        f"another run is already writing shard {shard} of {storage.url} "
                        f"({describe_holder(holder, lease_key(claim_name(shard)), storage.url)}); two runs must not "
                        "interleave. Wait for it to finish or stop it; a dead run's claim expires one lease TTL "
                        "after its last heartbeat"
                    )
        bounds = manifest.shard_bounds()
        mine = {s: bounds[s] for s in shards if s in claims.held}
        if manifest.use_checkpoint:
            progress = load_progress(storage, mine, manifest.run_id, repair=True)
        else:
            progress = {s: ShardProgress(s, *b) for s, b in mine.items()}
        for shard, p in progress.items():
            if p.done:
                claims.release(shard)
        tracker = Tracker(progress, verbose)
        if attempt is not None:
            attempt.attach(manifest, tracker)
        tasks = [replace(t, claim=claims.ticket(t.shard)) for t in shard_tasks(progress, inputs, manifest)]
        if tasks:
            cfg = WorkerConfig.for_run(storage.url, options, manifest, node_rank)
            pool = WorkerPool(fn, cfg, max(1, min(options.num_workers, len(tasks))), options.start_method)

            def message(msg: Any) -> None:
                tracker.on_message(msg)
                if isinstance(msg, Committed) and msg.record.done:
                    claims.release_later(msg.record.shard)  # nobody writes a done shard again
                if on_message is not None:
                    on_message(msg)

            def idle() -> str | None:
                tracker.on_idle()
                current = pool.current_inputs()
                claims.set_extra("current_inputs", current)  # status: which input each worker is on
                return claims.lost() or (on_idle(current) if on_idle is not None else None)

            tracker.open_bar()
            try:
                outcome = pool.run(tasks, message, idle)
            finally:
                tracker.close_bar()
            raise_for_outcome(outcome, inputs, tracker)
        return ShareOutcome(tracker, progress, busy)
    finally:
        claims.release_all()

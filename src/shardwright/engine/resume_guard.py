"""A resumed generator input must continue the same stream (issue 33 BAD 6).

An interrupted input resumes in one of two ways:

- **by position**: fn is called on it again and its first outputs are dropped, because they
  are already kept (``skip_outputs`` of a record cut inside it, or outputs of it in the
  shard's progress snapshot past its last ResumePoint, or with no ResumePoint at all). Right
  only when fn yields the same stream as the run that kept them;
- **by state**: its kept outputs end exactly at its last ResumePoint, so fn is called as
  ``fn(x, resume=state)`` and every output it yields is new: nothing is dropped or repeated,
  whatever fn's configuration, since the stream from a ResumePoint is fn's own promise (a
  finished input in the snapshot is not called again at all).

So when fn's identity (name, code, configuration) differs from the recorded one, a resume by
position is refused, naming the input and the ways on, before anything is written; a resume by
state is allowed. Which way an input resumes is read from the snapshot the worker will take up
(protocol.progress: the one that extends the shard's chain tip), only when fn changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import RunMismatchError
from ..protocol.fn_identity import FnIdentity, describe_changes
from ..protocol.hints import start_over_hint
from ..protocol.manifest import Manifest
from ..protocol.progress import ProgressSnapshot, read_snapshot
from ..protocol.records import ShardProgress
from ..storage import Storage
from .identity import fn_identity
from .inputs import RunInputs

__all__ = ["Positional", "fn_difference", "positional", "positional_in_snapshot", "refuse_positional_resume"]

log = logging.getLogger("shardwright")


def fn_difference(now: FnIdentity, was: FnIdentity) -> str | None:
    """How fn differs from the recorded one, for a message; None when it is the same
    (or what differs could not be recorded)."""
    if now.name != was.name:
        return f"fn was {was.name}, now {now.name}"
    changes = now.config_changes(was)
    if changes:
        return f"fn's configuration changed: {describe_changes(changes)}"
    if now.code_changed(was):
        return "fn's code changed"
    return None


@dataclass(frozen=True)
class Positional:
    """An input that would resume by position: ``outputs`` of it kept, dropped from fn's stream."""

    shard: int
    position: int  # run-wide input position
    outputs: int


def positional_in_snapshot(progress: ShardProgress, snapshot: ProgressSnapshot | None) -> list[Positional]:
    """The inputs of one unfinished shard that resume by position, given the snapshot its
    worker takes up (None: the records alone)."""
    start, kept = progress.next_input, progress.skip_outputs
    if snapshot is None:  # fn is called on the record's next input from its start
        return [Positional(progress.shard, start, kept)] if kept > 0 else []
    found = []
    slots = {s.position: s for s in snapshot.slots}
    # the first input not wholly in the records and the snapshot's buffer (a pending tail may
    # end inside a generator's outputs, as a record may): fn is called on it from its start
    head, produced = max(tuple(snapshot.buffer.position), (start, kept))
    if head not in slots and produced > 0:
        found.append(Positional(progress.shard, head, produced))
    for slot in snapshot.slots:
        if slot.done:
            continue  # finished: its outputs are kept, fn is not called on it again
        produced = slot.base + len(slot.items)
        first = slot.point_outputs if slot.point is not None else 0  # where the resumed stream starts
        if produced > first:
            found.append(Positional(progress.shard, slot.position, produced - first))
    return found


def positional(
    progress: Iterable[ShardProgress],
    storage: Storage | None = None,
    run_id: str | None = None,
) -> list[Positional]:
    """The inputs of the unfinished shards that resume by position. With ``storage`` (the run
    takes up progress snapshots: fn runs in flight, with checkpoints), each shard's snapshot
    decides; without, its records alone."""
    found = []
    for p in progress:
        if p.done:
            continue
        snapshot = None
        if storage is not None and run_id is not None:
            tip = p.records[-1].epoch if p.records else None
            snapshot = read_snapshot(storage, run_id, p.shard, p.next_seq, tip, (p.next_input, p.skip_outputs))
        found.extend(positional_in_snapshot(p, snapshot))
    return found


def refuse_positional_resume(
    progress: Iterable[ShardProgress],
    manifest: Manifest,
    fn: Callable,
    inputs: RunInputs,
    url: str,
    *,
    allow: bool,
    now: FnIdentity | None = None,
    snapshots: Storage | None = None,
) -> None:
    """RunMismatchError naming the first input a changed fn would resume by position; with
    ``allow`` (``allow_fn_config_change=True``) a warning instead. ``snapshots``: the run's
    storage when its workers take up progress snapshots (then an input resumed from a
    ResumePoint is not positional: see the module)."""
    progress = [p for p in progress if not p.done]
    if not any(p.skip_outputs > 0 for p in progress) and snapshots is None:
        return
    difference = fn_difference(now if now is not None else fn_identity(fn), manifest.fn())
    if difference is None:
        return
    found = positional(progress, snapshots, manifest.run_id)
    if not found:
        return
    first = min(found, key=lambda p: p.position)
    name = _input_name(inputs, manifest, first.position)
    outputs = first.outputs
    more = f" (and {len(found) - 1:,} more input(s) like it)" if len(found) > 1 else ""
    if allow:
        log.warning(
            "%s since the interrupted run; input %s has %d output(s) of the old fn kept%s: the new fn's "
            "first %d output(s) of it are dropped by position (allow_fn_config_change=True)",
            difference,
            name,
            outputs,
            more,
            outputs,
        )
        return
    raise RunMismatchError(
        f"{difference} since the interrupted run in {url}, and input {name} has {outputs:,} output(s) of the "
        f"old fn kept{more}: resuming drops the new fn's first {outputs:,} output(s) of it by position, "
        "which loses or repeats samples if it yields differently. Rerun with the fn and configuration the run "
        "started with to resume safely, pass allow_fn_config_change=True to accept that, "
        f"{start_over_hint(manifest.mode, url)}"
    )


def _input_name(inputs: RunInputs, manifest: Manifest, position: int) -> str:
    """``3 (doc007.txt)``: the call's input at run-wide ``position``, by its name."""
    try:
        _values, ids = inputs.shard(manifest, position, position + 1)
        call_position = int(ids[0]) if ids is not None else position
        named = inputs.display_name(call_position)
    except Exception:
        return f"{position:,}"
    return f"{call_position:,} ({named})"

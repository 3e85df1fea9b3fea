"""A resumed generator input must continue the same stream (issue 33 BAD 6).

A shard's record says how many outputs of its next input are committed (``skip_outputs``:
a generator fn stopped midway). The resume calls fn on that input again and drops its first
``skip_outputs`` outputs: right only when fn yields the same stream as the run that committed
them. So a positional resume is allowed when fn's identity (name, code, configuration) is the
recorded one, or when the record carries a ResumePoint state (fn resumes from its own state:
:func:`resumes_from_state`, the hook for ResumePoints); otherwise it is refused, naming the
input and the ways on, before anything is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..errors import RunMismatchError
from ..protocol.fn_identity import FnIdentity, describe_changes
from ..protocol.hints import start_over_hint
from ..protocol.manifest import Manifest
from ..protocol.records import ShardProgress
from .identity import fn_identity
from .inputs import RunInputs

__all__ = ["fn_difference", "refuse_positional_resume", "resumes_from_state"]

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


def resumes_from_state(progress: ShardProgress) -> bool:
    """The shard's next input resumes from a recorded ResumePoint state (``fn(x, resume=state)``),
    not by position alone. The hook for ResumePoints: a record carries the state as
    ``resume_state`` (None or absent: no ResumePoint recorded)."""
    record = progress.records[-1] if progress.records else None
    return getattr(record, "resume_state", None) is not None


def positional(progress: Iterable[ShardProgress]) -> list[ShardProgress]:
    """The unfinished shards whose next input resumes by skipping committed outputs."""
    return [p for p in progress if not p.done and p.skip_outputs > 0 and not resumes_from_state(p)]


def refuse_positional_resume(
    progress: Iterable[ShardProgress],
    manifest: Manifest,
    fn: Callable,
    inputs: RunInputs,
    url: str,
    *,
    allow: bool,
    now: FnIdentity | None = None,
) -> None:
    """RunMismatchError naming the first input a changed fn would resume by position; with
    ``allow`` (``allow_fn_config_change=True``) a warning instead."""
    shards = positional(progress)
    if not shards:
        return
    difference = fn_difference(now if now is not None else fn_identity(fn), manifest.fn())
    if difference is None:
        return
    first = min(shards, key=lambda p: p.next_input)
    name = _input_name(inputs, manifest, first.next_input)
    outputs = first.skip_outputs
    more = f" (and {len(shards) - 1:,} more input(s) like it)" if len(shards) > 1 else ""
    if allow:
        log.warning(
            "%s since the interrupted run; input %s has %d output(s) of the old fn committed%s: the new fn's "
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
        f"old fn committed{more}: resuming drops the new fn's first {outputs:,} output(s) of it by position, "
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

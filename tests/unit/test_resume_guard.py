"""Issue 33 BAD 6: a generator input partially kept by an interrupted run resumes by position
only when fn is provably the same stream (its recorded identity); an input whose kept outputs
end exactly at its last ResumePoint resumes by state (``fn(x, resume=state)``) and is safe
whatever fn; otherwise the resume is refused naming the input and the ways on."""

from __future__ import annotations

import functools
import logging
import uuid

import pytest

from shardwright.engine.identity import fn_identity
from shardwright.engine.inputs import run_inputs
from shardwright.engine.resume_guard import refuse_positional_resume
from shardwright.errors import RunMismatchError
from shardwright.protocol.layout import progress_key
from shardwright.protocol.manifest import Manifest
from shardwright.protocol.progress import BufferState, ProgressSnapshot, SlotState, encode_snapshot
from shardwright.protocol.records import CommitRecord, ShardProgress
from shardwright.storage import open_storage
from support.manifests import recorded_manifest

DOCS = [f"/data/doc{i:03d}.txt" for i in range(10)]


def pages(doc, *, per_page):
    for page in range(4):
        for k in range(per_page):
            yield {"doc": doc, "page": page, "k": k}


def manifest_for(fn) -> Manifest:
    identity = fn_identity(fn)
    return recorded_manifest(
        DOCS, chunk_size=2, fn_name=identity.name, fn_code=identity.code, fn_identity=identity.to_json()
    )


def progress(skip_outputs: int) -> list[ShardProgress]:
    done = ShardProgress(0, 0, 5, [CommitRecord(0, 0, None, 0, 0, 5, 0, True, (), "run")])
    partial = ShardProgress(1, 5, 10, [CommitRecord(1, 0, None, 0, 5, 7, skip_outputs, False, (), "run")])
    return [done, partial]


def test_a_changed_generator_config_is_refused_naming_the_input_and_the_ways_on():
    was = functools.partial(pages, per_page=3)
    now = functools.partial(pages, per_page=2)
    with pytest.raises(RunMismatchError) as info:
        refuse_positional_resume(progress(5), manifest_for(was), now, run_inputs(DOCS), "/out", allow=False)
    text = str(info.value)
    assert "input 7 (/data/doc007.txt)" in text and "5 output(s)" in text
    assert "partial argument per_page" in text
    assert "allow_fn_config_change=True" in text and "shardwright clean /out" in text


def test_the_same_fn_resumes_by_position():
    fn = functools.partial(pages, per_page=3)
    refuse_positional_resume(
        progress(5), manifest_for(fn), functools.partial(pages, per_page=3), run_inputs(DOCS), "/o", allow=False
    )


def test_no_partially_committed_input_means_nothing_to_refuse():
    was, now = functools.partial(pages, per_page=3), functools.partial(pages, per_page=2)
    refuse_positional_resume(progress(0), manifest_for(was), now, run_inputs(DOCS), "/o", allow=False)


def test_allow_fn_config_change_turns_the_refusal_into_a_warning(caplog):
    was, now = functools.partial(pages, per_page=3), functools.partial(pages, per_page=2)
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        refuse_positional_resume(progress(5), manifest_for(was), now, run_inputs(DOCS), "/o", allow=True)
    assert "dropped by position" in caplog.text


def test_a_changed_code_is_refused_too():
    def v1(doc):
        yield doc

    def v2(doc):
        yield doc
        yield doc

    v2.__qualname__ = v1.__qualname__
    with pytest.raises(RunMismatchError, match="fn's code changed"):
        refuse_positional_resume(progress(1), manifest_for(v1), v2, run_inputs(DOCS), "/o", allow=False)


# --- with progress snapshots (the workers run fn in flight and take up the shard's snapshot) --------
# shard 1 covers inputs 5..9; its record: inputs 5 and 6 done, input 7 has ``kept`` outputs committed


def snapshot_storage(kept: int, *slots: SlotState, buffer_at: tuple[int, int] | None = None):
    storage = open_storage(f"memory://resume-guard-{uuid.uuid4().hex}")
    record = CommitRecord(1, 0, None, 0, 5, 7, kept, False, (), "run")
    snapshot = ProgressSnapshot(
        run_id="run",
        shard=1,
        seq=1,
        tip_epoch=0,
        committed=(7, kept),
        epoch=1,
        buffer=BufferState(7, buffer_at or (7, kept), [], []),
        slots=list(slots),
    )
    storage.write_bytes(progress_key(1, 1), encode_snapshot(snapshot))
    return storage, [ShardProgress(1, 5, 10, [record])]


def slot(position, base, items, point=None, point_outputs=0, done=False) -> SlotState:
    return SlotState(position, base, [b"x"] * items, point, point_outputs, done)


def changed_resume(storage, shards) -> None:
    was, now = functools.partial(pages, per_page=3), functools.partial(pages, per_page=2)
    refuse_positional_resume(shards, manifest_for(was), now, run_inputs(DOCS), "/o", allow=False, snapshots=storage)


@pytest.mark.parametrize(
    "kept, slots",
    [
        (5, [slot(7, 5, 1, '{"page": 2}', 6)]),  # outputs kept end at its ResumePoint: fn(x, resume=state)
        (6, [slot(7, 6, 0, '{"page": 2}', 6)]),  # the ResumePoint right at the committed outputs
        (0, [slot(7, 0, 3, '{"page": 1}', 3), slot(8, 0, 2, done=True), slot(9, 0, 0)]),  # done / not begun
        (5, [slot(7, 5, 7, done=True)]),  # finished in the snapshot: fn is not called on it again
    ],
)
def test_a_changed_fn_resumes_where_every_input_resumes_from_its_resume_point(kept, slots):
    changed_resume(*snapshot_storage(kept, *slots))


def test_a_finished_input_waiting_in_the_writers_buffer_is_not_called_again():
    changed_resume(*snapshot_storage(5, buffer_at=(8, 0)))


@pytest.mark.parametrize(
    "kept, slots, dropped",
    [
        (5, [], 5),  # nothing of it in the snapshot: from its start, 5 committed outputs dropped
        (5, [slot(7, 5, 3, '{"page": 2}', 6)], 2),  # 2 outputs past its ResumePoint: dropped from the new stream
        (0, [slot(7, 0, 0), slot(8, 0, 4)], 4),  # no ResumePoint: from its start, 4 outputs dropped
    ],
)
def test_a_changed_fn_is_refused_where_an_input_would_resume_by_position(kept, slots, dropped):
    storage, shards = snapshot_storage(kept, *slots)
    with pytest.raises(RunMismatchError) as info:
        changed_resume(storage, shards)
    assert f"has {dropped} output(s) of the old fn kept" in str(info.value)


def test_a_snapshot_that_does_not_extend_the_records_is_no_resume_point():
    storage, _ = snapshot_storage(5, slot(7, 5, 1, '{"page": 2}', 6))
    newer = CommitRecord(1, 1, None, 0, 5, 7, 6, False, (), "run")  # a record written after the snapshot
    with pytest.raises(RunMismatchError, match="input 7 "):
        changed_resume(
            storage, [ShardProgress(1, 5, 10, [CommitRecord(1, 0, None, 0, 5, 7, 5, False, (), "run"), newer])]
        )


def test_a_pending_tail_that_ends_inside_a_generator_resumes_that_input_by_position():
    """A stop keeps the chunk in progress as a pending tail (engine.shard_writer); it may end
    inside input 8's outputs, which a resume then drops from a new fn's stream by position."""
    storage, shards = snapshot_storage(5, buffer_at=(8, 2))
    with pytest.raises(RunMismatchError) as info:
        changed_resume(storage, shards)
    assert "input 8 " in str(info.value) and "has 2 output(s) of the old fn kept" in str(info.value)

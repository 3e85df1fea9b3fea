"""Issue 33 BAD 6: a generator input partially committed by an interrupted run resumes by
position only when fn is provably the same stream (its recorded identity, or a ResumePoint
state); otherwise the resume is refused naming the input and the ways on."""

from __future__ import annotations

import dataclasses
import functools
import logging

import pytest

from shardwright.engine.identity import fn_identity
from shardwright.engine.inputs import run_inputs
from shardwright.engine.resume_guard import refuse_positional_resume
from shardwright.errors import RunMismatchError
from shardwright.protocol.manifest import Manifest
from shardwright.protocol.records import CommitRecord, ShardProgress
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


def test_a_record_with_a_resume_point_state_resumes_from_it():
    @dataclasses.dataclass(frozen=True)
    class WithState(CommitRecord):  # what io-core's records carry: the input's last ResumePoint
        resume_state: str | None = None

    record = WithState(1, 0, None, 0, 5, 7, 5, False, (), "run", resume_state='{"page": 2}')
    shards = [ShardProgress(1, 5, 10, [record])]
    was, now = functools.partial(pages, per_page=3), functools.partial(pages, per_page=2)
    refuse_positional_resume(shards, manifest_for(was), now, run_inputs(DOCS), "/o", allow=False)

"""fn identity covers its configuration (closure cells, instance state, partial arguments,
globals, defaults) by value; a changed configuration is refused on resume and is never a silent
no-op over a finished dataset; repeated appends are refused (issue 14 BAD 7 and its POOR lines)."""

from __future__ import annotations

import functools
import json
import logging

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize
from shardwright.errors import DatasetExistsError, FnError, RunMismatchError
from shardwright.protocol.layout import MANIFEST_KEY

RUN = {"num_workers": 1, "verbose": False, "chunk_size": 4, "num_shards": 2}


def make(factor):
    def scaled(i):
        return {"v": i * factor}

    return scaled


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def apply(self, i):
        return {"v": i * self.factor}

    def __call__(self, i):
        return {"v": i * self.factor}


THRESHOLD = 10


def uses_global(i):
    return {"v": i * THRESHOLD}


def values(out) -> list[int]:
    return [int(x["v"]) for x in StreamingDataset(out)]


@pytest.mark.parametrize(
    ("first", "second", "named"),
    [
        (make(2), make(3), "closure factor"),
        (Scaler(2).apply, Scaler(3).apply, "self.factor"),
        (Scaler(2), Scaler(3), "self.factor"),
    ],
)
def test_changed_configuration_over_a_finished_dataset_is_an_error_not_a_noop(tmp_path, first, second, named):
    out = tmp_path / "ds"
    optimize(first, list(range(8)), str(out), **RUN)
    with pytest.raises(DatasetExistsError, match=rf"its configuration changed since: {named}.*mode='overwrite'"):
        optimize(second, list(range(8)), str(out), **RUN)
    optimize(first, list(range(8)), str(out), **RUN)  # the same configuration: a no-op
    assert values(out) == [i * 2 for i in range(8)]


def test_changed_global_is_detected(tmp_path, monkeypatch):
    out = tmp_path / "ds"
    optimize(uses_global, list(range(8)), str(out), **RUN)
    monkeypatch.setattr(__import__(__name__), "THRESHOLD", 11)
    with pytest.raises(DatasetExistsError, match="global THRESHOLD"):
        optimize(uses_global, list(range(8)), str(out), **RUN)


def work(i, scale, fail_at):
    if i == fail_at:
        raise ValueError(f"input {i} fails")
    return {"v": i * scale}


def _interrupted(out):
    with pytest.raises(FnError):
        optimize(functools.partial(work, scale=1, fail_at=6), list(range(8)), str(out), **RUN)


def test_resume_with_a_changed_configuration_is_refused_naming_it_unless_accepted(tmp_path):
    out = tmp_path / "ds"
    _interrupted(out)
    fixed = functools.partial(work, scale=1000, fail_at=-1)
    with pytest.raises(
        RunMismatchError,
        match=r"configuration changed .*partial argument fail_at, partial argument scale.*allow_fn_config_change=True",
    ):
        optimize(fixed, list(range(8)), str(out), **RUN)
    optimize(fixed, list(range(8)), str(out), allow_fn_config_change=True, **RUN)
    assert len(values(out)) == 8


def test_resume_with_changed_code_only_is_allowed(tmp_path, caplog):
    out = tmp_path / "ds"
    _interrupted(out)
    # Same configuration (scale=1), fixed code: a new function of the same arguments.
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        optimize(functools.partial(work_fixed, scale=1, fail_at=6), list(range(8)), str(out), **RUN)
    assert values(out) == list(range(8))
    assert "fn changed since the interrupted run" in caplog.text


def work_fixed(i, scale, fail_at):
    return {"v": i * scale}


def test_manifest_without_fn_identity_still_resumes(tmp_path):
    out = tmp_path / "ds"
    _interrupted(out)
    path = out / MANIFEST_KEY
    manifest = json.loads(path.read_text())
    del manifest["fn_identity"]  # written by an earlier shardwright
    path.write_text(json.dumps(manifest))
    optimize(functools.partial(work, scale=1000, fail_at=-1), list(range(8)), str(out), **RUN)
    assert len(values(out)) == 8


def test_state_that_cannot_be_hashed_is_named_in_a_warning(tmp_path, caplog):
    big = np.zeros(2_000_000)

    def uses_big(i):
        return {"v": i + int(big[0])}

    with caplog.at_level(logging.WARNING, logger="shardwright"):
        optimize(uses_big, list(range(4)), str(tmp_path / "ds"), **RUN)
    assert (
        "cannot be compared by value" in caplog.text and "closure big (ndarray: a 16,000,000-byte array)" in caplog.text
    )


def plain(i):
    return {"v": i}


def test_repeated_append_is_refused_unless_asked(tmp_path):
    out = tmp_path / "ds"
    optimize(plain, list(range(10)), str(out), **RUN)
    optimize(plain, list(range(10, 20)), str(out), mode="append", **RUN)
    optimize(plain, list(range(20, 30)), str(out), mode="append", **RUN)
    with pytest.raises(DatasetExistsError, match="already holds the outputs of these same 10 inputs"):
        optimize(plain, list(range(10, 20)), str(out), mode="append", **RUN)  # an earlier append, not the last
    with pytest.raises(DatasetExistsError, match="allow_repeated_append=True"):
        optimize(make(1), list(range(10)), str(out), mode="append", **RUN)  # the original run's inputs
    optimize(plain, list(range(10, 20)), str(out), mode="append", allow_repeated_append=True, **RUN)
    assert len(values(out)) == 40


def test_rerun_with_a_superset_says_how_to_add_only_the_new_inputs(tmp_path):
    out = tmp_path / "ds"
    optimize(plain, list(range(2048)), str(out), num_workers=1, verbose=False)
    with pytest.raises(
        DatasetExistsError,
        match=r"first 2,048 of these 3,000 inputs; to add only the 952 new ones pass mode='incremental' \(or call with inputs\[2048:\] and mode='append'",
    ):
        optimize(plain, list(range(3000)), str(out), num_workers=1, verbose=False)
    with pytest.raises(DatasetExistsError) as info:
        optimize(plain, list(range(5)), str(out), num_workers=1, verbose=False)
    assert "inputs already in it would be there twice" in str(info.value)
    optimize(plain, list(range(3000)), str(out), num_workers=1, verbose=False, mode="incremental")  # the advice works
    assert len(values(out)) == 3000

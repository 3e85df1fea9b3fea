"""optimize(): what a user sees. Round trips, resume, modes, and every user-caused failure with
the message that must come with it. Everything runs against real worker processes and a real
local directory; the whole file stays fast (small inputs, few shards).

Crash loops and signals live in test_crash.py; this file does not repeat them.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shardwright import (
    ConcurrentRunError,
    CorruptStateError,
    DatasetExistsError,
    FnError,
    IncompleteDatasetError,
    InputsError,
    OptimizeResult,
    OutputDirError,
    RunMismatchError,
    SampleFormatError,
    ShardwrightError,
    StorageError,
    optimize,
)
from shardwright.protocol.layout import MANIFEST_KEY, SHARDS_PREFIX, lease_key
from shardwright.protocol.records import read_record_file, read_record_log, record_listing
from shardwright.storage import LocalStorage
from support.crash_child import expected as child_expected
from support.crash_child import plain as child_plain
from support.helpers import child_env, committed_records, group_pids, kill_group, start_child, wait_for
from support.sealed_records import record_rounds, replace_round

SRC = str(Path(__file__).resolve().parents[2] / "src")


# --- functions given to optimize (module level: they also work with start_method="spawn") -----


def square(i):
    return {"i": i, "sq": i * i, "name": f"item-{i}"}


def square_fails_at_97(i):
    if i == 97:
        raise ValueError("planned failure at 97")
    return square(i)


def square_fails_at_60(i):
    if i == 60:
        raise ValueError("planned failure at 60")
    return square(i)


def drop_every_third(i):
    return None if i % 3 == 0 else {"i": i}


class PickledBy:
    """An input that notes which thread of this process pickled it."""

    threads: list[str] = []

    def __init__(self, i: int):
        self.i = i

    def __reduce__(self):
        PickledBy.threads.append(threading.current_thread().name)
        return (PickledBy, (self.i,))


def value_of(x: PickledBy) -> dict:
    return {"i": x.i}


def fan_out(i):
    """0, 1, 2 or 3 outputs per input."""
    for j in range(i % 4):
        yield {"i": i, "j": j}


def fan_out_fails_at_97(i):
    if i == 97:
        raise ValueError("planned failure at 97")
    yield from fan_out(i)


def eight_outputs(i):
    for j in range(8):
        yield {"i": i, "j": j}


def eight_outputs_fails_inside_input_3(i):
    """Input 3 fails after 5 of its 8 outputs: a chunk of it may already be committed."""
    for j in range(8):
        if i == 3 and j == 5:
            raise RuntimeError("failed in the middle of input 3")
        yield {"i": i, "j": j}


def version_1_fails_at_70(i):
    if i == 70:
        raise ValueError("bug in version 1")
    return {"i": i, "v": 1}


def version_2(i):
    return {"i": i, "v": 2}


def other_key(i):
    return {"j": i}


def describe_input(x):
    """Inputs of several types; the sample says what came in."""
    return {"repr": repr(x), "type": type(x).__name__}


def extra_key_at_7(i):
    return {"i": i, "x": 1} if i == 7 else {"i": i}


def just_i(i):
    return {"i": i}


def str_leaf_at_4(i):
    return {"i": "four" if i == 4 else i}


def int_overflow_at_2(i):
    return {"i": 2**63 if i == 2 else i}


def negative_overflow_at_2(i):
    return {"i": -(2**63) - 1 if i == 2 else i}


def int64_bounds(i):
    return {"i": [2**63 - 1, -(2**63), 0][i % 3]}


def blob(i):
    return {"i": i, "b": bytes([i % 256]) * (5000 if i == 3 else 10)}


def raises_key_error_at_13(i):
    if i == 13:
        raise KeyError("thirteen")
    return {"i": i}


def big_blob(i):
    return {"i": i, "b": bytes([i % 256]) * 100_000}


def slow_square(i):
    time.sleep(0.003)
    return {"i": i}


class _Flaky:
    """Fails the first time it sees ``input`` (at output ``at``), then works: a transient error.

    The "seen" flag is a file, so it is shared by forked workers and survives the retry."""

    def __init__(self, flag: str, input: int, at: int, outputs: int):
        self.flag, self.input, self.at, self.outputs = flag, input, at, outputs

    def __call__(self, i):
        for j in range(self.outputs):
            if i == self.input and j == self.at and not os.path.exists(self.flag):
                Path(self.flag).touch()
                raise RuntimeError("transient failure")
            yield {"i": i, "j": j}


# --- helpers ------------------------------------------------------------------------------


def items(output_dir) -> list:
    from shardwright import StreamingDataset

    ds = StreamingDataset(output_dir)
    out = list(ds)
    del ds
    return out


def ids(output_dir) -> list[int]:
    return [item["i"] for item in items(output_dir)]


def pairs(output_dir) -> list[tuple[int, int]]:
    return [(item["i"], item["j"]) for item in items(output_dir)]


def record_files(output_dir) -> list[Path]:
    """Record files and record logs (protocol.record_log: a worker's on local disk)."""
    return sorted((Path(output_dir) / SHARDS_PREFIX).glob("*.json*"))


def rounds(output_dir) -> list[tuple[str, str, int]]:
    """The commit rounds of an output's records (a record file, or a line of a record log)."""
    return record_rounds(LocalStorage(output_dir))


def committed_items(output_dir) -> int:
    storage = LocalStorage(output_dir)
    by_shard, logs = record_listing(storage)  # one listing: record files and record logs
    keys = [key for keys in by_shard.values() for key in keys]
    in_files = sum(r.chunk.chunk_size for key in keys for r in read_record_file(storage, key) or () if r.chunk)
    in_logs = [r for key in logs for _, records in read_record_log(storage, key) for r in records]
    return in_files + sum(r.chunk.chunk_size for r in in_logs if r.chunk)


@pytest.fixture(autouse=True)
def one_record_file_per_chunk(monkeypatch):
    """The damaged-state tests edit the Nth record file: one commit round per chunk makes
    the files' contents independent of how fast the committer runs."""
    monkeypatch.setenv("SHARDWRIGHT_COMMIT_ROUND", "1")


def chunk_files(output_dir) -> list[Path]:
    return sorted(Path(output_dir).glob("chunk-*"))


def interrupt(fn, inputs, output_dir, **kwargs) -> FnError:
    """Run optimize with a fn that raises: returns the FnError, leaving an interrupted run."""
    kwargs.setdefault("verbose", False)
    with pytest.raises(FnError) as info:
        optimize(fn, inputs, output_dir, **kwargs)
    assert not (Path(output_dir) / "index.json").exists() or kwargs.get("mode") == "append"
    return info.value


def assert_clean_finish(output_dir) -> None:
    root = Path(output_dir)
    assert (root / "index.json").exists()
    assert not (root / MANIFEST_KEY).exists()
    assert not record_files(root)


# ============================================================================================
# Round trips
# ============================================================================================


@pytest.mark.parametrize(
    "num_workers,settings",
    [
        (1, {"chunk_size": 7}),
        (2, {"chunk_size": 1}),
        (3, {"chunk_size": 10, "num_shards": 5}),
        (2, {"chunk_bytes": "64MB"}),
        (3, {"chunk_bytes": 200}),
        (2, {"chunk_bytes": "1KB", "num_shards": 3}),
        (3, {"chunk_size": 6, "compression": "zstd"}),
        (2, {"chunk_bytes": 300, "compression": "zstd", "num_shards": 7}),
        (2, {}),  # defaults: chunk_bytes 64MB, 16 shards
    ],
    ids=lambda v: str(v).replace(" ", ""),
)
def test_plain_fn_round_trip_in_input_order(tmp_path, num_workers, settings):
    n = 150
    result = optimize(square, list(range(n)), tmp_path / "out", num_workers=num_workers, verbose=False, **settings)
    got = items(tmp_path / "out")
    assert got == [square(i) for i in range(n)]
    assert result.items == n and result.published and not result.resumed
    assert_clean_finish(tmp_path / "out")
    if "chunk_size" in settings:
        from shardwright import StreamingDataset

        assert all(c.chunk_size <= settings["chunk_size"] for c in StreamingDataset(tmp_path / "out").chunks)


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_fn_returning_none_drops_those_inputs(tmp_path, num_workers):
    n = 120
    result = optimize(
        drop_every_third,
        list(range(n)),
        tmp_path / "out",
        chunk_size=4,
        num_workers=num_workers,
        num_shards=6,
        verbose=False,
    )
    assert ids(tmp_path / "out") == [i for i in range(n) if i % 3]
    assert result.items == len([i for i in range(n) if i % 3])


def test_fn_returning_none_for_every_input_gives_an_empty_dataset(tmp_path):
    result = optimize(lambda i: None, list(range(20)), tmp_path / "out", num_workers=2, num_shards=4, verbose=False)
    assert result.items == 0 and result.chunks == 0 and result.published
    assert items(tmp_path / "out") == []


@pytest.mark.parametrize(
    "num_workers,settings",
    [
        (1, {"chunk_size": 3}),
        (2, {"chunk_size": 5}),
        (3, {"chunk_bytes": 100}),
        (3, {"chunk_size": 4, "compression": "zstd"}),
    ],
)
def test_generator_fn_with_zero_to_three_outputs(tmp_path, num_workers, settings):
    n = 150
    result = optimize(
        fan_out, list(range(n)), tmp_path / "out", num_workers=num_workers, num_shards=9, verbose=False, **settings
    )
    want = [(i, j) for i in range(n) for j in range(i % 4)]
    assert pairs(tmp_path / "out") == want
    assert result.items == len(want)


def test_inputs_of_many_types(tmp_path):
    inputs = [
        3,
        "text",
        Path("/data/file.jpg"),
        (1, "a"),
        {"k": [1, 2]},
        -7,
        ("nested", (2, 3)),
        "",
        Path("relative/x.png"),
        {"a": 1, "b": {"c": None}},
        2.5,
        None,
        b"raw",
    ]
    optimize(describe_input, inputs, tmp_path / "out", num_workers=3, chunk_size=2, verbose=False)
    got = items(tmp_path / "out")
    assert [g["repr"] for g in got] == [repr(x) for x in inputs]
    assert [g["type"] for g in got] == [type(x).__name__ for x in inputs]


def test_result_fields(tmp_path):
    out = tmp_path / "out"
    started = time.monotonic()
    result = optimize(square, list(range(90)), out, chunk_size=10, num_workers=2, num_shards=3, verbose=False)
    elapsed = time.monotonic() - started
    assert isinstance(result, OptimizeResult)
    assert result.items == 90
    assert result.chunks == len(chunk_files(out)) == 9
    assert result.bytes == sum(p.stat().st_size for p in chunk_files(out)) > 0
    assert 0 < result.seconds <= elapsed + 0.01
    assert result.resumed is False and result.published is True
    assert result.inputs == 90 and result.failed == 0
    assert "90 items" in str(result) and str(out) in str(result)


def test_result_bytes_are_the_stored_compressed_size(tmp_path):
    plain = optimize(square, list(range(200)), tmp_path / "plain", chunk_size=50, num_shards=2, verbose=False)
    packed = optimize(
        square, list(range(200)), tmp_path / "zstd", chunk_size=50, num_shards=2, compression="zstd", verbose=False
    )
    assert packed.bytes == sum(p.stat().st_size for p in chunk_files(tmp_path / "zstd"))
    assert packed.bytes < plain.bytes
    assert items(tmp_path / "zstd") == items(tmp_path / "plain")


def test_spawn_start_method_with_an_importable_fn(tmp_path):
    optimize(
        square,
        list(range(40)),
        tmp_path / "out",
        chunk_size=7,
        num_workers=2,
        num_shards=4,
        start_method="spawn",
        verbose=False,
    )
    assert ids(tmp_path / "out") == list(range(40))


@pytest.mark.parametrize("method, through_the_queue", [("fork", False), ("spawn", True)])
def test_forked_workers_get_a_lists_values_by_reference(tmp_path, method, through_the_queue):
    """Issue 19: a forked worker has the caller's list already; its tasks name positions, and
    no value is pickled into the task queue (whose feeder thread would do it). Spawned
    workers have no copy: their tasks carry the values."""
    PickledBy.threads.clear()
    inputs = [PickledBy(i) for i in range(50)]
    optimize(
        value_of,
        inputs,
        tmp_path / "out",
        chunk_size=7,
        num_workers=2,
        num_shards=4,
        start_method=method,
        verbose=False,
    )
    assert ids(tmp_path / "out") == list(range(50))
    fed = [name for name in PickledBy.threads if name.startswith("QueueFeederThread")]
    assert len(fed) == (50 if through_the_queue else 0), sorted(set(PickledBy.threads))


def test_litdata_reads_the_output_in_order(tmp_path):
    litdata = pytest.importorskip("litdata")
    optimize(fan_out, list(range(60)), tmp_path / "out", chunk_size=4, num_workers=2, num_shards=5, verbose=False)
    ds = litdata.StreamingDataset(str(tmp_path / "out"))
    assert [(int(x["i"]), int(x["j"])) for x in (ds[k] for k in range(len(ds)))] == [
        (i, j) for i in range(60) for j in range(i % 4)
    ]


# ============================================================================================
# Resume
# ============================================================================================


@pytest.mark.parametrize(
    "bad,good,want,first_workers,second_workers",
    [
        (square_fails_at_97, square, lambda n: [square(i) for i in range(n)], 2, 3),
        (square_fails_at_97, square, lambda n: [square(i) for i in range(n)], 3, 1),
        (fan_out_fails_at_97, fan_out, lambda n: [{"i": i, "j": j} for i in range(n) for j in range(i % 4)], 1, 3),
        (fan_out_fails_at_97, fan_out, lambda n: [{"i": i, "j": j} for i in range(n) for j in range(i % 4)], 3, 2),
    ],
    ids=["plain-2to3", "plain-3to1", "generator-1to3", "generator-3to2"],
)
def test_resume_after_fn_error_with_another_num_workers(tmp_path, bad, good, want, first_workers, second_workers):
    n, out = 200, tmp_path / "out"
    error = interrupt(bad, list(range(n)), out, chunk_size=3, num_workers=first_workers, num_shards=8)
    assert error.input_index == 97
    before = committed_items(out)
    assert before > 0, "the failed run committed nothing: the test proves nothing"
    # the fixed fn yields the same first outputs: accepted on purpose (a changed generator is refused by
    # default, since a positional resume could drop or repeat samples: issue 33 BAD 6)
    accept = {"allow_fn_config_change": True}
    result = optimize(
        good, list(range(n)), out, chunk_size=3, num_workers=second_workers, num_shards=8, verbose=False, **accept
    )
    assert result.resumed is True
    assert items(out) == want(n)
    assert result.items == len(want(n)) - before, "committed samples were produced again (or lost)"
    assert_clean_finish(out)


def test_default_shards_come_from_the_inputs_not_the_workers(tmp_path):
    for workers in (1, 3):
        out = tmp_path / f"out{workers}"
        optimize(square, list(range(1000)), out, num_workers=workers, verbose=False)  # chunk_bytes 64MB
        assert len(chunk_files(out)) == 16  # one chunk per shard, whatever num_workers
        assert items(out) == [square(i) for i in range(1000)]


def test_a_resume_without_num_shards_keeps_the_recorded_count(tmp_path):
    """A run created with a count the default does not give (64, the default before issue
    19; another num_workers; here 40) resumes when the call does not pass num_shards."""
    n, out = 200, tmp_path / "out"
    interrupt(square_fails_at_97, list(range(n)), out, num_workers=2, num_shards=40)
    assert json.loads((out / MANIFEST_KEY).read_text())["num_shards"] == 40
    result = optimize(square, list(range(n)), out, num_workers=3, verbose=False)
    assert result.resumed is True
    # the recorded 40 shards (one chunk each), not the default 16, plus at most one partial chunk
    # per worker of the failed run (the failing worker's, and the other's if the stop reached it
    # mid-shard: which depends on timing)
    assert 40 <= len(chunk_files(out)) <= 42
    assert items(out) == [square(i) for i in range(n)]
    assert_clean_finish(out)


def test_resume_after_fn_error_in_the_middle_of_a_generator(tmp_path):
    """A chunk can end inside one input's outputs: the resume skips exactly those outputs."""
    out = tmp_path / "out"
    error = interrupt(
        eight_outputs_fails_inside_input_3, list(range(6)), out, chunk_size=3, num_workers=1, num_shards=1
    )
    assert error.input_index == 3
    with pytest.raises(RunMismatchError, match=r"input 3 \(3\) has 3 output\(s\) of the old fn kept"):
        optimize(eight_outputs, list(range(6)), out, chunk_size=3, num_workers=2, num_shards=1, verbose=False)
    accept = {"allow_fn_config_change": True}  # the fixed fn yields the same first outputs
    optimize(eight_outputs, list(range(6)), out, chunk_size=3, num_workers=2, num_shards=1, verbose=False, **accept)
    assert pairs(out) == [(i, j) for i in range(6) for j in range(8)]


def test_changed_fn_is_allowed_on_resume_and_logged(tmp_path, caplog):
    out = tmp_path / "out"
    interrupt(square_fails_at_97, list(range(120)), out, chunk_size=5, num_workers=2, num_shards=4)
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        result = optimize(square, list(range(120)), out, chunk_size=5, num_workers=2, num_shards=4, verbose=False)
    assert result.resumed
    assert "fn changed" in caplog.text and "square_fails_at_97" in caplog.text
    assert items(out) == [square(i) for i in range(120)]


def test_max_retries_recovers_a_transient_failure(tmp_path):
    fn = _Flaky(str(tmp_path / "flag"), input=5, at=0, outputs=1)
    result = optimize(
        fn, list(range(20)), tmp_path / "out", chunk_size=3, num_workers=1, num_shards=2, max_retries=1, verbose=False
    )
    assert pairs(tmp_path / "out") == [(i, 0) for i in range(20)]
    assert result.failed == 0


def test_max_retries_after_a_chunk_was_committed_inside_the_input_repeats_nothing(tmp_path):
    """Input 3 yields 5 outputs (a chunk of 4 is committed inside it), fails, is retried: the
    retry must not write the outputs that the committed chunk already holds."""
    fn = _Flaky(str(tmp_path / "flag"), input=3, at=5, outputs=8)
    optimize(
        fn, list(range(6)), tmp_path / "out", chunk_size=4, num_workers=1, num_shards=1, max_retries=1, verbose=False
    )
    assert pairs(tmp_path / "out") == [(i, j) for i in range(6) for j in range(8)]


def test_on_error_skip_then_same_call_retry_is_exactly_once(tmp_path):
    """on_error='skip' on a generator input that fails after a chunk of its outputs was
    committed, then the same call again (which retries the failed input): every output of every
    input must be in the dataset exactly once (the retry's outputs come after, as documented)."""
    import collections

    fn = _Flaky(str(tmp_path / "flag"), input=3, at=5, outputs=8)
    out = tmp_path / "out"
    first = optimize(fn, list(range(6)), out, chunk_size=4, num_workers=1, num_shards=1, on_error="skip", verbose=False)
    assert first.failed == 1
    optimize(fn, list(range(6)), out, chunk_size=4, num_workers=1, num_shards=1, on_error="skip", verbose=False)
    got = collections.Counter(pairs(out))
    assert {k: v for k, v in got.items() if v != 1} == {}, "outputs written twice"
    assert set(got) == {(i, j) for i in range(6) for j in range(8)}


# ============================================================================================
# Modes
# ============================================================================================


def test_mode_none_over_a_dataset_of_another_call_is_refused(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(30)), out, chunk_size=5, num_shards=3, verbose=False)
    index_before = (out / "index.json").read_bytes()
    with pytest.raises(DatasetExistsError) as info:
        optimize(square, list(range(30, 50)), out, chunk_size=5, num_shards=3, verbose=False)
    message = str(info.value)
    assert "append" in message and "overwrite" in message and "30" in message
    assert (out / "index.json").read_bytes() == index_before
    assert ids(out) == list(range(30))


def test_mode_none_with_other_settings_over_a_dataset_is_refused(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(30)), out, chunk_size=5, num_shards=3, verbose=False)
    with pytest.raises(DatasetExistsError):
        optimize(square, list(range(30)), out, chunk_size=6, num_shards=3, verbose=False)


def test_the_same_call_again_is_a_no_op(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(40)), out, chunk_size=5, num_workers=2, num_shards=4, verbose=False)
    index_before = (out / "index.json").read_bytes()
    chunks_before = {p.name: p.stat().st_mtime_ns for p in chunk_files(out)}
    result = optimize(square, list(range(40)), out, chunk_size=5, num_workers=2, num_shards=4, verbose=False)
    assert result.items == 0 and result.chunks == 0 and result.published
    assert (out / "index.json").read_bytes() == index_before
    assert {p.name: p.stat().st_mtime_ns for p in chunk_files(out)} == chunks_before
    assert ids(out) == list(range(40))


def test_append_adds_after_the_existing_items(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(30)), out, chunk_size=4, num_workers=2, num_shards=3, verbose=False)
    result = optimize(
        square, list(range(30, 75)), out, chunk_size=4, num_workers=3, num_shards=5, mode="append", verbose=False
    )
    assert result.items == 45 and not result.resumed
    assert items(out) == [square(i) for i in range(75)]
    # a third generation
    optimize(square, list(range(75, 80)), out, chunk_size=4, mode="append", verbose=False)
    assert ids(out) == list(range(80))
    assert_clean_finish(out)
    litdata = pytest.importorskip("litdata")
    ds = litdata.StreamingDataset(str(out))
    assert len(ds) == 80
    assert [int(ds[k]["i"]) for k in range(80)] == list(range(80))


def test_append_to_a_missing_dataset_creates_it(tmp_path):
    optimize(square, list(range(10)), tmp_path / "out", chunk_size=4, mode="append", verbose=False)
    assert ids(tmp_path / "out") == list(range(10))


def test_the_same_append_again_adds_nothing(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(10)), out, chunk_size=4, verbose=False)
    optimize(square, list(range(10, 20)), out, chunk_size=4, mode="append", verbose=False)
    again = optimize(square, list(range(10, 20)), out, chunk_size=4, mode="append", verbose=False)
    assert again.items == 0
    assert ids(out) == list(range(20))


@pytest.mark.parametrize("resume_mode", ["append", None])
def test_interrupted_append_resumes_as_an_append(tmp_path, resume_mode):
    out = tmp_path / "out"
    optimize(square, list(range(50)), out, chunk_size=4, num_shards=3, verbose=False)
    interrupt(square_fails_at_97, list(range(50, 150)), out, chunk_size=4, num_workers=2, num_shards=6, mode="append")
    assert committed_items(out) > 0
    assert ids(out) == list(range(50)), "a reader must keep seeing the dataset as it was before the append"
    result = optimize(
        square, list(range(50, 150)), out, chunk_size=4, num_workers=3, num_shards=6, mode=resume_mode, verbose=False
    )
    assert result.resumed
    assert items(out) == [square(i) for i in range(150)]
    assert_clean_finish(out)


def test_append_with_another_sample_structure_names_the_existing_dataset(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(10)), out, chunk_size=4, verbose=False)
    with pytest.raises(SampleFormatError) as info:
        optimize(other_key, list(range(10, 20)), out, chunk_size=4, num_workers=1, mode="append", verbose=False)
    message = str(info.value)
    assert "'i'" in message and "'j'" in message
    # The format was fixed by the dataset being appended to, not by an "input -1".
    assert "input -1" not in message, message
    assert ids(out) == list(range(10))


def test_overwrite_replaces_a_finished_dataset(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(60)), out, chunk_size=4, num_shards=6, verbose=False)
    result = optimize(other_key, list(range(7)), out, chunk_size=3, num_shards=2, mode="overwrite", verbose=False)
    assert result.items == 7 and not result.resumed
    assert [x["j"] for x in items(out)] == list(range(7))
    from shardwright import StreamingDataset

    named = {c.filename for c in StreamingDataset(out).chunks}
    assert {p.name for p in chunk_files(out)} == named, "chunks of the replaced dataset were left behind"


def test_overwrite_replaces_an_interrupted_run_of_another_fn(tmp_path):
    """A failed run (mode=None) with a buggy fn, then mode='overwrite' with the fixed fn: the
    dataset must hold only the new fn's outputs. Only an interrupted *overwrite* may be resumed
    by overwrite (design.md, Modes)."""
    out = tmp_path / "out"
    interrupt(version_1_fails_at_70, list(range(100)), out, chunk_size=5, num_workers=2, num_shards=4)
    assert committed_items(out) > 0
    optimize(
        version_2, list(range(100)), out, chunk_size=5, num_workers=2, num_shards=4, mode="overwrite", verbose=False
    )
    got = items(out)
    assert [x["i"] for x in got] == list(range(100))
    assert {x["v"] for x in got} == {2}, f"{sum(x['v'] == 1 for x in got)} samples of the old fn were kept"


def test_overwrite_of_an_interrupted_overwrite_resumes_it(tmp_path):
    out = tmp_path / "out"
    optimize(other_key, list(range(10)), out, verbose=False)
    interrupt(square_fails_at_97, list(range(120)), out, chunk_size=5, num_workers=2, num_shards=4, mode="overwrite")
    before = committed_items(out)
    assert before > 0
    result = optimize(
        square, list(range(120)), out, chunk_size=5, num_workers=2, num_shards=4, mode="overwrite", verbose=False
    )
    assert result.resumed and result.items == 120 - before
    assert items(out) == [square(i) for i in range(120)]


@pytest.mark.parametrize("second_use_checkpoint", [False, True])
def test_use_checkpoint_false_rerun_starts_over(tmp_path, second_use_checkpoint):
    out, n = tmp_path / "out", 120
    interrupt(square_fails_at_97, list(range(n)), out, chunk_size=5, num_workers=2, num_shards=4, use_checkpoint=False)
    assert not record_files(out), "use_checkpoint=False must write no records"
    result = optimize(
        square,
        list(range(n)),
        out,
        chunk_size=5,
        num_workers=3,
        num_shards=4,
        use_checkpoint=second_use_checkpoint,
        verbose=False,
    )
    assert result.resumed is False
    assert result.items == n, "a run without checkpoints must be redone from the start"
    assert items(out) == [square(i) for i in range(n)]
    from shardwright import StreamingDataset

    assert {p.name for p in chunk_files(out)} == {c.filename for c in StreamingDataset(out).chunks}


# ============================================================================================
# Resume refused: inputs or settings changed
# ============================================================================================


def test_changed_input_on_resume_is_refused_naming_where(tmp_path):
    out = tmp_path / "out"
    inputs = list(range(100))
    interrupt(square_fails_at_97, inputs, out, chunk_size=5, num_workers=2, num_shards=4)
    changed = list(inputs)
    changed[42] = 4242
    with pytest.raises(RunMismatchError) as info:
        optimize(square, changed, out, chunk_size=5, num_workers=2, num_shards=4, verbose=False)
    message = str(info.value)
    assert "input" in message and ("between 0 and 99" in message or "42" in message), message
    assert "overwrite" in message


def test_changed_single_input_block_is_named_exactly(tmp_path):
    """257 inputs: the last fingerprint block holds only input 256."""
    out = tmp_path / "out"
    inputs = list(range(257))
    interrupt(square_fails_at_97, inputs, out, chunk_size=50, num_workers=2, num_shards=2)
    changed = inputs[:-1] + [9999]
    with pytest.raises(RunMismatchError, match=r"input 256 differs"):
        optimize(square, changed, out, chunk_size=50, num_workers=2, num_shards=2, verbose=False)


def test_changed_input_count_on_resume_is_refused(tmp_path):
    out = tmp_path / "out"
    interrupt(square_fails_at_97, list(range(100)), out, chunk_size=5, num_workers=2, num_shards=4)
    with pytest.raises(RunMismatchError) as info:
        optimize(square, list(range(101)), out, chunk_size=5, num_workers=2, num_shards=4, verbose=False)
    message = str(info.value)
    assert "100" in message and "101" in message and "inputs" in message, message


@pytest.mark.parametrize(
    "changed,setting,old",
    [
        ({"chunk_size": 6}, "chunk_size", "5"),
        ({"compression": "zstd"}, "compression", "None"),
        ({"num_shards": 5}, "num_shards", "4"),
        ({"chunk_size": 5, "chunk_bytes": "1MB"}, "chunk_bytes", "None"),
    ],
)
def test_changed_setting_on_resume_is_refused_naming_it(tmp_path, changed, setting, old):
    out = tmp_path / "out"
    interrupt(square_fails_at_97, list(range(100)), out, chunk_size=5, num_workers=2, num_shards=4)
    kwargs = {"chunk_size": 5, "num_shards": 4, **changed}
    with pytest.raises(RunMismatchError) as info:
        optimize(square, list(range(100)), out, num_workers=2, verbose=False, **kwargs)
    message = str(info.value)
    assert setting in message and f"was {old}" in message, message
    # the advice works: the recorded settings resume
    optimize(square, list(range(100)), out, chunk_size=5, num_workers=2, num_shards=4, verbose=False)
    assert ids(out) == list(range(100))


# ============================================================================================
# User errors, each with a message that says what to do
# ============================================================================================


def test_output_dir_that_is_a_file(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    with pytest.raises(OutputDirError, match="is a file"):
        optimize(square, [1, 2], target, verbose=False)
    assert target.read_text() == "not a directory"


def test_output_dir_under_a_regular_file(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("x")
    with pytest.raises(OutputDirError) as info:
        optimize(square, [1, 2], target / "sub" / "out", verbose=False)
    assert "file" in str(info.value) and "output_dir" in str(info.value)


@pytest.mark.parametrize(
    "inputs,kind",
    [
        ((i for i in range(3)), "generator"),
        (5, "int"),
        (iter([1, 2]), "list_iterator"),
        ({1, 2}, "set"),
        (map(str, [1]), "map"),
        ("abc", "str"),
    ],
    ids=["generator", "int", "iterator", "set", "map", "str"],
)
def test_inputs_that_are_not_a_sequence(tmp_path, inputs, kind):
    with pytest.raises(InputsError) as info:
        optimize(square, inputs, tmp_path / "out", verbose=False)
    message = str(info.value)
    assert "sequence" in message
    if kind == "str":  # a path: the sources that read its files are named (issue 33)
        assert "sources.files(path)" in message and "[path]" in message
    else:
        assert kind in message and "list(" in message


def test_unpicklable_input_is_named(tmp_path):
    with pytest.raises(InputsError) as info:
        optimize(square, [1, 2, threading.Lock(), 4], tmp_path / "out", verbose=False)
    assert "input 2" in str(info.value) and "pickle" in str(info.value)


@pytest.mark.parametrize("fn", [lambda i: {"i": i}, (lambda: lambda i: {"i": i})()], ids=["lambda", "closure"])
def test_unpicklable_fn_with_spawn_says_what_to_do(tmp_path, fn):
    with pytest.raises(ShardwrightError) as info:
        optimize(fn, [1, 2], tmp_path / "out", start_method="spawn", verbose=False)
    message = str(info.value)
    assert "pickle" in message and "spawn" in message
    assert "top level" in message and "fork" in message
    assert not (tmp_path / "out" / "index.json").exists()


def test_unpicklable_fn_is_fine_with_fork(tmp_path):
    optimize(lambda i: {"i": i}, list(range(5)), tmp_path / "out", start_method="fork", num_workers=2, verbose=False)
    assert ids(tmp_path / "out") == list(range(5))


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"mode": "replace"}, ["mode", "append", "overwrite"]),
        ({"compression": "gzip"}, ["compression", "zstd"]),
        ({"chunk_size": 0}, ["chunk_size"]),
        ({"chunk_size": 2.5}, ["chunk_size"]),
        ({"on_error": "ignore"}, ["on_error", "skip"]),
        ({"max_retries": -1}, ["max_retries"]),
        ({"num_shards": 0}, ["num_shards"]),
        ({"chunk_bytes": "lots"}, ["lots", "64MB"]),
        ({"chunk_bytes": 0}, ["chunk_bytes"]),
        ({"num_nodes": 2}, ["node_rank"]),
    ],
    ids=lambda v: str(v).replace(" ", ""),
)
def test_invalid_arguments(tmp_path, kwargs, words):
    with pytest.raises((ShardwrightError, ValueError)) as info:
        optimize(square, [1, 2, 3], tmp_path / "out", verbose=False, **kwargs)
    for word in words:
        assert word in str(info.value), str(info.value)
    assert not (tmp_path / "out" / "index.json").exists()


def test_fn_not_callable(tmp_path):
    with pytest.raises(ShardwrightError, match="callable"):
        optimize("square", [1], tmp_path / "out", verbose=False)


def test_sample_structure_differs_names_both_inputs(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(SampleFormatError) as info:
        optimize(extra_key_at_7, list(range(20)), out, chunk_size=3, num_workers=1, num_shards=1, verbose=False)
    message = str(info.value)
    assert "input 7" in message and "input 0" in message and "'x'" in message, message
    assert not (out / "index.json").exists()
    committed = committed_items(out)
    assert committed == 6  # inputs 0-5: two full chunks before input 7's chunk
    # fix fn, rerun: the committed inputs are kept, the rest is done once
    result = optimize(just_i, list(range(20)), out, chunk_size=3, num_workers=1, num_shards=1, verbose=False)
    assert result.resumed and result.items == 20 - committed
    assert items(out) == [{"i": i} for i in range(20)]


def test_sample_structure_differs_across_workers_names_both_inputs(tmp_path):
    with pytest.raises(SampleFormatError) as info:
        optimize(
            extra_key_at_7, list(range(40)), tmp_path / "out", chunk_size=3, num_workers=3, num_shards=8, verbose=False
        )
    message = str(info.value)
    assert message.count("input ") >= 2 and "fixed by input" in message, message


def test_leaf_type_differs(tmp_path):
    with pytest.raises(SampleFormatError) as info:
        optimize(str_leaf_at_4, list(range(10)), tmp_path / "out", num_workers=1, num_shards=1, verbose=False)
    message = str(info.value)
    assert "input 4" in message and "input 0" in message
    assert "int" in message and "str" in message


@pytest.mark.parametrize("fn", [int_overflow_at_2, negative_overflow_at_2])
def test_int_outside_int64(tmp_path, fn):
    with pytest.raises(SampleFormatError) as info:
        optimize(fn, list(range(5)), tmp_path / "out", num_workers=1, num_shards=1, verbose=False)
    message = str(info.value)
    assert "input 2" in message and "int64" in message and "str(" in message


def test_int64_bounds_are_stored_exactly(tmp_path):
    optimize(int64_bounds, list(range(6)), tmp_path / "out", num_workers=2, verbose=False)
    assert ids(tmp_path / "out") == [int64_bounds(i)["i"] for i in range(6)]


def test_sample_larger_than_chunk_bytes_gets_its_own_chunk(tmp_path):
    out = tmp_path / "out"
    optimize(blob, list(range(8)), out, chunk_bytes=1000, num_workers=1, num_shards=1, verbose=False)
    got = items(out)
    assert [len(x["b"]) for x in got] == [5000 if i == 3 else 10 for i in range(8)]
    from shardwright import StreamingDataset

    chunks = StreamingDataset(out).chunks
    big = [c for c in chunks if c.chunk_bytes > 1000]
    assert len(big) == 1 and big[0].chunk_size == 1, [(c.chunk_size, c.chunk_bytes) for c in chunks]
    assert all(c.chunk_bytes <= 1000 for c in chunks if c is not big[0])


def test_empty_inputs_give_a_valid_empty_dataset(tmp_path):
    out = tmp_path / "out"
    result = optimize(square, [], out, num_workers=2, verbose=False)
    assert result.items == 0 and result.chunks == 0 and result.published
    from shardwright import StreamingDataset

    ds = StreamingDataset(out)
    assert len(ds) == 0 and list(ds) == []
    assert_clean_finish(out)
    # and it can be appended to
    optimize(square, list(range(5)), out, chunk_size=2, mode="append", verbose=False)
    assert ids(out) == list(range(5))


def test_fn_raising_gives_fn_error_with_everything_needed(tmp_path):
    out = tmp_path / "out"
    inputs = [f"in-{i}" if i == 13 else i for i in range(40)]

    def fn(x):
        return raises_key_error_at_13(13 if x == "in-13" else x)

    with pytest.raises(FnError) as info:
        optimize(fn, inputs, out, chunk_size=3, num_workers=2, num_shards=4, verbose=False)
    error = info.value
    assert error.input_index == 13
    assert error.input_repr == repr("in-13")
    message = str(error)
    assert "input 13" in message and "'in-13'" in message and "KeyError" in message and "thirteen" in message
    assert "rerun" in message
    assert "Traceback" in error.worker_traceback and "raises_key_error_at_13" in error.worker_traceback
    assert error.worker_traceback in message
    assert isinstance(error.__cause__, KeyError) and error.__cause__.args == ("thirteen",)
    assert isinstance(error, ShardwrightError)
    assert committed_items(out) > 0 and not (out / "index.json").exists()


# --- damaged state ---------------------------------------------------------------------------


def _interrupted_run(out: Path) -> None:
    interrupt(square_fails_at_97, list(range(120)), out, chunk_size=5, num_workers=2, num_shards=4)
    assert len(rounds(out)) >= 3


def _rerun(out: Path, **kwargs):
    return optimize(square, list(range(120)), out, chunk_size=5, num_workers=2, num_shards=4, verbose=False, **kwargs)


# (An empty or all-NUL record is what a power cut leaves of an unsynced write: that is not
# treated here; see test_torn_record_then_changed_fn_then_second_interruption.)
GARBAGE = [
    b"garbage{",
    b"[]",
    b"{}",
    b"\xff\xfe\x01",
    b'{"shard": 0, "seq": 0',
    b'{"shard": "zero"}',
    b"null",
    b'{"shard": 0, "seq": 1, "chunk": 7}',
]


@pytest.mark.parametrize("content", GARBAGE, ids=range(len(GARBAGE)))
def test_corrupt_checkpoint_record(tmp_path, content):
    out = tmp_path / "out"
    _interrupted_run(out)
    second = rounds(out)[1]
    replace_round(LocalStorage(out), second, content)
    with pytest.raises(CorruptStateError) as info:
        _rerun(out)
    assert "overwrite" in str(info.value)
    assert not isinstance(info.value, json.JSONDecodeError)
    assert second[1] in str(info.value)


def one_output_fails_at_20(i):
    if i == 20:
        raise ValueError("planned failure at 20")
    yield {"i": i, "j": 0}


def two_outputs_fails_at_6(i):
    if i == 6:
        raise ValueError("planned failure at 6")
    yield from two_outputs(i)


def two_outputs(i):
    for j in range(2):
        yield {"i": i, "j": j}


def test_torn_record_then_changed_fn_then_second_interruption(tmp_path):
    """A record left all-NUL (a power cut before it was durable) in the middle of a shard: as the
    protocol documents (shardwright.protocol, crash points), it and the shard's later records are
    dropped and redone; the later records must never be read as part of the redone shard, even
    when the redo (with a fixed fn that makes other chunk boundaries) is interrupted again."""
    out = tmp_path / "out"
    n = 30
    # run 1: one output per input, chunk_size 4: records 0-4 cover inputs 0-19, then a failure.
    # (Record 0 ends at (input 3, 1 output taken): the generator had not finished input 3.)
    interrupt(one_output_fails_at_20, list(range(n)), out, chunk_size=4, num_workers=1, num_shards=1)
    records = rounds(out)
    assert len(records) == 5
    storage = LocalStorage(out)
    replace_round(storage, records[1], b"\0" * len(storage.read_bytes(records[1][0]).split(b"\n")[1]))
    # input 3 is partially committed by another fn: a positional resume is refused unless accepted
    # (issue 33 BAD 6), naming the input
    with pytest.raises(RunMismatchError, match=r"input 3 \(3\) has 1 output\(s\) of the old fn kept"):
        optimize(two_outputs_fails_at_6, list(range(n)), out, chunk_size=4, num_workers=1, num_shards=1, verbose=False)
    # run 2: the fixed fn makes two outputs per input and fails at input 6: it rewrites
    # records 1-2 only; records 3-4 of run 1 (inputs 12-19, one output each) are still there.
    accept = {"allow_fn_config_change": True}
    interrupt(two_outputs_fails_at_6, list(range(n)), out, chunk_size=4, num_workers=1, num_shards=1, **accept)
    # run 3 finishes: input 3's first output and inputs 0-2 come from run 1, the rest from the fixed fn.
    optimize(two_outputs, list(range(n)), out, chunk_size=4, num_workers=1, num_shards=1, verbose=False, **accept)
    assert pairs(out) == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1)] + [(i, j) for i in range(4, n) for j in range(2)]


def test_corrupt_checkpoint_record_then_overwrite_starts_over(tmp_path):
    """The error says 'rerun with mode=overwrite to start over': that must work."""
    out = tmp_path / "out"
    _interrupted_run(out)
    replace_round(LocalStorage(out), rounds(out)[1], b"garbage{")
    _rerun(out, mode="overwrite")
    assert items(out) == [square(i) for i in range(120)]


def test_deleted_record_seq_gap(tmp_path):
    out = tmp_path / "out"
    _interrupted_run(out)
    by_shard = {}
    for round_ in rounds(out):
        by_shard.setdefault(round_[3], []).append(round_)
    shard_records = next(found for found in by_shard.values() if len(found) >= 3)
    replace_round(LocalStorage(out), shard_records[1], None)
    with pytest.raises(CorruptStateError) as info:
        _rerun(out)
    message = str(info.value)
    assert "gap" in message and "overwrite" in message


def test_deleted_committed_chunk(tmp_path):
    out = tmp_path / "out"
    _interrupted_run(out)
    chunk_files(out)[0].unlink()
    with pytest.raises(CorruptStateError) as info:
        _rerun(out)
    assert "missing" in str(info.value) and "overwrite" in str(info.value)


def _edit_manifest(out: Path, **changes) -> None:
    path = out / MANIFEST_KEY
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "damage",
    ["garbage", "empty", "list", "missing-fields", "protocol", "inputs-empty", "num-shards-zero"],
)
def test_corrupt_manifest(tmp_path, damage):
    out = tmp_path / "out"
    _interrupted_run(out)
    path = out / MANIFEST_KEY
    if damage == "garbage":
        path.write_bytes(b"\x00garbage")
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "list":
        path.write_text("[1, 2]")
    elif damage == "missing-fields":
        path.write_text(json.dumps({"protocol": 1}))
    elif damage == "protocol":
        _edit_manifest(out, protocol=99)
    elif damage == "inputs-empty":
        _edit_manifest(out, inputs={})
    elif damage == "num-shards-zero":
        _edit_manifest(out, num_shards=0)
    with pytest.raises(CorruptStateError) as info:
        _rerun(out)
    assert "overwrite" in str(info.value)
    assert not (out / "index.json").exists(), "a damaged manifest must never lead to a published dataset"


def test_corrupt_manifest_then_overwrite_starts_over(tmp_path):
    out = tmp_path / "out"
    _interrupted_run(out)
    (out / MANIFEST_KEY).write_bytes(b"garbage{")
    _rerun(out, mode="overwrite")
    assert items(out) == [square(i) for i in range(120)]


@pytest.mark.parametrize(
    "content",
    [b"{broken", b"[]", b'{"chunks": 3, "config": {}}', b"\xff"],
    ids=["truncated", "list", "bad-chunks", "binary"],
)
def test_corrupt_index_json(tmp_path, content):
    from shardwright import StreamingDataset

    out = tmp_path / "out"
    optimize(square, list(range(20)), out, chunk_size=5, num_shards=2, verbose=False)
    (out / "index.json").write_bytes(content)
    with pytest.raises(CorruptStateError) as info:
        StreamingDataset(out)
    assert "index.json" in str(info.value) and "overwrite" in str(info.value)
    with pytest.raises(CorruptStateError) as info:
        optimize(square, list(range(20, 30)), out, chunk_size=5, num_shards=2, mode="append", verbose=False)
    assert "index.json" in str(info.value)
    with pytest.raises(CorruptStateError):
        optimize(square, list(range(20)), out, chunk_size=5, num_shards=2, verbose=False)


def test_corrupt_index_json_then_overwrite_starts_over(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(20)), out, chunk_size=5, num_shards=2, verbose=False)
    (out / "index.json").write_bytes(b"{broken")
    optimize(square, list(range(20)), out, chunk_size=5, num_shards=2, mode="overwrite", verbose=False)
    assert ids(out) == list(range(20))


def test_unfinished_output_is_never_read_as_a_dataset(tmp_path):
    from shardwright import StreamingDataset

    out = tmp_path / "out"
    _interrupted_run(out)
    with pytest.raises(IncompleteDatasetError) as info:
        StreamingDataset(out)
    assert "index.json" in str(info.value) and "rerun" in str(info.value)
    litdata = pytest.importorskip("litdata")
    with pytest.raises(Exception):
        ds = litdata.StreamingDataset(str(out))
        len(ds)
        list(ds)


def test_foreign_files_without_index_are_not_touched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "chunk-0-0.bin").write_bytes(b"someone else's")
    with pytest.raises(OutputDirError) as info:
        optimize(square, [1, 2], out, verbose=False)
    assert "overwrite" in str(info.value)
    assert (out / "chunk-0-0.bin").read_bytes() == b"someone else's"


# ============================================================================================
# Two runs on one output
# ============================================================================================


def test_concurrent_run_is_refused_and_a_killed_run_is_taken_over_at_once(tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    n = 1500
    # A day's lease TTL: the takeover below can only come from the holder's pid being gone. A
    # run refuses a live lease at once (ConcurrentRunError, below) and never waits one out.
    monkeypatch.setenv("SHARDWRIGHT_LEASE_TTL", "86400")
    config = {"kind": "plain", "n": n, "chunk_size": 25, "sleep": 0.005, "output_dir": out, "num_workers": 2}
    # the child's inputs from 500 on wait for a gate that never opens: it is still running when
    # the second call comes, at any load (the calls in this process have no gate)
    config |= {"gate": str(tmp_path / "gate"), "gate_period": n, "gate_after": 500}
    proc = start_child(config, SHARDWRIGHT_LEASE_TTL="86400")
    try:
        assert wait_for(lambda: proc.poll() is not None or committed_records(out) >= 2, 120), "no commit"
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        with pytest.raises(ConcurrentRunError) as info:
            optimize(child_plain, list(range(n)), out, chunk_size=25, num_workers=2, verbose=False)
        message = str(info.value)
        assert socket.gethostname() in message and f"pid {proc.pid}" in message, message
        assert proc.poll() is None, "the refused call disturbed the running one"
    finally:
        kill_group(proc)
        proc.wait()
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    assert not (Path(out) / "index.json").exists()
    before = committed_items(out)
    holder = json.loads((Path(out) / lease_key("node-0")).read_text())
    assert holder["pid"] == proc.pid and holder["ttl"] == 86400  # the killed run's, live by its heartbeat
    # same host, dead pid: taken over at once, not refused as live, and not waited out (a day:
    # pytest's --timeout only stops a run that hangs)
    result = optimize(child_plain, list(range(n)), out, chunk_size=25, num_workers=2, verbose=False)
    assert result.resumed and result.items == n - before
    got = items(out)
    assert [(x["i"], 0) for x in got] == child_expected("plain", n)


# ============================================================================================
# Disk full, read-only output (a real tmpfs; needs root and mount)
# ============================================================================================


def _mount_tmpfs(where: Path, options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.strip()}")


def _unmount(where: Path) -> None:
    gc.collect()  # mmaps of chunk files keep the mount busy
    if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_disk_full_then_resume_after_freeing_space(tmp_path):
    mnt = tmp_path / "mnt"
    _mount_tmpfs(mnt, "size=2m")
    try:
        out = mnt / "out"
        n = 60  # 60 x 100 KB > 2 MB
        with pytest.raises(StorageError) as info:
            optimize(big_blob, list(range(n)), out, chunk_size=2, num_workers=2, num_shards=10, verbose=False)
        message = str(info.value)
        assert "disk full" in message and "rerun" in message, message
        assert not (out / "index.json").exists()
        before = committed_items(out)
        subprocess.run(["mount", "-o", "remount,size=32m", str(mnt)], check=True)
        result = optimize(big_blob, list(range(n)), out, chunk_size=2, num_workers=2, num_shards=10, verbose=False)
        assert result.resumed and result.items == n - before
        got = [(x["i"], x["b"]) for x in items(out)]
        assert got == [(i, bytes([i % 256]) * 100_000) for i in range(n)]
        assert not list(out.rglob(".*.tmp-*")), "temp files of failed writes were left behind"
    finally:
        _unmount(mnt)


def test_read_only_output_dir(tmp_path):
    mnt = tmp_path / "ro"
    _mount_tmpfs(mnt, "ro,size=1m")
    try:
        with pytest.raises(OutputDirError) as info:
            optimize(square, [1, 2], mnt, verbose=False)
        assert "not writable" in str(info.value)
        with pytest.raises(OutputDirError) as info:
            optimize(square, [1, 2], mnt / "sub", verbose=False)
        assert str(mnt / "sub") in str(info.value)
    finally:
        _unmount(mnt)


# ============================================================================================
# Progress bar and status
# ============================================================================================


def test_verbose_shows_a_progress_bar_on_stderr(tmp_path, capfd):
    optimize(slow_square, list(range(200)), tmp_path / "out", chunk_size=10, num_workers=2, num_shards=4, verbose=True)
    out, err = capfd.readouterr()
    assert out == ""
    assert "input/s" in err and "200/200" in err and "100%" in err, err[-2000:]
    assert "200 items" in err


def test_verbose_false_prints_nothing(tmp_path, capfd):
    optimize(slow_square, list(range(100)), tmp_path / "out", chunk_size=10, num_workers=2, num_shards=4, verbose=False)
    interrupt(square_fails_at_97, list(range(120)), tmp_path / "other", chunk_size=5, num_workers=2, num_shards=4)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def _status(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "status", str(out), *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )


def test_status_of_a_failed_and_of_a_finished_run(tmp_path):
    """A run stopped by fn's error is "failed (user error: FnError on input 60)", not merely
    interrupted: the attempt's error is saved in the output's run history."""
    out = tmp_path / "out"
    # one worker, shards 0-24, 25-49, 50-74, 75-99 in order; fails at 60: 2 done, 1 in progress, 1 pending
    interrupt(square_fails_at_60, list(range(100)), out, chunk_size=5, num_workers=1, num_shards=4)
    shown = _status(out)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "failed (user error: FnError on input 60)" in text, text
    assert "60 of 100" in text
    assert "2 done" in text and "1 in progress" in text and "1 pending" in text, text
    assert "rerun" in text
    report = json.loads(_status(out, "--json").stdout)
    assert report["state"] == "failed" and report["stop_reason"] == "user error: FnError on input 60"
    assert report["last_attempt"]["error"]["input_index"] == 60 and report["last_attempt"]["error"]["kind"] == "user"
    assert report["inputs"] == 100 and report["inputs_done"] == 60 and report["items_committed"] == 60
    assert report["shards_done"] == [0, 1] and report["shards_in_progress"] == [2]
    assert report["shards_pending"] == [3]

    optimize(square, list(range(100)), out, chunk_size=5, num_workers=2, num_shards=4, verbose=False)
    shown = _status(out)
    assert shown.returncode == 0 and "complete" in shown.stdout, shown.stdout
    report = json.loads(_status(out, "--json").stdout)
    assert report["state"] == "complete" and report["published"] is True
    assert report["last_run"]["items"] == 100


def test_status_of_an_empty_directory(tmp_path):
    shown = _status(tmp_path)
    assert shown.returncode == 0
    assert json.loads(_status(tmp_path, "--json").stdout)["state"] == "empty"

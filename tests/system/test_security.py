"""Integrity and security (issue 8): links out of the output, files that are not ours, numbers
read from disk, abandoning a run, and the CLI. Real worker processes, real files and links.

The paused-writer (fencing) cases are in test_fencing.py; run identity, secrets, timeouts and
new-user mistakes in test_mistakes.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
import tracemalloc
from pathlib import Path

import pytest

from shardwright import (
    ConcurrentRunError,
    CorruptStateError,
    FnError,
    OutputDirError,
    RunMismatchError,
    StreamingDataset,
    abandon,
    optimize,
)
from shardwright.cli.main import main
from shardwright.storage import LocalStorage
from support.helpers import committed_records, kill_group, start_child, wait_for
from support.sealed_records import record_rounds, replace_round


def square(i):
    return {"i": i, "sq": i * i}


def square_fails_at_7(i):
    if i % 100 == 7:
        raise ValueError(f"planned failure at {i}")
    return square(i)


def items(out) -> list[int]:
    return [row["i"] for row in StreamingDataset(str(out))]


def interrupted(out: Path, inputs=range(20), mode=None) -> None:
    """Leave an interrupted run in ``out`` (fn raises at input 7)."""
    with pytest.raises(FnError):
        optimize(
            square_fails_at_7, list(inputs), out, chunk_size=2, num_workers=2, num_shards=2, mode=mode, verbose=False
        )
    assert (out / ".shardwright" / "manifest.json").exists()


def victim(tmp_path: Path) -> Path:
    """A directory outside the output, with a file someone cares about."""
    target = tmp_path / "victim"
    target.mkdir()
    (target / "important.txt").write_text("keep me")
    return target


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# --- symbolic links ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [".shardwright/shards", ".shardwright/failed", ".shardwright/leases", ".shardwright"])
@pytest.mark.parametrize("mode", [None, "overwrite"])
def test_linked_state_dir_is_refused_before_writing(tmp_path, where, mode):
    out = tmp_path / "out"
    interrupted(out)  # a real run's state, so cleanup/resume would go through the link
    target = victim(tmp_path)
    link = out / where
    if link.exists():
        os.rename(link, tmp_path / "moved-away")
    link.symlink_to(target, target_is_directory=True)
    before_out, before_victim = snapshot(out), snapshot(target)
    with pytest.raises(OutputDirError) as info:
        optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, mode=mode, verbose=False)
    assert str(link) in str(info.value) and "link" in str(info.value)
    assert snapshot(target) == before_victim, "a file outside the output was written or deleted"
    assert snapshot(out) == before_out, "the refusal must come before anything is written"


def test_linked_chunk_file_is_refused_by_overwrite(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(10)), out, chunk_size=2, num_workers=1, verbose=False)
    target = victim(tmp_path) / "important.txt"
    link = out / "chunk-9-00000-000000.bin"
    link.symlink_to(target)
    with pytest.raises(OutputDirError) as info:
        optimize(square, list(range(10)), out, chunk_size=2, num_workers=1, mode="overwrite", verbose=False)
    assert str(link) in str(info.value)
    assert target.read_text() == "keep me"
    assert items(out) == list(range(10))  # the published dataset is untouched


def test_merge_and_clean_refuse_links(tmp_path):
    out = tmp_path / "out"
    interrupted(out)
    target = victim(tmp_path)
    os.rename(out / ".shardwright" / "shards", tmp_path / "moved-away")
    (out / ".shardwright" / "shards").symlink_to(target, target_is_directory=True)
    assert main(["merge", str(out)]) == 2
    assert main(["clean", str(out)]) == 2
    assert snapshot(target) == {"important.txt": b"keep me"}


def test_output_dir_itself_may_be_a_link(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real, target_is_directory=True)
    optimize(square, list(range(6)), tmp_path / "out", chunk_size=2, num_workers=1, verbose=False)
    assert items(real) == list(range(6))


# --- overwrite deletes only ours -----------------------------------------------------------------


def test_overwrite_keeps_the_users_files(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(10)), out, chunk_size=2, num_workers=1, verbose=False)
    theirs = {
        "chunk-final.bin": b"user chunk",
        "search-index.json": b"{}",
        "notes.txt": b"n",
        "chunk-0-0.bin.bak": b"b",
    }
    for name, data in theirs.items():
        (out / name).write_bytes(data)
    optimize(square, list(range(100, 104)), out, chunk_size=2, num_workers=1, mode="overwrite", verbose=False)
    assert items(out) == list(range(100, 104))
    for name, data in theirs.items():
        assert (out / name).read_bytes() == data, f"overwrite deleted the user's {name}"
    listed = {c["filename"] for c in json.loads((out / "index.json").read_text())["chunks"]}
    assert {p.name for p in out.glob("chunk-*")} == listed | {"chunk-final.bin", "chunk-0-0.bin.bak"}


def test_overwrite_deletes_a_litdata_datasets_own_chunks(tmp_path):
    """A dataset's own index.json names its chunks: those are removed, even with foreign names."""
    out = tmp_path / "out"
    optimize(square, list(range(6)), out, chunk_size=2, num_workers=1, verbose=False)
    index = json.loads((out / "index.json").read_text())
    for k, chunk in enumerate(index["chunks"]):  # rename to litdata's names, as litdata writes them
        os.rename(out / chunk["filename"], out / f"chunk-0-{k}.bin")
        chunk["filename"] = f"chunk-0-{k}.bin"
    (out / "index.json").write_text(json.dumps(index))
    optimize(square, list(range(3)), out, chunk_size=2, num_workers=1, mode="overwrite", verbose=False)
    assert not [p for p in out.glob("chunk-0-?.bin")]
    assert items(out) == [0, 1, 2]


def test_foreign_files_refusal_lists_all_and_its_suggestion_is_safe(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    names = [f"chunk-{k}.bin" for k in range(7)] + ["search-index.json"]
    for name in names:
        (out / name).write_bytes(b"theirs")
    with pytest.raises(OutputDirError) as info:
        optimize(square, [1, 2], out, verbose=False)
    message = str(info.value)
    assert all(name in message for name in names) and "more" not in message
    assert "deletes none of these" in message
    optimize(square, [1, 2], out, mode="overwrite", verbose=False)  # following the suggestion
    assert all((out / name).read_bytes() == b"theirs" for name in names)
    assert items(out) == [1, 2]


# --- numbers read from disk ----------------------------------------------------------------------


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_huge_num_shards_is_refused_without_planning_them(tmp_path, capsys):
    out = tmp_path / "out"
    interrupted(out)
    _edit_json(out / ".shardwright" / "manifest.json", num_shards=10**8, num_inputs=10**8)
    # Not 10**8 shards planned or allocated: measured by the memory this process allocated
    # (10**8 of anything is gigabytes), not by how long it took; pytest's --timeout only stops
    # a loop that would hang without allocating.
    tracemalloc.start()
    try:
        assert main(["status", str(out)]) == 2
        assert main(["merge", str(out)]) == 2
        with pytest.raises(CorruptStateError, match="num_shards|inputs fingerprint|out of range"):
            optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB allocated"


@pytest.mark.parametrize("field,value", [("seq", 10**30), ("next_input", -5), ("epoch", "x"), ("stored_bytes", 2**60)])
def test_absurd_record_numbers_are_corrupt_state(tmp_path, field, value):
    out = tmp_path / "out"
    interrupted(out)
    storage = LocalStorage(out)
    first = record_rounds(storage)[0]  # a record file, or a line of a worker's record log
    lines = storage.read_bytes(first[0]).split(b"\n")
    document = json.loads(lines[max(0, first[2] - 1)])
    document["records"][0][field] = value
    replace_round(storage, first, json.dumps(document).encode())
    with pytest.raises(CorruptStateError):
        optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)


def test_garbage_lease_numbers_do_not_crash_and_count_as_stale(tmp_path):
    out = tmp_path / "out"
    interrupted(out)
    lease = out / ".shardwright" / "leases" / "node-0.json"
    lease.write_text(
        json.dumps(
            {"owner": "x", "host": "elsewhere", "pid": "no", "heartbeat": "yesterday", "ttl": 1e300, "epoch": -3}
        )
    )
    optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)
    assert items(out) == list(range(20))


def test_lease_with_heartbeat_in_the_future_says_how_to_clear_it(tmp_path):
    out = tmp_path / "out"
    interrupted(out)
    lease = out / ".shardwright" / "leases" / "node-0.json"
    lease.write_text(
        json.dumps(
            {"owner": "x", "host": "elsewhere", "pid": 1, "heartbeat": time.time() + 3600, "ttl": 30, "epoch": 1}
        )
    )
    with pytest.raises(ConcurrentRunError) as info:
        optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)
    assert "in the future" in str(info.value) and str(lease) in str(info.value)
    lease.unlink()  # what the message says to do
    optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)
    assert items(out) == list(range(20))


def test_corrupt_run_record_names_a_safe_fix(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(6)), out, chunk_size=2, num_workers=1, verbose=False)
    _edit_json(out / ".shardwright" / "run.json", failed_inputs=[[10**12, 0]])
    with pytest.raises(CorruptStateError) as info:
        optimize(square, list(range(6)), out, chunk_size=2, num_workers=1, verbose=False)
    assert "delete" in str(info.value) and "run.json" in str(info.value)
    (out / ".shardwright" / "run.json").unlink()
    optimize(square, list(range(6)), out, chunk_size=2, num_workers=1, mode="append", verbose=False)
    assert items(out) == list(range(6)) * 2


# --- abandoning an unfinished run ----------------------------------------------------------------


def test_abandon_a_failed_append_keeps_the_dataset(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(10)), out, chunk_size=2, num_workers=1, verbose=False)
    interrupted(out, range(100, 120), mode="append")
    with pytest.raises(RunMismatchError) as info:  # another append: the error's way out is safe
        optimize(
            square, list(range(200, 204)), out, chunk_size=2, num_workers=2, num_shards=2, mode="append", verbose=False
        )
    assert "shardwright clean" in str(info.value) and "overwrite" not in str(info.value)
    assert main(["clean", str(out)]) == 0
    assert items(out) == list(range(10))
    assert not (out / ".shardwright" / "manifest.json").exists()
    assert sorted(p.name for p in out.glob("chunk-*")) == sorted(
        c["filename"] for c in json.loads((out / "index.json").read_text())["chunks"]
    )
    assert abandon(str(out)) is False  # nothing left to abandon
    optimize(
        square, list(range(200, 204)), out, chunk_size=2, num_workers=2, num_shards=2, mode="append", verbose=False
    )
    assert items(out) == list(range(10)) + list(range(200, 204))


def test_abandon_refuses_a_live_run(tmp_path):
    out = tmp_path / "out"
    config = {"kind": "plain", "n": 3000, "chunk_size": 5, "sleep": 0.01, "num_workers": 1, "output_dir": str(out)}
    # inputs from 500 on wait for a gate that never opens: the run is live when abandoned, at any load
    config |= {"gate": str(tmp_path / "gate"), "gate_period": 3000, "gate_after": 500}
    proc = start_child(config)
    try:
        assert wait_for(lambda: proc.poll() is not None or committed_records(str(out)) >= 2, 120)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        with pytest.raises(ConcurrentRunError):
            abandon(str(out))
        assert main(["clean", str(out)]) == 2
    finally:
        kill_group(proc, signal.SIGKILL)
        proc.wait()
    assert (out / ".shardwright" / "manifest.json").exists()


# --- the CLI -------------------------------------------------------------------------------------


def test_status_of_a_missing_directory_exits_non_zero(tmp_path, capsys):
    assert main(["status", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "nope").exists()


def test_bad_storage_options_json_is_one_line(tmp_path, capsys):
    assert main(["status", str(tmp_path), "--storage-options", "{not json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shardwright: error: --storage-options is not valid JSON") and "\n" not in err

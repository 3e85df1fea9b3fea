"""Trust round 7 (docs/trust-round7.md), round 6's POOR leftovers: a parquet folder's index.json
read through a link, a chunk grown past its entry blamed on its checksum, mapping-like configs
left out of fn's identity, a FIFO given to sources.jsonl, and a JSONL directory's link to a file
outside it read silently."""

from __future__ import annotations

import collections
import functools
import json
import os
import types

import pytest

import shardwright as sw
from shardwright import StreamingDataset
from shardwright.engine.identity import fn_identity
from shardwright.errors import CorruptStateError, InputsError
from shardwright.format.checksum import ChecksumMismatch
from support.datasets import write_dataset

# --- parquet: index.json through a link --------------------------------------------------------


def test_a_parquet_folders_index_replaced_by_a_link_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    mine, other = tmp_path / "mine", tmp_path / "other"
    for folder, rows in ((mine, range(10)), (other, range(100, 103))):
        folder.mkdir()
        pq.write_table(pa.table({"x": list(rows)}), folder / "part.parquet")
        sw.index_parquet_dataset(str(folder))
    os.remove(mine / "index.json")
    os.symlink(other / "index.json", mine / "index.json")  # the other folder's names and sizes
    with pytest.raises(CorruptStateError, match="is a symbolic link"):
        ds = StreamingDataset(str(mine), item_loader=sw.ParquetLoader())
        [ds[i] for i in range(len(ds))]


# --- a chunk larger (or smaller) than its entry --------------------------------------------------


@pytest.mark.parametrize(
    "change, said", [(b"x" * 100, "longer than the index says"), (None, "truncated")], ids=["grown", "cut"]
)
def test_a_chunk_of_another_size_than_its_entry_is_named_by_its_size(tmp_path, change, said):
    out = tmp_path / "d"
    entries = write_dataset(out, [{"i": i} for i in range(8)], chunk_size=4)
    path = out / entries[0].filename
    if change is None:
        with open(path, "r+b") as f:
            f.truncate(10)
    else:
        with open(path, "ab") as f:
            f.write(change)
    for read in (lambda ds: ds[0], lambda ds: list(ds)):
        with pytest.raises(CorruptStateError) as info:
            read(StreamingDataset(str(out)))
        assert not isinstance(info.value, ChecksumMismatch), info.value
        assert f"but index.json says {entries[0].chunk_bytes}: {said}" in str(info.value)


# --- fn identity: mapping-like configs ------------------------------------------------------------


def _work(x, config=None):
    return x


MAPPINGS = {
    "OrderedDict": lambda v: collections.OrderedDict(temperature=v),
    "defaultdict": lambda v: collections.defaultdict(list, temperature=v),
    "SimpleNamespace": lambda v: types.SimpleNamespace(temperature=v),
    "mappingproxy": lambda v: types.MappingProxyType({"temperature": v}),
}


@pytest.mark.parametrize("make", MAPPINGS.values(), ids=MAPPINGS.keys())
def test_mapping_like_configs_are_hashed_by_value(make):
    before = fn_identity(functools.partial(_work, config=make(0.7)))
    same = fn_identity(functools.partial(_work, config=make(0.7)))
    after = fn_identity(functools.partial(_work, config=make(0.9)))
    assert before.skipped == () and "partial argument config" in before.config
    assert same.config_changes(before) == []
    assert after.config_changes(before) == ["partial argument config"]


def test_a_run_recorded_when_such_configs_were_skipped_still_resumes():
    from shardwright.protocol.fn_identity import FnIdentity

    now = fn_identity(functools.partial(_work, config=types.SimpleNamespace(temperature=0.7)))
    config = {k: v for k, v in now.config.items() if k != "partial argument config"}
    recorded = FnIdentity(now.name, now.code, config, ("partial argument config (SimpleNamespace)",))
    assert now.config_changes(recorded) == []


def test_a_defaultdict_with_a_code_factory_is_named_as_skipped():
    ident = fn_identity(functools.partial(_work, config=collections.defaultdict(lambda: 0, a=1)))
    assert any(s.startswith("partial argument config (defaultdict") for s in ident.skipped)


# --- sources.jsonl: FIFOs and links out of the directory ------------------------------------------


def test_a_fifo_given_to_sources_jsonl_is_refused_naming_it(tmp_path):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputsError, match=rf"{fifo} is not a regular file \(a FIFO"):
        sw.sources.jsonl(str(fifo))
    (tmp_path / "ok.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(InputsError, match=rf"{fifo} is not a regular file"):
        sw.sources.jsonl(str(tmp_path))  # found in a directory too


def test_a_link_out_of_a_jsonl_directory_is_refused_naming_it(tmp_path):
    folder, outside = tmp_path / "rows", tmp_path / "private"
    folder.mkdir()
    outside.mkdir()
    (folder / "a.jsonl").write_text('{"a": 1}\n')
    (outside / "secret.jsonl").write_text(json.dumps({"a": 999}) + "\n")
    os.symlink(outside / "secret.jsonl", folder / "b.jsonl")
    for spec in (folder, f"{folder}/*.jsonl"):
        with pytest.raises(InputsError, match=rf"{folder / 'b.jsonl'} is reached through a symbolic link"):
            sw.sources.jsonl(str(spec))
    assert len(sw.sources.jsonl(str(folder / "b.jsonl"))) == 1  # named by its own path: the user's choice
    os.remove(folder / "b.jsonl")
    os.symlink("a.jsonl", folder / "b.jsonl")  # a link inside the directory is fine
    assert len(sw.sources.jsonl(str(folder))) == 2


# --- a progress snapshot damaged on disk ----------------------------------------------------------


def test_a_progress_snapshot_with_one_byte_changed_is_never_resumed_from(tmp_path):
    """A byte flipped in a snapshot's ResumePoint state ({"page":3} read as {"page":8}) made a
    real resume skip pages 3-7 without a word (docs/trust-round7.md; the end-to-end case is
    tests/system/test_trust_snapshots.py). The snapshot now carries a checksum of its bytes."""
    from shardwright.protocol.progress import (
        BufferState,
        ProgressSnapshot,
        SlotState,
        decode_snapshot,
        encode_snapshot,
        read_snapshot,
        write_snapshot,
    )
    from shardwright.storage.local import LocalStorage

    snapshot = ProgressSnapshot(
        run_id="run",
        shard=0,
        seq=2,
        tip_epoch=0,
        committed=(4, 0),
        epoch=1,
        buffer=BufferState(4, (5, 0), [], [b"item-a"]),
        slots=[SlotState(5, 0, [b"item-b"], '{"page":3}', 1, False)],
    )
    data = encode_snapshot(snapshot)
    assert decode_snapshot(data) == snapshot
    page = b'page\\":3'  # the state as JSON text inside the JSON header
    assert data.count(page) == 1
    for damaged in (data.replace(page, b'page\\":8'), data.replace(b"item-a", b"item-A")):
        with pytest.raises(ValueError, match="checksum"):
            decode_snapshot(damaged)
    storage = LocalStorage(str(tmp_path))
    write_snapshot(storage, snapshot)
    assert read_snapshot(storage, "run", 0, 2, 0, (4, 0)) == snapshot
    key = storage.list(".shardwright/progress/")[0]
    storage.write_bytes(key, storage.read_bytes(key).replace(page, b'page\\":8'))
    assert read_snapshot(storage, "run", 0, 2, 0, (4, 0)) is None  # ignored: the records stand


# --- diff trusts no recorded digest that the entries do not give ---------------------------------


@pytest.mark.parametrize("edit", ["reordered", "digest of another"])
def test_diff_refuses_an_index_whose_entries_do_not_give_its_recorded_digest(tmp_path, edit):
    """Chunk entries reordered by hand under the recorded digest: the reader refused the dataset,
    `diff` said "same" (it compared the recorded digests alone), exit 0. A digest edited by hand
    was reported as "the decoding config differs"."""
    import shutil

    from shardwright.reader.diff import diff

    original, edited = tmp_path / "a", tmp_path / "b"
    sw.optimize(_item, list(range(12)), str(original), chunk_size=3, num_workers=1)
    shutil.copytree(original, edited)
    index = json.loads((edited / "index.json").read_text())
    if edit == "reordered":
        index["chunks"].reverse()
    else:
        index["digest"] = index["digest"][:-4] + ("0000" if not index["digest"].endswith("0000") else "1111")
    (edited / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match="do not give the digest it records"):
        StreamingDataset(str(edited))
    with pytest.raises(CorruptStateError, match="do not give the digest it records"):
        diff(str(original), str(edited))
    assert diff(str(original), str(original)).same


def _item(i):
    return {"i": i}


def test_a_url_typed_with_credentials_is_never_printed_back(tmp_path, capsys):
    """`shardwright diff s3://KEY:SECRET@bucket/x B` printed the secret in its error line."""
    from shardwright.cli.main import main

    assert main(["diff", "s3://AKIAEXAMPLE:supersecret@bucket/x", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert "supersecret" not in said and "AKIAEXAMPLE" not in said and said.startswith("shardwright: error:"), said


def test_a_folder_that_is_no_dataset_is_not_called_an_unfinished_run(tmp_path, capsys):
    """`shardwright diff A /etc` said /etc's "optimize run has not finished (0 checkpointed chunks)"."""
    from shardwright.cli.main import main

    (tmp_path / "notes.txt").write_text("not a dataset")
    for command in (["diff", str(tmp_path), str(tmp_path)], ["verify", str(tmp_path)]):
        assert main(command) == 2
        said = capsys.readouterr().err
        assert "there is no dataset at" in said and "has not finished" not in said, said


# --- the /dev/shm rate budget: a full file system, a file truncated or deleted under a run --------

_BUDGET_SCRIPT = """
import os, sys
from shardwright.engine.limits import SharedBudget
from shardwright.errors import UsageError
path, case = sys.argv[1], sys.argv[2]
try:
    first = SharedBudget("2/s", path=path)
    first.reserve()
    if case == "truncated":
        os.truncate(path, 0)
    elif case == "deleted":
        os.unlink(path)
    again = first.reserve()  # the holder's next call
    second = SharedBudget("2/s", path=path)  # a process that starts after it
    print(round(again, 2), round(second.reserve(), 2))
except UsageError as exc:
    print("UsageError:", exc)
"""


def _budget(path, case: str):
    """Run in a process of its own: before the fix these cases died of SIGBUS, without a word."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", _BUDGET_SCRIPT, str(path), case], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("case", ["truncated", "deleted"])
def test_a_budget_file_truncated_or_deleted_under_a_run_is_taken_again(tmp_path, case):
    """Truncated under a holder: its next reserve was SIGBUS. Deleted (a cleanup of /dev/shm):
    the holder kept a budget of its own while new processes made another, each at the full rate
    (their first calls both went at once). Now both take the one file at the path."""
    done = _budget(tmp_path / "budget", case)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    first, second = map(float, done.stdout.split())
    assert first == 0.0 and second == 0.5, done.stdout  # one budget: the second call waits its turn


def test_a_full_file_system_is_one_line_not_a_sigbus(tmp_path):
    import subprocess

    small = tmp_path / "shm"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(small)]).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        (small / "fill").write_bytes(bytes(8192))  # full, as a busy /dev/shm is
        done = _budget(small / "budget", "full")
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        assert done.stdout.startswith("UsageError:") and "No space left on device" in done.stdout, done.stdout
        assert "\n" not in done.stdout.strip()
    finally:
        subprocess.run(["umount", str(small)])


# --- Hugging Face locations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["hf://datasets/org/name/../../x", "hf://datasets/org/name/./x", "hf://datasets/org//n"]
)
def test_an_hf_url_with_dot_segments_is_refused_before_any_download(url):
    """hf://datasets/org/name/../../x was joined onto the snapshot's path: a folder out of it was read."""
    from shardwright.errors import UsageError
    from shardwright.sources.hub import hf_folder

    with pytest.raises(UsageError, match="segment"):
        hf_folder(url, {})


@pytest.mark.parametrize("source", [sw.sources.parquet, sw.sources.jsonl])
def test_a_source_given_an_hf_url_points_to_the_hub_readers(source):
    with pytest.raises(
        InputsError, match=r"not the Hugging Face Hub \(hf://datasets/org/name\): use shardwright.optimize_hf"
    ):
        source("hf://datasets/org/name")


# --- litdata states of another version -------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 3, "2", None, True, 2.0])
def test_a_litdata_state_of_another_version_is_refused(tmp_path, version):
    from shardwright.errors import ResumeStateError

    out = tmp_path / "d"
    write_dataset(out, [{"i": i} for i in range(40)], chunk_size=4)
    state = StreamingDataset(str(out)).state_dict(num_samples_yielded=8, num_workers=2, batch_size=2)
    resumed = StreamingDataset(str(out))
    resumed.load_state_dict(dict(state))  # version 2: read
    with pytest.raises(ResumeStateError, match="state_version"):
        StreamingDataset(str(out)).load_state_dict({**state, "state_version": version})


def test_diff_and_verify_name_the_dataset_not_an_output_dir(capsys):
    from shardwright.cli.main import main

    for command in (
        ["diff", "/dev/null", "/dev/null"],
        ["verify", "/dev/null"],
        ["verify", ""],
        ["status", "/dev/null"],
        ["history", "/dev/null"],
        ["runs", "/dev/null"],
    ):
        assert main(command) == 2
        said = capsys.readouterr().err
        assert "dataset location" in said and "output_dir" not in said and "remove it" not in said, said

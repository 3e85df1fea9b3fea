"""Issue 32 item 8: an input file edited between an interrupted run and its resume is a
conflict only when the run committed outputs of it; it is refused naming the file and the
safe ways on, on the host that recorded it (size and mtime) and on any other (size)."""

from __future__ import annotations

import os

import pytest

from shardwright.engine.edited import check_input_files
from shardwright.errors import RunMismatchError
from shardwright.process import host_identity
from shardwright.protocol.fingerprint import InputFiles
from shardwright.protocol.records import CommitRecord, write_records
from shardwright.storage import open_storage
from support.manifests import recorded_manifest


def setup(tmp_path, *, host=None):
    docs = []
    for i in range(4):
        path = tmp_path / "docs" / f"doc{i:03d}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"document {i}")
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # long before the run started
        docs.append(str(path))
    files = InputFiles.of(docs)
    assert files is not None
    manifest = recorded_manifest(docs, created_at=2.0, input_files={**files.to_json(), "host": host or host_identity()})
    storage = open_storage(str(tmp_path / "out"))
    # shard 0 (inputs 0, 1) committed input 0; shard 1 (inputs 2, 3) nothing yet
    write_records(storage, [CommitRecord(0, 0, None, 0, 0, 1, 0, False, (), "run")])
    return storage, manifest, docs


def edit(path: str, text: str = "edited, and longer than before") -> None:
    with open(path, "w") as f:
        f.write(text)


def test_an_edited_input_without_committed_outputs_is_not_a_conflict(tmp_path):
    storage, manifest, docs = setup(tmp_path)
    edit(docs[2])
    check_input_files(storage, manifest, docs, storage.url)
    check_input_files(storage, manifest, docs, storage.url)  # and the next resume compares with it as it is now


def test_an_edited_input_with_committed_outputs_is_refused_naming_it_and_the_way_on(tmp_path):
    storage, manifest, docs = setup(tmp_path)
    edit(docs[0])
    with pytest.raises(RunMismatchError) as info:
        check_input_files(storage, manifest, docs, storage.url)
    text = str(info.value)
    assert "input 0 (" in text and "doc000.txt" in text and "committed outputs of it" in text
    assert "restore the file" in text and "shardwright clean" in text


def test_on_another_host_sizes_are_compared(tmp_path):
    storage, manifest, docs = setup(tmp_path, host="another-host")
    os.utime(docs[0], ns=(5 * 10**18, 5 * 10**18))  # a copy's mtime: not an edit
    check_input_files(storage, manifest, docs, storage.url)
    edit(docs[0])
    with pytest.raises(RunMismatchError, match="committed outputs of it"):
        check_input_files(storage, manifest, docs, storage.url)


def test_an_input_files_record_without_sizes_still_loads():
    files = InputFiles.from_json({"block_size": 4, "block_hashes": "0" * 16})
    assert files is not None and files.size_hashes == ""


def source_run(tmp_path, committed_rows: int):
    """An interrupted run over two JSONL files (10 rows each), ``committed_rows`` of the first committed."""
    from shardwright import sources
    from shardwright.engine.planning import check_inputs
    from shardwright.protocol.identity import IdentityTable
    from shardwright.protocol.recorded import write_units

    data = tmp_path / "data"
    data.mkdir()
    for name in ("a", "b"):
        (data / f"{name}.jsonl").write_text("".join(f'{{"i": {i}}}\n' for i in range(10)))
    source = sources.jsonl(str(data))
    storage = open_storage(str(tmp_path / "out"))
    manifest = recorded_manifest(list(range(20)), created_at=2.0)
    from shardwright.protocol.manifest import create_manifest

    create_manifest(storage, manifest)
    write_units(storage, 0, IdentityTable.of_units(source.units()), only_if_missing=False)
    if committed_rows:
        write_records(storage, [CommitRecord(0, 0, None, 0, 0, committed_rows, 0, False, (), "run")])
    return storage, data, check_inputs


def test_a_changed_source_file_says_whether_its_outputs_were_committed(tmp_path):
    from shardwright import sources

    storage, data, check_inputs = source_run(tmp_path, committed_rows=0)
    (data / "b.jsonl").write_text('{"i": 99}\n' * 12)
    inputs = check_inputs(sources.jsonl(str(data)))
    with pytest.raises(RunMismatchError) as info:
        inputs.check_unchanged(storage)
    text = str(info.value)
    assert "b.jsonl changed since the interrupted run" in text and "no output of it was committed yet" in text
    assert "shardwright clean" in text


def test_a_changed_source_file_with_committed_outputs_says_so(tmp_path):
    from shardwright import sources

    storage, data, check_inputs = source_run(tmp_path, committed_rows=3)
    (data / "a.jsonl").write_text('{"i": 99}\n' * 12)
    inputs = check_inputs(sources.jsonl(str(data)))
    with pytest.raises(RunMismatchError, match=r"a\.jsonl changed .* committed outputs of 3 of its row\(s\)"):
        inputs.check_unchanged(storage)

"""Sources through the whole engine with real processes: worker pools, on_error, timeouts,
generators, multi-node shares, real SIGKILLs and resumes, incremental runs, S3."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardwright import FnError, RunMismatchError, StreamingDataset, optimize, sources
from shardwright.errors import DatasetExistsError
from support.helpers import committed_records, wait_for

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CHILD = str(Path(__file__).parent.parent / "support" / "sources_child.py")


def write_parquet(path, first: int, rows: int, row_group: int = 50) -> None:
    table = pa.table({"id": list(range(first, first + rows)), "text": [f"row {i}" for i in range(first, first + rows)]})
    pq.write_table(table, str(path), row_group_size=row_group)


def ids_of(output_dir, key="id", storage_options=None) -> list:
    ds = (
        StreamingDataset(str(output_dir), storage_options=storage_options)
        if storage_options
        else StreamingDataset(str(output_dir))
    )
    return [ds[i][key] for i in range(len(ds))]


def row_id(row):
    return {"id": row["id"]}


def two_per_row(row):
    for k in range(2):
        yield {"id": row["id"] * 10 + k}


def test_parquet_through_workers_and_a_generator(tmp_path):
    for f in range(3):
        write_parquet(tmp_path / f"p{f}.parquet", f * 200, 200)
    result = optimize(row_id, sources.parquet(tmp_path), tmp_path / "out", chunk_size=7, num_workers=3, verbose=False)
    assert result.published and result.inputs == 600 and result.items == 600
    assert ids_of(tmp_path / "out") == list(range(600))
    optimize(
        two_per_row, sources.parquet(tmp_path)[100:150], tmp_path / "gen", chunk_size=16, num_workers=2, verbose=False
    )
    assert ids_of(tmp_path / "gen") == [i * 10 + k for i in range(100, 150) for k in range(2)]


def parse(row):
    return {"n": row["n"]}


def test_jsonl_bad_line_fails_its_input_naming_file_and_line(tmp_path):
    lines = [json.dumps({"n": i}).encode() for i in range(40)]
    lines[17] = b'{"n": \xff}'
    (tmp_path / "data.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    result = optimize(
        parse, sources.jsonl(tmp_path), tmp_path / "skip", chunk_size=5, num_workers=2, on_error="skip", verbose=False
    )
    assert result.failed == 1 and ids_of(tmp_path / "skip", "n") == [i for i in range(40) if i != 17]
    failure = json.loads(next((tmp_path / "skip" / ".shardwright" / "failed").iterdir()).read_text())
    assert "data.jsonl:18" in json.dumps(failure)
    with pytest.raises(FnError, match=r"data\.jsonl:18: not valid UTF-8"):
        optimize(parse, sources.jsonl(tmp_path), tmp_path / "raise", chunk_size=5, num_workers=2, verbose=False)
    # the line index is kept with the interrupted run, and goes with its cleanup
    kept = list((tmp_path / "raise" / ".shardwright" / "sources").iterdir())
    assert len(kept) == 1 and kept[0].name.startswith("jsonl-index-")


def slow_ref(ref):
    if ref.path.endswith("03.bin"):
        time.sleep(30)
    return {"name": ref.path.rsplit("/", 1)[-1], "size": ref.size, "head": ref.read()[:2]}


def test_files_with_retries_and_timeouts(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(8):
        (src / f"{i:02d}.bin").write_bytes(bytes([i]) * 5)
    result = optimize(
        slow_ref,
        sources.files(src),
        tmp_path / "out",
        chunk_size=2,
        num_workers=2,
        timeout=5.0,  # the stuck input's 30 s, not a quick one slowed down by a loaded machine
        on_error="skip",
        verbose=False,
    )
    assert result.failed == 1 and result.inputs == 8
    assert ids_of(tmp_path / "out", "name") == [f"{i:02d}.bin" for i in range(8) if i != 3]


def test_hf_dataset_loaded_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"id": list(range(500))}).save_to_disk(str(tmp_path / "ds"))
    source = sources.hf(datasets.load_from_disk(str(tmp_path / "ds")))
    optimize(row_id, source, tmp_path / "out", chunk_size=50, num_workers=2, verbose=False)
    assert ids_of(tmp_path / "out") == list(range(500))


def test_two_nodes_share_a_source(tmp_path):
    for f in range(2):
        write_parquet(tmp_path / f"p{f}.parquet", f * 300, 300)
    out = tmp_path / "out"
    first = optimize(
        row_id, sources.parquet(tmp_path), out, chunk_size=9, num_workers=1, num_nodes=2, node_rank=0, verbose=False
    )
    assert not first.published
    second = optimize(
        row_id, sources.parquet(tmp_path), out, chunk_size=9, num_workers=1, num_nodes=2, node_rank=1, verbose=False
    )
    assert second.published and ids_of(out) == list(range(600))


def _start(config: dict, hold_after: int | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent.parent / "src"))
    if hold_after is not None:
        env["SOURCES_CHILD_HOLD_AFTER"] = str(hold_after)
    return subprocess.Popen(
        [sys.executable, CHILD, json.dumps(config)], env=env, start_new_session=True, stderr=subprocess.PIPE, text=True
    )


def _records(out: str) -> int:
    return committed_records(out) if os.path.isdir(out) else 0


def _kill_and_rerun(config: dict, rng: random.Random, kills: int) -> int:
    """Start the call with each worker held after a random number of outputs (it waits in fn
    until killed), SIGKILL its whole process group once it committed a record more, repeat;
    then let it finish. The kills land mid-run and after a commit at any load: the events are
    waited for, the moment is random only in the work done. Returns the kills that landed."""
    out = config["output_dir"]
    landed = 0
    for _ in range(kills):
        before = _records(out)
        proc = _start(config, hold_after=rng.randint(6, 20))
        assert wait_for(lambda p=proc, n=before: p.poll() is not None or _records(out) > n, 300), "no record committed"
        if proc.poll() is not None:  # fewer inputs left than a worker makes before it is held
            assert proc.returncode == 0, proc.stderr.read()[-2000:] if proc.stderr else ""
            return landed
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        landed += 1
    proc = _start(config)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    return landed


def test_a_parquet_run_killed_at_random_moments_is_exactly_once_and_a_changed_file_is_named(tmp_path):
    for f in range(3):
        write_parquet(tmp_path / f"p{f}.parquet", f * 150, 150, row_group=40)
    out = tmp_path / "out"
    config = {"kind": "parquet", "path": str(tmp_path), "output_dir": str(out), "sleep": 0.004, "chunk_size": 5}
    assert _kill_and_rerun(config, random.Random(17), 4) == 4  # each after a commit, none after the end
    assert ids_of(out) == list(range(450))
    # an interrupted run, then a file rewritten: the resume names it
    out2 = tmp_path / "out2"
    proc = _start({**config, "output_dir": str(out2)}, hold_after=10)
    assert wait_for(lambda: proc.poll() is not None or _records(str(out2)) > 0, 300), "no record committed"
    assert proc.poll() is None, proc.stderr.read()[-2000:] if proc.stderr else ""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.01)
    write_parquet(tmp_path / "p1.parquet", 150, 150, row_group=40)
    with pytest.raises(RunMismatchError, match=r"p1\.parquet changed since the interrupted run"):
        optimize(row_id, sources.parquet(tmp_path, columns=["id"]), out2, chunk_size=5, verbose=False)


def test_incremental_over_a_growing_listing_survives_sigkill(tmp_path):
    src = tmp_path / "incoming"
    src.mkdir()
    for i in range(20):
        (src / f"{i:03d}.bin").write_bytes(bytes([i]))
    out = tmp_path / "out"
    config = {"kind": "files", "path": str(src), "output_dir": str(out), "chunk_size": 3}
    _kill_and_rerun(config, random.Random(1), 0)
    with pytest.raises(DatasetExistsError, match="mode='incremental'"):
        optimize(lambda r: {"name": r.path}, sources.files(src), out, chunk_size=3, verbose=False)
    for i in range(20, 80):
        (src / f"{i:03d}.bin").write_bytes(bytes([i]))
    config.update(mode="incremental", sleep=0.05)
    landed = _kill_and_rerun(config, random.Random(5), 4)
    assert landed >= 1
    assert ids_of(out, "name") == [f"{i:03d}.bin" for i in range(80)]
    proc = _start(config)  # nothing new: a no-op
    assert proc.wait(timeout=120) == 0
    assert ids_of(out, "name") == [f"{i:03d}.bin" for i in range(80)]


def test_parquet_on_s3_reads_through_storage_options(tmp_path, s3_url, s3_storage_options):
    import boto3

    client = boto3.client("s3", **s3_storage_options)
    bucket, prefix = s3_url[len("s3://") :].split("/", 1)
    for f in range(2):
        path = tmp_path / f"p{f}.parquet"
        write_parquet(path, f * 100, 100, row_group=30)
        client.put_object(Bucket=bucket, Key=f"{prefix}/raw/p{f}.parquet", Body=path.read_bytes())
    source = sources.parquet(f"{s3_url}/raw/", columns=["id"], storage_options=s3_storage_options)
    assert len(source) == 200 and source[150] == {"id": 150}
    out = f"{s3_url}/ds"
    optimize(row_id, source, out, chunk_size=16, num_workers=2, storage_options=s3_storage_options, verbose=False)
    assert ids_of(out, storage_options=s3_storage_options) == list(range(200))
    import gzip

    lines = b"".join(json.dumps({"n": i}).encode() + b"\n" for i in range(3000))
    client.put_object(Bucket=bucket, Key=f"{prefix}/logs/a.jsonl", Body=lines)
    client.put_object(Bucket=bucket, Key=f"{prefix}/logs/b.jsonl.gz", Body=gzip.compress(lines[:600]))
    logs = sources.jsonl(f"{s3_url}/logs/", storage_options=s3_storage_options)
    assert len(logs) == 3000 + lines[:600].count(b"\n")
    assert logs[2500] == {"n": 2500} and logs[3000] == {"n": 0} and logs[-1]["n"] == lines[:600].count(b"\n") - 1
    refs = sources.files(f"{s3_url}/raw", pattern="*.parquet", storage_options=s3_storage_options)
    assert [r.path for r in refs] == [f"{s3_url}/raw/p0.parquet", f"{s3_url}/raw/p1.parquet"]
    assert refs[0].read()[:4] == b"PAR1" and refs[1].version


def fails_midway(ref):
    data = ref.read()
    for k in range(3):
        if k == 2 and data == b"\x05" and os.path.exists(ref.path + ".fail"):
            raise RuntimeError("a transient failure after two outputs")
        yield {"name": ref.path.rsplit("/", 1)[-1], "k": k}


def test_incremental_retries_an_input_that_failed_midway_without_repeating_its_outputs(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(8):
        (src / f"{i:02d}.bin").write_bytes(bytes([i]))
    (tmp_path / "in" / "05.bin.fail").write_text("x")  # not a .bin: not an input
    out = tmp_path / "out"
    first = optimize(
        fails_midway,
        sources.files(src, pattern="*.bin"),
        out,
        chunk_size=1,
        num_workers=2,
        on_error="skip",
        verbose=False,
    )
    assert first.failed == 1
    os.remove(tmp_path / "in" / "05.bin.fail")
    second = optimize(
        fails_midway,
        sources.files(src, pattern="*.bin"),
        out,
        chunk_size=1,
        num_workers=2,
        mode="incremental",
        verbose=False,
    )
    assert second.items == 1  # only the third output of 05.bin: its first two are in the dataset
    ds = StreamingDataset(str(out))
    pairs = sorted((ds[i]["name"], ds[i]["k"]) for i in range(len(ds)))
    assert pairs == sorted((f"{i:02d}.bin", k) for i in range(8) for k in range(3))


def square(i):
    return {"i": i}


def test_a_dataset_without_recorded_identities_takes_the_tail_of_a_longer_input_list(tmp_path):
    import shutil

    out = tmp_path / "out"
    optimize(square, list(range(30)), out, chunk_size=4, num_workers=2, verbose=False)
    shutil.rmtree(out / ".shardwright" / "inputs")  # as an older shardwright left it
    with pytest.raises(DatasetExistsError, match="no record of which inputs it holds"):
        optimize(square, [*range(5, 40)], out, chunk_size=4, num_workers=2, mode="incremental", verbose=False)
    result = optimize(square, list(range(40)), out, chunk_size=4, num_workers=2, mode="incremental", verbose=False)
    assert result.items == 10 and "tail is appended" in result.note
    assert ids_of(out, "i") == list(range(40))
    again = optimize(square, list(range(40)), out, chunk_size=4, num_workers=2, mode="incremental", verbose=False)
    assert again.items == 0 and again.note.startswith("nothing new")  # now recorded


def test_the_parquet_to_tokens_example_runs(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "parquet_to_tokens.py"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent.parent / "src"), TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "blocks of 128 tokens; the first starts with 'document 0-0: the quick" in proc.stdout
    assert "2,000 input(s) already in the dataset are skipped" in proc.stderr + proc.stdout
    assert "after the incremental run:" in proc.stdout


@pytest.mark.parametrize("cloud", ["gcs", "azure"])
def test_parquet_and_files_sources_on_gcs_and_azure(tmp_path, request, cloud):
    from shardwright.storage import open_storage

    url = request.getfixturevalue(f"{cloud}_url")
    options = request.getfixturevalue(f"{cloud}_storage_options")
    writer = open_storage(url, options)
    for f in range(2):
        path = tmp_path / f"p{f}.parquet"
        write_parquet(path, f * 60, 60, row_group=25)
        writer.write_bytes(f"raw/p{f}.parquet", path.read_bytes())
    source = sources.parquet(f"{url}/raw/", columns=["id"], storage_options=options)
    assert len(source) == 120 and source[70] == {"id": 70}
    optimize(row_id, source, tmp_path / "out", chunk_size=16, num_workers=2, verbose=False)
    assert ids_of(tmp_path / "out") == list(range(120))
    refs = sources.files(f"{url}/raw", pattern="*.parquet", storage_options=options)
    assert [r.path.rsplit("/", 1)[-1] for r in refs] == ["p0.parquet", "p1.parquet"]
    assert (
        refs[1].read()[:4] == b"PAR1" and refs[1].version and refs[1].size == (tmp_path / "p1.parquet").stat().st_size
    )

"""Run state and history kept in the output itself: how a run stopped (failed on which input,
user or system error, interrupted by which signal), which input each worker of a live run is
on, the bounded history of attempts, and ``shardwright runs`` / ``history`` / ``clean``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid

import pytest

from shardwright import optimize
from shardwright.errors import FnError
from shardwright.protocol.history import MAX_ATTEMPTS, attempt_record, read_history, record_attempt
from shardwright.protocol.layout import HISTORY_PREFIX
from shardwright.storage import MemoryStorage, open_storage
from support.helpers import committed_records, kill_group, run_child, start_child, wait_for


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


def status_json(out) -> dict:
    shown = cli("status", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def fails_at_30(i):
    if i == 30:
        raise ValueError("bad input 30")
    return {"i": i}


def test_an_fn_error_is_saved_as_a_user_failure_naming_the_input(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FnError):
        optimize(fails_at_30, list(range(50)), out, chunk_size=5, num_workers=1, num_shards=1, verbose=False)
    report = status_json(out)
    assert report["state"] == "failed"
    assert report["stop_reason"] == "user error: FnError on input 30"
    error = report["last_attempt"]["error"]
    assert error["type"] == "FnError" and error["kind"] == "user" and error["input_index"] == 30
    assert "bad input 30" in error["message"] and "worker traceback" not in error["message"]
    text = cli("status", str(out)).stdout
    assert "state:    failed (user error: FnError on input 30)" in text and "bad input 30" in text, text


def test_a_dead_worker_is_a_system_failure(tmp_path):
    out = str(tmp_path / "out")
    done = run_child(
        {"kind": "plain", "n": 40, "chunk_size": 5, "num_workers": 1, "num_shards": 1, "output_dir": out},
        CRASH_DIE_AT="17",
    )
    assert done.returncode != 0
    report = status_json(out)
    assert report["state"] == "failed"
    assert report["stop_reason"] == "system error: WorkerDiedError", report["stop_reason"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_is_an_interruption_naming_the_signal(tmp_path, sig):
    out = str(tmp_path / "out")
    proc = start_child(
        {"kind": "plain", "n": 3000, "chunk_size": 5, "sleep": 0.01, "num_workers": 2, "output_dir": out}
    )
    assert wait_for(lambda: committed_records(out) >= 2, 60)
    kill_group(proc, sig)
    proc.communicate(timeout=60)
    report = status_json(out)
    assert report["state"] == "interrupted"
    assert report["stop_reason"] == f"interrupted ({sig.name})"


def test_a_sigkilled_run_is_interrupted_with_no_attempt_record(tmp_path):
    out = str(tmp_path / "out")
    proc = start_child({"kind": "plain", "n": 3000, "chunk_size": 5, "sleep": 0.01, "output_dir": out})
    assert wait_for(lambda: committed_records(out) >= 2, 60)
    kill_group(proc, signal.SIGKILL)
    proc.wait()
    report = status_json(out)
    assert report["state"] == "interrupted" and report["last_attempt"] is None


def test_a_live_run_shows_which_input_each_worker_is_on(tmp_path):
    out = str(tmp_path / "out")
    proc = start_child(
        {"kind": "plain", "n": 4000, "chunk_size": 5, "sleep": 0.01, "num_workers": 2, "output_dir": out},
        SHARDWRIGHT_LEASE_TTL="2",
    )  # a heartbeat every 0.5 s
    try:

        def workers_shown() -> list[int]:
            report = status_json(out) if committed_records(out) else {}
            leases = report.get("leases") or []
            return leases[0]["current_inputs"] if leases and leases[0]["live"] else []

        seen: list[int] = []

        def two_workers_shown() -> bool:  # one read per check: a loaded machine may miss a heartbeat
            seen[:] = workers_shown()
            return len(seen) == 2 and min(seen) >= 0

        assert wait_for(two_workers_shown, 60)
        positions = list(seen)
        assert all(0 <= i < 4000 for i in positions) and positions[0] != positions[1]
        text = cli("status", out).stdout
        assert "state:    running" in text and "workers:  worker 0: input" in text, text
    finally:
        kill_group(proc, signal.SIGKILL)
        proc.wait()


def test_history_records_every_attempt_with_how_far_it_got(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FnError):
        optimize(fails_at_30, list(range(50)), out, chunk_size=5, num_workers=1, num_shards=1, verbose=False)
    optimize(lambda i: {"i": i}, list(range(50)), out, chunk_size=5, num_workers=1, num_shards=1, verbose=False)
    attempts = read_history(open_storage(out))
    assert [a.ended for a in attempts] == ["failed", "published"]
    first, second = attempts
    assert first.run_id == second.run_id and (first.inputs_done_before, first.inputs_done_after) == (0, 30)
    assert (second.inputs_done_before, second.inputs_done_after, second.items_written) == (30, 50, 20)
    assert status_json(out)["state"] == "complete"
    shown = cli("history", str(out))
    assert shown.returncode == 0 and "failed (user error: FnError on input 30)" in shown.stdout
    assert "published" in shown.stdout


def test_history_is_bounded():
    name = f"hist-{uuid.uuid4().hex[:8]}"
    storage = open_storage(f"memory://{name}")
    try:
        for k in range(MAX_ATTEMPTS + 7):
            record_attempt(
                storage,
                attempt_record(
                    attempt_id=f"a{k:04d}",
                    run_id="r",
                    mode="create",
                    node_rank=0,
                    num_nodes=1,
                    started_at=1_000_000 + k,
                    inputs_total=1,
                    inputs_done_before=0,
                    inputs_done_after=1,
                    items_written=1,
                    ended="published",
                ),
            )
        keys = storage.list(HISTORY_PREFIX)
        assert len(keys) == MAX_ATTEMPTS
        assert [a.attempt_id for a in read_history(storage)][0] == "a0007"  # the 7 oldest were dropped
        storage.write_bytes(keys[-1], b"not json")  # a damaged file is skipped, never an error
        assert len(read_history(storage)) == MAX_ATTEMPTS - 1
    finally:
        MemoryStorage.drop(name)


def test_runs_lists_every_output_under_a_root_with_its_state(tmp_path):
    optimize(lambda i: {"i": i}, list(range(10)), tmp_path / "done", chunk_size=5, verbose=False)
    with pytest.raises(FnError):
        optimize(
            fails_at_30,
            list(range(50)),
            tmp_path / "team" / "broken",
            chunk_size=5,
            num_workers=1,
            num_shards=1,
            verbose=False,
        )
    (tmp_path / "unrelated").mkdir()
    (tmp_path / "unrelated" / "notes.txt").write_text("not a dataset")
    shown = cli("runs", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{tmp_path}/done  complete") and "10 items" in lines[0]
    assert lines[1].startswith(f"{tmp_path}/team/broken  failed") and "FnError on input 30" in lines[1]
    rows = json.loads(cli("runs", str(tmp_path), "--json").stdout)
    assert [r["state"] for r in rows] == ["complete", "failed"]


def test_clean_discards_a_failed_append_and_keeps_the_dataset(tmp_path):
    out = tmp_path / "out"
    optimize(lambda i: {"i": i}, list(range(10)), out, chunk_size=5, verbose=False)
    with pytest.raises(FnError):
        optimize(
            fails_at_30,
            list(range(10, 60)),
            out,
            chunk_size=5,
            num_workers=1,
            num_shards=1,
            mode="append",
            verbose=False,
        )
    assert status_json(out)["state"] == "failed"
    cleaned = cli("clean", str(out))
    assert cleaned.returncode == 0, cleaned.stderr
    report = status_json(out)
    assert report["state"] == "complete" and report["published"]
    from shardwright import StreamingDataset

    assert [item["i"] for item in StreamingDataset(out)] == list(range(10))


def test_clean_refuses_while_a_run_is_live(tmp_path):
    out = str(tmp_path / "out")
    proc = start_child({"kind": "plain", "n": 4000, "chunk_size": 5, "sleep": 0.01, "output_dir": out})
    try:
        assert wait_for(lambda: committed_records(out) >= 1, 60)
        refused = cli("clean", out)
        assert refused.returncode == 2 and "live" in refused.stderr, refused.stderr
    finally:
        kill_group(proc, signal.SIGKILL)
        proc.wait()


def test_runs_lists_outputs_under_an_s3_prefix(s3_url, s3_storage_options):
    optimize(
        lambda i: {"i": i},
        list(range(10)),
        f"{s3_url}/a",
        chunk_size=5,
        storage_options=s3_storage_options,
        verbose=False,
    )
    with pytest.raises(FnError):
        optimize(
            fails_at_30,
            list(range(40)),
            f"{s3_url}/b",
            chunk_size=5,
            num_workers=1,
            num_shards=1,
            storage_options=s3_storage_options,
            verbose=False,
        )
    shown = cli("runs", s3_url, "--storage-options", json.dumps(s3_storage_options))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["complete", "failed"], lines
    assert s3_storage_options["aws_secret_access_key"] not in shown.stdout

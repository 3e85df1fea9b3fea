"""Real processes, real signals: every run ends with every sample exactly once, in order."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from shardwright.protocol.layout import MANIFEST_KEY
from support.helpers import (
    assert_exactly_once,
    children_of,
    committed_records,
    finish,
    group_pids,
    kill_group,
    kill_loop,
    run_child,
    start_child,
    wait_for,
)

pytestmark = pytest.mark.slow  # real processes, kill loops: minutes, not seconds


@pytest.mark.parametrize("kind", ["plain", "filtering", "generator"])
def test_random_sigkill_loop(tmp_path, kind):
    """SIGKILL the whole process group at random moments, resume with varying worker counts."""
    rng = random.Random(f"kill-loop-{kind}")
    config = {"kind": kind, "n": 2500, "chunk_size": 7, "sleep": 0.002, "output_dir": str(tmp_path / "out")}
    kills = kill_loop(config, rng, kills_wanted=12, check=lambda: None)
    print(f"{kind}: {kills} SIGKILLs of the process group")
    assert kills >= 6, f"only {kills} kills landed: the workload is too small to test anything"
    config["num_workers"] = 2
    finish(config)
    assert_exactly_once(config)
    assert not (Path(config["output_dir"]) / MANIFEST_KEY).exists()


@pytest.mark.parametrize("point", ["after_chunk", "after_index", "after_run_record"])
def test_crash_at_each_commit_point(tmp_path, point):
    """A crash between the protocol's writes (chunk/record, index/cleanup) loses and repeats nothing."""
    config = {"kind": "generator", "n": 120, "chunk_size": 4, "output_dir": str(tmp_path / "out"), "num_workers": 2}
    crashed = run_child(config, SHARDWRIGHT_CRASH_AT=point)
    assert crashed.returncode != 0
    finish(config)
    assert_exactly_once(config)


def held_config(tmp_path, kind: str, n: int, **more) -> dict:
    """A run of ``n`` inputs in 8 shards, each of which commits its first 40 inputs (4 chunks)
    and then holds its step on a gate file until the test releases it (``gate``): the run is
    certainly still going when the test acts on it, at any load."""
    config = {"kind": kind, "n": n, "chunk_size": 10, "num_shards": 8, "output_dir": str(tmp_path / "out")}
    config |= {"gate": str(tmp_path / "gate"), "gate_period": n // 8, "gate_after": 40, **more}
    return config


def release(config: dict) -> None:
    Path(config["gate"]).write_text("")


def test_one_worker_sigkilled(tmp_path):
    config = held_config(tmp_path, "plain", 4000, sleep=0.002)
    proc = start_child(config)
    assert wait_for(lambda: proc.poll() is not None or committed_records(config["output_dir"]) >= 3, 60)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    workers = children_of(proc.pid)
    assert workers, "no worker processes found"
    os.kill(workers[0], signal.SIGKILL)
    release(config)  # the other worker goes on to its next input, where it sees the stop
    _, err = proc.communicate(timeout=120)  # a run a dead worker made hang would never end
    assert proc.returncode not in (0, None)
    assert "WorkerDiedError" in err and "SIGKILL" in err and "while processing input" in err, err[-2000:]
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    finish(config)
    assert_exactly_once(config)


def test_main_process_sigkilled_leaves_no_orphans(tmp_path):
    config = held_config(tmp_path, "plain", 4000, sleep=0.002)
    proc = start_child(config)
    assert wait_for(lambda: proc.poll() is not None or committed_records(config["output_dir"]) >= 3, 60)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.kill(proc.pid, signal.SIGKILL)  # the workers are held on the gate: alive, mid-shard
    proc.wait()
    assert wait_for(lambda: not group_pids(proc.pid), 10), "workers outlived the main process"
    before = sorted(os.listdir(config["output_dir"]))
    release(config)  # a worker that survived would now write on
    time.sleep(0.5)  # a window for a write that must not come (nothing to wait for)
    assert sorted(os.listdir(config["output_dir"])) == before, "something kept writing after the main process died"
    finish(config)
    assert_exactly_once(config)


@pytest.mark.parametrize("sig,code,to_group", [(signal.SIGINT, 130, True), (signal.SIGTERM, 143, False)])
def test_sigint_sigterm_stop_cleanly(tmp_path, sig, code, to_group):
    config = held_config(tmp_path, "generator", 3200, sleep=0.001)
    proc = start_child(config)
    assert wait_for(lambda: proc.poll() is not None or committed_records(config["output_dir"]) >= 3, 60)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    if to_group:
        kill_group(proc, sig)  # what a terminal's Ctrl-C does
    else:
        os.kill(proc.pid, sig)  # what a scheduler's SIGTERM to the job does
    release(config)  # the held workers go on to their next input, where they see the stop
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]  # a run that missed the signal would end with 0
    assert "Interrupted:" in err and "Rerun the same call to resume." in err
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    finish(config)
    assert_exactly_once(config)


def test_second_ctrl_c_aborts_at_once(tmp_path):
    config = {"kind": "plain", "n": 400, "chunk_size": 5, "sleep": 0.002, "output_dir": str(tmp_path / "out")}
    # input 150 sleeps an hour and a stopping run waits an hour for a stuck fn: once the test
    # saw that input start (its mark file), only an abort ends the run; a run that only
    # stopped gracefully would hang, and the 240 s below only stops such a hang (no bound on
    # how fast the abort is)
    stuck = tmp_path / "stuck"
    proc = start_child(config, CRASH_SLEEP_AT="150", CRASH_STUCK_MARK=str(stuck), SHARDWRIGHT_STOP_GRACE="3600")
    assert wait_for(lambda: proc.poll() is not None or stuck.exists(), 300), "input 150 never started"
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    kill_group(proc, signal.SIGINT)
    # Ctrl-C again, every half second until the run ends: two SIGINTs sent while the process
    # waits for a CPU are one pending signal, so "the second" is not a single send at any load
    give_up = time.monotonic() + 240  # only stops a hang (the counterfactual never ends)
    while proc.poll() is None and time.monotonic() < give_up:
        time.sleep(0.5)
        kill_group(proc, signal.SIGINT)
    if proc.poll() is None:
        kill_group(proc)
        proc.communicate()
        raise AssertionError("the second Ctrl-C did not abort the run (it waited for the stuck input)")
    proc.communicate()
    assert proc.returncode != 0
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    finish(config)
    assert_exactly_once(config)


def test_fn_errors_on_successive_runs(tmp_path):
    config = {
        "kind": "generator",
        "n": 300,
        "chunk_size": 6,
        "sleep": 0.002,
        "output_dir": str(tmp_path / "out"),
        "num_workers": 2,
    }
    for fail_at in (60, 150, 151, 280):
        failed = run_child(config, CRASH_FAIL_AT=str(fail_at))
        assert failed.returncode != 0
        assert "FnError" in failed.stderr and f"input {fail_at}" in failed.stderr, failed.stderr[-2000:]
        assert "planned failure" in failed.stderr and "Traceback" in failed.stderr
    finish(config)
    assert_exactly_once(config)


def test_worker_os_exit_is_an_error_not_a_hang(tmp_path):
    config = {"kind": "plain", "n": 300, "chunk_size": 6, "output_dir": str(tmp_path / "out"), "num_workers": 2}
    died = run_child(config, timeout=60, CRASH_DIE_AT="123")
    assert died.returncode != 0
    assert "WorkerDiedError" in died.stderr and "input 123" in died.stderr, died.stderr[-2000:]
    finish(config)
    assert_exactly_once(config)

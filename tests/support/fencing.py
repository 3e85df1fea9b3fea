"""The paused-writer round of the fencing tests (issue 8), shared by the local, S3, GCS and
Azure versions: run A is SIGSTOPped past its lease TTL, run B (the same call) takes over, A is
SIGCONTed while B writes; B publishes every input exactly once and A fails.

Both runs hold their steps on a gate file (crash_child's ``gate``) past the first third of the
inputs, until the test releases it together with A: so A is certainly still running when it is
paused and B certainly still writing when A wakes, at any load."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

from .helpers import assert_exactly_once, committed_records, finish, kill_group, start_child, wait_for

TTL = "2"  # seconds: SHARDWRIGHT_LEASE_TTL for both runs


def lease_pid(url: str, options: dict | None) -> int | None:
    """The pid named by the run's lease (None while there is none)."""
    from shardwright.storage import open_storage

    try:
        return json.loads(open_storage(url, options).read_bytes(".shardwright/leases/node-0.json")).get("pid")
    except (FileNotFoundError, ValueError):
        return None


def held(config: dict, gate: Path) -> dict:
    """``config`` with its inputs from the first third on held until ``gate`` exists: the
    first third commits dozens of records (one chunk each), more than A waits for."""
    return config | {"gate": str(gate), "gate_period": config["n"], "gate_after": config["n"] // 3}


def pause_and_take_over(config: dict, rng: random.Random, options: dict | None) -> tuple[int, str, int, str]:
    """A starts; once it has committed, the whole group is stopped past the TTL; B starts and
    takes over; A continues while B writes. ``config`` comes from :func:`held`. Returns
    (A's exit code, A's stderr, B's ...)."""
    url, gate = config["output_dir"], Path(config["gate"])
    a = start_child(config, SHARDWRIGHT_LEASE_TTL=TTL, SHARDWRIGHT_COMMIT_ROUND="1")
    b = None
    try:
        assert wait_for(lambda: a.poll() is not None or committed_records(url, options) >= rng.randint(2, 12), 120)
        assert a.poll() is None, a.communicate()[1][-3000:]  # held on the gate: it cannot have finished
        kill_group(a, signal.SIGSTOP)
        time.sleep(float(TTL) + 1.0 + rng.random())  # past the TTL: A's lease is stale
        b = start_child(config, SHARDWRIGHT_LEASE_TTL=TTL, SHARDWRIGHT_COMMIT_ROUND="1")
        assert wait_for(lambda: lease_pid(url, options) == b.pid or b.poll() is not None, 120)
        assert b.poll() is None, b.communicate()[1][-3000:]  # held on the gate too
        time.sleep(rng.uniform(0.0, 1.5))  # B has taken the lease and is writing (up to the gate)
    except BaseException:
        for proc in (a, b):
            if proc is not None:
                kill_group(proc, signal.SIGCONT)
                kill_group(proc)
        raise
    gate.write_text("")  # both go on: B cannot have finished before A wakes
    kill_group(a, signal.SIGCONT)  # A's workers and committer wake up mid-round
    _, a_err = a.communicate(timeout=120)
    _, b_err = b.communicate(timeout=120)
    return a.returncode, a_err, b.returncode, b_err


def check_round(config: dict, options: dict | None, result: tuple[int, str, int, str]) -> None:
    a_code, a_err, b_code, b_err = result
    assert b_code == 0, b_err[-3000:]
    assert a_code != 0, "A published after its lease was taken over"
    assert "LeaseLostError" in a_err or "taken over" in a_err, a_err[-3000:]
    assert_exactly_once(config, options)  # what B published, read back
    finish(config)  # rerunning the same call is a no-op and changes nothing
    assert_exactly_once(config, options)

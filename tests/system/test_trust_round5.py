"""Trust round 5 (issue 33's leftovers): a paused run that wakes after another run finished
the dataset says so. Real processes and real signals."""

from __future__ import annotations

import signal
import time

from support.fencing import TTL, lease_pid
from support.helpers import assert_exactly_once, committed_records, kill_group, run_child, start_child, wait_for


def test_paused_run_told_another_run_finished(tmp_path):
    """A commits, is held at a gate and stopped past its lease TTL; B (the same call) runs to the
    end and publishes; A wakes. A must stop, saying the dataset is complete and nothing needs
    doing (round 4 told it to rerun because 'the storage does not list what was written')."""
    gate = tmp_path / "gate"
    config = {
        "kind": "plain",
        "n": 40,
        "chunk_size": 2,
        "num_workers": 2,
        "output_dir": str(tmp_path / "out"),
        "gate": str(gate),
        "gate_period": 40,
        "gate_after": 6,
    }
    a = start_child(config, SHARDWRIGHT_LEASE_TTL=TTL, SHARDWRIGHT_COMMIT_ROUND="1")
    try:
        assert wait_for(lambda: a.poll() is not None or committed_records(config["output_dir"]) >= 1, 120)
        assert a.poll() is None, a.communicate()[1][-2000:]
        kill_group(a, signal.SIGSTOP)  # held at the gate: it cannot have finished
        gate.touch()
        time.sleep(float(TTL) + 1.0)  # past the TTL: A's leases are stale (what the case is about)
        b = run_child(config, SHARDWRIGHT_LEASE_TTL=TTL, SHARDWRIGHT_COMMIT_ROUND="1")
        assert b.returncode == 0, b.stderr[-3000:]
        assert lease_pid(config["output_dir"], None) is None  # B finished and let go
    finally:
        kill_group(a, signal.SIGCONT)
    _, a_err = a.communicate(timeout=120)
    assert a.returncode != 0, "A published after its lease was taken over"
    last = a_err.strip().splitlines()[-1]
    assert "another run finished and published" in last, a_err[-3000:]
    assert "nothing needs doing" in last and "40 items" in last, last
    assert "does not list" not in a_err and "Rerun" not in last
    assert_exactly_once(config)  # what B published, untouched by A's late wake

"""Several nodes on one output without Slurm: explicit num_nodes/node_rank, run as real processes."""

from __future__ import annotations

import pytest

from shardwright import ConcurrentRunError, optimize
from support.crash_child import expected
from support.helpers import committed_records, kill_group, read_pairs, run_child, start_child, wait_for


def _square(i):
    return {"i": i}


def test_two_nodes_one_after_the_other_publish_once(tmp_path):
    out = str(tmp_path / "out")
    config = {"kind": "generator", "n": 300, "chunk_size": 4, "output_dir": out, "num_workers": 2}
    first = run_child(config, DATA_OPTIMIZER_NODE_RANK="1", DATA_OPTIMIZER_NUM_NODES="2")
    assert first.returncode == 0, first.stderr[-2000:]
    assert not (tmp_path / "out" / "index.json").exists(), "node 1 alone must not publish"
    second = run_child(config, DATA_OPTIMIZER_NODE_RANK="0", DATA_OPTIMIZER_NUM_NODES="2")
    assert second.returncode == 0, second.stderr[-2000:]
    assert read_pairs(out) == expected("generator", 300)


def test_a_node_with_another_node_count_is_refused_while_a_peer_runs(tmp_path):
    out = str(tmp_path / "out")
    config = {"kind": "plain", "n": 3000, "chunk_size": 5, "sleep": 0.003, "output_dir": out, "num_workers": 1}
    # the peer's inputs from 500 on wait for a gate that never opens: it is still running when
    # the other node comes, at any load
    config |= {"gate": str(tmp_path / "gate"), "gate_period": 3000, "gate_after": 500}
    peer = start_child(config, DATA_OPTIMIZER_NODE_RANK="0", DATA_OPTIMIZER_NUM_NODES="2")
    try:
        assert wait_for(lambda: peer.poll() is not None or committed_records(out) >= 1, 120)
        assert peer.poll() is None, peer.communicate()[1][-3000:]
        with pytest.raises(ConcurrentRunError, match="same number of nodes"):
            optimize(_square, list(range(3000)), out, chunk_size=5, num_nodes=3, node_rank=1, verbose=False)
    finally:
        kill_group(peer)
        peer.wait()

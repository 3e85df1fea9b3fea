"""Pods of a Kubernetes Indexed Job, emulated by local processes carrying the environment a
pod gets (JOB_COMPLETION_INDEX, plus SHARDWRIGHT_NUM_NODES and SHARDWRIGHT_JOB_NAME from the
generated manifest): each has its own host identity (k8s:{job}/{index}), so no pod judges
another by pid. One is SIGKILLed mid-run (a node lost, a preemption) and restarted with the
same index, as the Job controller does; it takes its own leases and claims over at once (the
lease TTL is 120 s here) and the dataset holds every input exactly once."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from shardwright.protocol.status import read_status
from shardwright.storage import open_storage
from support.helpers import assert_exactly_once, committed_records, kill_group, start_child, wait_for

pytestmark = pytest.mark.slow
PODS = 3


def pod_env(index: int, job: str = "prep") -> dict:
    return {
        "JOB_COMPLETION_INDEX": str(index),
        "SHARDWRIGHT_NUM_NODES": str(PODS),
        "SHARDWRIGHT_JOB_NAME": job,
        "SHARDWRIGHT_LEASE_TTL": "120",
    }


def config_for(output_dir: str, storage_options: dict | None = None, gate: str | None = None) -> dict:
    """900 inputs in 12 shards; with ``gate`` (a path) each shard commits its first 30 inputs
    and then holds its step until that file exists, so every pod is still going when the
    test kills one, at any load."""
    config = {
        "kind": "located",
        "n": 900,
        "chunk_size": 10,
        "sleep": 0.01,
        "num_workers": 1,
        "num_shards": 12,
        "output_dir": output_dir,
        "extra": {"shared_output": True},
    }
    if storage_options:
        config["storage_options"] = storage_options
    if gate:
        config |= {"gate": gate, "gate_period": 75, "gate_after": 30}
    return config


def run_pods_with_one_killed(config: dict, options: dict | None) -> None:
    pods = {i: start_child(config, **pod_env(i)) for i in range(PODS)}
    storage = open_storage(config["output_dir"], options)

    def pod_1_is_writing() -> bool:
        # on a loaded machine pods 0 and 2 may commit 6 records before pod 1 claims its first
        # shard: kill it only once it holds a shard's claim (the case under test)
        leases = read_status(storage).leases
        return any(lease.shard is not None and lease.host == "k8s:prep/1" for lease in leases)

    try:
        assert wait_for(lambda: committed_records(config["output_dir"], options) >= 3 and pod_1_is_writing(), 90), (
            "pod 1 never held a shard's claim while the run went on"
        )
        assert pods[1].poll() is None, pods[1].communicate()[1][-3000:]  # held on the gate: it cannot have finished
        status = read_status(storage)
        assert [n.node for n in status.nodes] == [0, 1, 2], "status shows each pod's progress"
        kill_group(pods[1], signal.SIGKILL)
        pods[1].communicate()
        Path(config["gate"]).write_text("")  # the held pods go on
        pods[1] = start_child(config, **pod_env(1))  # the Job controller's replacement, same index
        for index, pod in pods.items():
            _, err = pod.communicate(timeout=100)  # < the 120 s TTL: a takeover must not wait for it
            assert pod.returncode == 0, f"pod {index}: {err[-3000:]}"
    finally:
        for pod in pods.values():
            kill_group(pod)
    assert_exactly_once(config, options)
    from shardwright import StreamingDataset

    hosts = {item["host"] for item in StreamingDataset(config["output_dir"], storage_options=options)}
    assert hosts == {f"k8s:prep/{i}" for i in range(PODS)}


def test_pods_write_one_dataset_exactly_once_through_a_lost_pod(tmp_path):
    run_pods_with_one_killed(config_for(str(tmp_path / "out"), gate=str(tmp_path / "gate")), None)


def test_pods_on_s3(s3_url, s3_storage_options, tmp_path):
    run_pods_with_one_killed(config_for(s3_url, s3_storage_options, str(tmp_path / "gate")), s3_storage_options)


def test_a_local_output_dir_is_refused_on_several_pods_unless_shared(tmp_path):
    config = config_for(str(tmp_path / "out"))
    config["extra"] = {}
    pod = start_child(config, **pod_env(0))
    _, err = pod.communicate(timeout=60)
    assert pod.returncode != 0 and "shared_output=True" in err, err[-2000:]
    assert not (tmp_path / "out" / ".shardwright" / "manifest.json").exists()

"""`shardwright k8s manifest`: the Indexed Job it prints is a valid batch/v1 Job for the
kubernetes client's own models (every field known and of the right type), and it says what
the pods need: the index mode, the node count, a failure policy that does not count
disruptions, credentials only by reference."""

from __future__ import annotations

import json

import pytest

from shardwright.cluster.kubernetes import JobSpec, job_manifest
from shardwright.engine.planning import KUBERNETES, node_identity
from shardwright.errors import UsageError


def manifest_text(capsys, *args: str) -> str:
    from shardwright.cli.main import main

    assert main(["k8s", "manifest", *args]) == 0
    return capsys.readouterr().out


def test_the_manifest_deserializes_into_a_v1job_and_round_trips(capsys):
    kubernetes = pytest.importorskip("kubernetes")  # requirements-test.txt; absent only in the core-only venvs

    text = manifest_text(
        capsys,
        "--completions", "3", "--image", "registry.example/prep:1", "--name", "prep", "--cpu", "2",
        "--memory", "8Gi", "--secret", "s3-credentials", "--output-dir", "s3://bucket/ds",
        "--env", "HF_HOME=/cache", "--", "python", "prepare.py", "--out", "s3://bucket/ds",
    )  # fmt: skip
    client = kubernetes.client.ApiClient()
    job = client.deserialize(text, "V1Job", "application/json")
    assert isinstance(job, kubernetes.client.V1Job)
    # unknown or mistyped fields would be dropped by the models: the round trip must be exact
    assert client.sanitize_for_serialization(job) == json.loads(text)
    spec = job.spec
    assert (spec.completion_mode, spec.completions, spec.parallelism) == ("Indexed", 3, 3)
    assert spec.backoff_limit_per_index == 3 and spec.pod_replacement_policy == "Failed"
    rule = spec.pod_failure_policy.rules[0]
    assert rule.action == "Ignore" and rule.on_pod_conditions[0].type == "DisruptionTarget"
    pod = spec.template.spec
    assert pod.restart_policy == "Never"
    container = pod.containers[0]
    env = {e.name: e.value for e in container.env}
    assert env["SHARDWRIGHT_NUM_NODES"] == "3" and env["SHARDWRIGHT_JOB_NAME"] == "prep"
    assert env["SHARDWRIGHT_OUTPUT_DIR"] == "s3://bucket/ds" and env["HF_HOME"] == "/cache"
    assert container.env_from[0].secret_ref.name == "s3-credentials"
    assert not any("SECRET" in e.name or "KEY" in e.name for e in container.env), "credentials only by reference"
    assert container.resources.requests == {"cpu": "2", "memory": "8Gi"}
    assert container.command == ["python", "prepare.py", "--out", "s3://bucket/ds"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"completions": 0}, "--completions"),
        ({"name": "Prep_Job"}, "not a valid Job name"),
        ({"command": []}, "after `--`"),
        ({"memory": "lots"}, "quantity"),
        ({"parallelism": 9}, "--parallelism"),
        ({"output_dir": "/data/out"}, "local path"),
        ({"env": {"SHARDWRIGHT_NUM_NODES": "2"}}, "set by the manifest"),
    ],
)
def test_mistakes_are_one_line_before_anything_is_printed(change, message):
    base = {"name": "prep", "image": "img", "command": ["python", "p.py"], "completions": 3}
    with pytest.raises(UsageError, match=message):
        job_manifest(JobSpec(**{**base, **change}))


def test_a_shared_volume_may_be_a_local_output_dir():
    spec = JobSpec("prep", "img", ["python", "p.py"], 3, output_dir="/data/out", shared_output=True)
    assert job_manifest(spec)["metadata"]["annotations"]["shardwright/output-dir"] == "/data/out"


def test_a_pod_reads_its_rank_from_the_completion_index():
    env = {"JOB_COMPLETION_INDEX": "2", "SHARDWRIGHT_NUM_NODES": "3"}
    node = node_identity(None, None, env)
    assert (node.rank, node.count, node.source) == (2, 3, KUBERNETES)
    litdata = node_identity(None, None, {"JOB_COMPLETION_INDEX": "1", "DATA_OPTIMIZER_NUM_NODES": "4"})
    assert (litdata.rank, litdata.count) == (1, 4)
    with pytest.raises(UsageError, match="SHARDWRIGHT_NUM_NODES"):
        node_identity(None, None, {"JOB_COMPLETION_INDEX": "1"})
    with pytest.raises(UsageError, match="out of range"):
        node_identity(None, None, {"JOB_COMPLETION_INDEX": "3", "SHARDWRIGHT_NUM_NODES": "3"})
    assert node_identity(1, 0, env).rank == 0, "explicit arguments still win"

"""Trust round 12 (docs/trust-round12.md): `k8s manifest` names, namespaces and env names with a
trailing newline (a regex `$` matches before one), and `--env SHARDWRIGHT_OUTPUT_DIR=...`
shadowing --output-dir in the pods."""

from __future__ import annotations

import pytest

from shardwright.cluster.kubernetes import JobSpec, job_manifest
from shardwright.errors import UsageError


def _spec(**fields) -> JobSpec:
    base = {"name": "j", "image": "img:1", "command": ["python", "x.py"], "completions": 2}
    return JobSpec(**(base | fields))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "ab\n"}, "--name"),
        ({"namespace": "ns\n"}, "--namespace"),
        ({"service_account": "sa\n"}, "--service-account"),
        ({"secret": "creds\n"}, "--secret"),
        ({"cpu": "2\n"}, "--cpu"),
        ({"memory": "8Gi\n"}, "--memory"),
        ({"env": {"FOO\n": "1"}}, "is not an environment variable name"),
    ],
)
def test_a_trailing_newline_is_not_a_valid_name(fields, named):
    """Before: every one of these was accepted and written into the manifest with its newline
    (kubectl then refuses the Job, far from the option that caused it)."""
    with pytest.raises(UsageError, match=named):
        _spec(**fields).validate()


def test_the_output_dir_variable_cannot_be_set_twice():
    """Before: `--output-dir s3://b/ds --env SHARDWRIGHT_OUTPUT_DIR=s3://other/x` wrote both
    entries; Kubernetes lets the later one win, so the pods wrote where --output-dir (and the
    Job's shardwright/output-dir annotation) did not say."""
    with pytest.raises(UsageError, match="SHARDWRIGHT_OUTPUT_DIR is set by the manifest from --output-dir"):
        _spec(output_dir="s3://b/ds", env={"SHARDWRIGHT_OUTPUT_DIR": "s3://other/x"}).validate()
    env = job_manifest(_spec(output_dir="s3://b/ds"))["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "SHARDWRIGHT_OUTPUT_DIR"] == ["s3://b/ds"]


def test_a_credential_path_of_other_characters_is_named_as_such():
    """An absolute path with non-ASCII letters was refused as "not an absolute file path"."""
    with pytest.raises(UsageError) as raised:
        _spec(env={"GOOGLE_APPLICATION_CREDENTIALS": "/var/sécret/kéy.json"}).validate()
    message = str(raised.value)
    assert "is not an absolute file path of plain characters" in message and "sécret" not in message, message

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


# --- JSON state nested deeper than the parser goes: a raw RecursionError before ---

NESTED = b"[" * 100_000 + b"]" * 100_000


def _interrupted(tmp_path):
    from shardwright import optimize
    from shardwright.errors import FnError

    def fn(i):
        if i == 7:
            raise ValueError("boom")
        return {"i": i}

    out = str(tmp_path / "out")
    with pytest.raises(FnError):
        optimize(fn, range(24), out, num_workers=1, chunk_size=2, num_shards=2, verbose=False)
    return out


def test_a_record_file_nested_deeper_than_json_goes_is_named_as_damaged(tmp_path):
    """Before: `RecursionError: maximum recursion depth exceeded while decoding a JSON array`,
    naming no file (local, GCS and Azure alike)."""
    from shardwright import optimize
    from shardwright.errors import CorruptStateError
    from shardwright.storage import open_storage
    from support.sealed_records import record_rounds, replace_round

    out = _interrupted(tmp_path)
    storage = open_storage(out)
    last = record_rounds(storage)[-1]  # a line of the worker's record log (local disk)
    replace_round(storage, last, NESTED)
    with pytest.raises(CorruptStateError) as raised:
        optimize(lambda i: {"i": i}, range(24), out, num_workers=1, chunk_size=2, num_shards=2, verbose=False)
    assert last[1] in str(raised.value) and "is not valid JSON" in str(raised.value), raised.value


@pytest.mark.parametrize("content", [NESTED, b"garbage"])
def test_a_lease_nested_deeper_than_json_goes_is_taken_over_like_any_unreadable_lease(tmp_path, content):
    """Before: a raw RecursionError from every run, status and reader of the output; a lease
    that is not JSON holds no work, and the run takes it over (as one of b"garbage" always was)."""
    from shardwright import StreamingDataset, optimize
    from shardwright.protocol.layout import lease_key
    from shardwright.protocol.lease import read_leases
    from shardwright.storage import open_storage

    out = _interrupted(tmp_path)
    storage = open_storage(out)
    storage.write_bytes(lease_key("node-0"), content)
    read_leases(storage)
    optimize(lambda i: {"i": i}, range(24), out, num_workers=1, chunk_size=2, num_shards=2, verbose=False)
    assert sorted(x["i"] for x in StreamingDataset(out)) == list(range(24))

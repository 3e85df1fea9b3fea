"""Trust round 10's POOR rows left open (docs/trust-round10.md rows 5, 16, 23, 32, 33; row 10
is in test_pending_tail.py): a manifest field of the wrong type named as damage, not as another
version; an oversized progress snapshot or lease named by its path with the least drastic safe
way out; `k8s manifest --env` refusing a URL's credentials and accepting a credential file's path."""

from __future__ import annotations

import pytest

from shardwright.cluster.kubernetes import JobSpec
from shardwright.errors import CorruptStateError, UsageError
from shardwright.protocol.jsonio import dumps
from shardwright.protocol.layout import MANIFEST_KEY
from shardwright.protocol.manifest import Manifest, read_manifest
from shardwright.storage import open_storage
from support.sealed_records import small_manifest


def _written(tmp_path, **edits):
    """A local output whose run manifest has ``edits`` applied to its JSON."""
    manifest = small_manifest()
    storage = open_storage(str(tmp_path / "out"))
    storage.write_bytes(MANIFEST_KEY, dumps({**manifest.to_json(), **edits}))
    return storage


# --- row 5: "protocol":"7" read as a version mismatch ---


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("7", "'protocol' '7', a string where a whole number is required"),
        (True, "'protocol' True, true or false where a whole number is required"),
        (7.0, "'protocol' 7.0, a number with a fraction where a whole number is required"),
        (None, "'protocol' None, null where a whole number is required"),
        (0, "has protocol 0"),
    ],
)
def test_a_protocol_of_the_wrong_type_is_named_as_damage_not_as_another_version(tmp_path, value, named):
    """Before: "has protocol '7', this shardwright writes 7; finish the run with the shardwright
    version that started it": there is no such version to go and find."""
    storage = _written(tmp_path, protocol=value)
    with pytest.raises(CorruptStateError) as raised:
        read_manifest(storage)
    message = str(raised.value)
    assert named in message and "the manifest is damaged or was edited by hand" in message, message
    assert "version that started it" not in message and "OUTPUT_DIR" not in message, message
    assert f"`shardwright clean {storage.url}`" in message and "\n" not in message


def test_a_protocol_no_version_resumes_is_still_a_version_mismatch(tmp_path):
    with pytest.raises(CorruptStateError, match="has protocol 8, this shardwright writes 7; finish the run"):
        read_manifest(_written(tmp_path, protocol=8))


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("created_at", True, "'created_at' True, true or false where a number is required"),
        ("generation", False, "'generation' False, true or false where a whole number is required"),
        ("fn_code", 5, "'fn_code' 5, a whole number where a string is required"),
        ("input_files", [1], "'input_files' [1], a list where an object is required"),
        ("base_config", "x", "'base_config' 'x', a string where an object is required"),
        ("input_ids", {}, "'input_ids' {}, an object where a list is required"),
        ("inputs", None, "'inputs' None, null where an object is required"),
    ],
)
def test_every_manifest_field_is_typed_strictly(tmp_path, field, value, named):
    """bool is an int to isinstance: created_at true was read as 1970; a wrong-typed
    input_files was dropped in silence (and with it the check that the input files are
    unchanged); fn_code 5 was read as the digest "5"."""
    with pytest.raises(CorruptStateError) as raised:
        read_manifest(_written(tmp_path, **{field: value}))
    assert named in str(raised.value), raised.value


def test_an_input_count_of_true_is_not_a_whole_number(tmp_path):
    manifest = _written(tmp_path)
    data = read_manifest(manifest).to_json()  # type: ignore[union-attr]
    data["input_ids"], data["input_skips"] = [True, 1, 2, 3], [0, 0, 0, 0]
    with pytest.raises(CorruptStateError, match="its retry input list is invalid"):
        Manifest.from_json(data, "m")


# --- rows 16 and 23: "Abandon the run with `shardwright clean OUTPUT_DIR`" ---


def _grown(path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: nothing is read, nothing is allocated


def test_an_oversized_progress_snapshot_names_its_path_and_says_to_delete_that_file(tmp_path):
    """Before: the placeholder OUTPUT_DIR, and abandoning the run (its committed work) where
    deleting the snapshot loses nothing committed."""
    from shardwright.protocol.layout import progress_key
    from shardwright.protocol.progress import MAX_SNAPSHOT_BYTES, read_snapshot

    storage = open_storage(str(tmp_path / "out"))
    key = progress_key(0, 5)
    storage.write_bytes(key, b"")
    _grown(tmp_path / "out" / key, MAX_SNAPSHOT_BYTES + 1)
    with pytest.raises(CorruptStateError) as raised:
        read_snapshot(storage, "run", 0, 0, None, (0, 0))
    message = str(raised.value)
    assert f"progress snapshot {storage.url}/{key} holds more than" in message, message
    assert "Delete that one file" in message and "nothing committed is lost" in message, message
    assert "clean" not in message and "OUTPUT_DIR" not in message and "\n" not in message, message


def test_an_oversized_lease_is_named_as_damaged_liveness_and_deleting_it_is_safe(tmp_path):
    from shardwright.protocol.layout import lease_key
    from shardwright.protocol.lease import Lease, read_leases

    storage = open_storage(str(tmp_path / "out"))
    key = lease_key("node-0")
    storage.write_bytes(key, b"")
    _grown(tmp_path / "out" / key, (1 << 20) + 1)
    for attempt in (lambda: read_leases(storage), lambda: Lease(storage, "node-0", "the run").try_acquire()):
        with pytest.raises(CorruptStateError) as raised:
            attempt()
        message = str(raised.value)
        assert f"lease {storage.url}/{key} holds more than 1,048,576 bytes" in message, message
        assert "Delete that one file: a lease holds no work" in message, message
        assert "clean" not in message and "OUTPUT_DIR" not in message, message
    # the advice, followed: the lease is taken
    storage.delete(key)
    lease = Lease(storage, "node-0", "the run")
    assert lease.try_acquire() is None
    lease.release()


def test_a_lease_never_grows_past_what_its_readers_read(tmp_path):
    """1,024 inputs in flight with 4 KiB ResumePoint states made a lease of over 4 MiB, which
    every reader refused: status, a second run, and the holder's own check before each commit."""
    from shardwright.protocol.jsonio import MAX_LEASE_BYTES
    from shardwright.protocol.lease import Lease, check_still_held, read_leases

    storage = open_storage(str(tmp_path / "out"))
    lease = Lease(storage, "node-0", "the run")
    assert lease.try_acquire() is None
    count = 1100
    lease.show_current_inputs(
        list(range(count)), [f"doc{i}" for i in range(count)], ['{"p":"' + "x" * 4000 + '"}'] * count
    )
    assert lease.renew()
    assert storage.size(lease.key) <= MAX_LEASE_BYTES // 4
    check_still_held(storage, lease.key, lease.owner)  # before: CorruptStateError, its own lease refused
    ((_, holder),) = read_leases(storage)
    assert holder.current_inputs == tuple(range(1024)) and holder.current_names[:2] == ("doc0", "doc1")
    lease.release()


# --- rows 32 and 33: `k8s manifest --env` ---


def _spec(env: dict[str, str], output_dir: str | None = None) -> JobSpec:
    return JobSpec(name="j", image="img:1", command=["python", "x.py"], completions=1, env=env, output_dir=output_dir)


@pytest.mark.parametrize(
    "value",
    [
        "https://user:pa55@host/x",
        "postgres://etl:hunter22@db:5432/prod",
        "--dsn=https://user:pa55@host/x",
        "https://bucket.s3.amazonaws.com/k?X-Amz-Signature=abcdef0123456789",
    ],
)
def test_an_env_value_carrying_url_credentials_is_refused_without_repeating_it(value):
    """Before: `--env FOO=https://user:pa55@host/x` was written into the manifest as it was."""
    with pytest.raises(UsageError) as raised:
        _spec({"FOO": value}).validate()
    message = str(raised.value)
    assert "holds a URL with credentials" in message and "--secret NAME" in message, message
    assert "pa55" not in message and "hunter22" not in message and "abcdef" not in message, message


def test_an_output_dir_carrying_url_credentials_is_refused():
    with pytest.raises(UsageError, match="--output-dir holds a URL with credentials") as raised:
        _spec({}, "https://user:pa55@host/ds").validate()
    assert "pa55" not in str(raised.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GOOGLE_APPLICATION_CREDENTIALS", "/var/secret/key.json"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/var/run/secrets/aws/credentials"),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"),
        ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/azure/tokens/azure-identity-token"),
        ("DB_PASSWORD_FILE", "/run/secrets/db_password"),
        ("VAULT_TOKEN_PATH", "/vault/secrets/"),
    ],
)
def test_a_credential_files_path_is_accepted(name, value):
    """Before: GOOGLE_APPLICATION_CREDENTIALS=/var/secret/key.json, the usual way to point at a
    mounted Secret, was refused as a secret for the CREDENTIAL in its name."""
    _spec({name: value}).validate()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GOOGLE_APPLICATION_CREDENTIALS", '{"type": "service_account", "private_key": "-----BEGIN"}'),
        ("GOOGLE_APPLICATION_CREDENTIALS", "svc-account.json"),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJ4In0.c2ln"),
        ("DB_PASSWORD_FILE", "/run/secrets/db password"),
    ],
)
def test_a_credential_pasted_where_its_path_belongs_is_still_refused(name, value):
    with pytest.raises(UsageError) as raised:
        _spec({name: value}).validate()
    message = str(raised.value)
    assert f"--env {name}=... is not an absolute file path" in message and "mount it in the pods" in message
    assert value not in message


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DB_PASSWORD"])
def test_a_secret_named_variable_is_refused_even_when_its_value_looks_like_a_path(name):
    with pytest.raises(UsageError, match=f"--env {name}=... would write a secret"):
        _spec({name: "/abc/def"}).validate()


def test_ordinary_file_variables_stay_ordinary():
    _spec({"CONFIG_FILE": "config.yaml", "HF_HOME": "/cache", "LOG_PATH": "logs"}).validate()

"""Trust round 10 (docs/trust-round10.md): a run's manifest edited back to protocol 6 no
longer lets a record file without its checksum be read. Round 9 made a record without its
checksum an error in a protocol-7 run, and that error names the manifest's protocol as what
decides it; changing "protocol":7 to 6 in manifest.json (one bit) and stripping the record's
checksum published the dataset without inputs 6 and 7 again. A run started now says it seals
its records in its run id too, which every record of the run repeats under its checksum: a
run id changed back makes every record another run's (the work is redone, nothing skipped)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwright.errors import CorruptStateError
from shardwright.protocol.manifest import Manifest
from shardwright.protocol.records import load_progress
from support.sealed_records import small_manifest, strip_checksum, written_records


def test_a_new_run_stays_sealed_when_its_manifest_is_edited_back_to_protocol_6():
    manifest = small_manifest()
    assert manifest.records_sealed
    downgraded = Manifest.from_json({**manifest.to_json(), "protocol": 6}, "m")
    assert downgraded.records_sealed, "the run id still says this run writes every record with its checksum"


def test_a_run_started_by_protocol_6_is_still_unsealed():
    legacy = replace(small_manifest(), run_id="0123456789abcdef0123456789abcdef", protocol=6)
    assert not Manifest.from_json(legacy.to_json(), "m").records_sealed


def test_the_downgraded_run_refuses_a_record_stripped_of_its_checksum(tmp_path):
    manifest = Manifest.from_json({**small_manifest().to_json(), "protocol": 6}, "m")
    storage, key = written_records(tmp_path)
    strip_checksum(storage, key, '"next_input":6', '"next_input":8')
    with pytest.raises(CorruptStateError, match="has no checksum"):
        load_progress(storage, {0: (0, 12)}, "run", sealed=manifest.records_sealed)


# --- environment variables named like an API key (OPENAI_API_KEY) were not secrets ---


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "ANTHROPIC_APIKEY", "openai_api_key", "GCP_PRIVATE_KEY"])
def test_an_api_key_in_the_environment_is_redacted_and_kept_out_of_a_k8s_manifest(name):
    """Before: OPENAI_API_KEY's value was written unredacted into a failure record (fn's error
    quoted it) while HF_TOKEN's was replaced by ***, and `k8s manifest --env OPENAI_API_KEY=...`
    put it in the manifest in plain text."""
    from shardwright.cluster.kubernetes import JobSpec
    from shardwright.errors import UsageError
    from shardwright.secrets import redact, secret_values

    key = "sk-proj-abcdefghijklmnop1234"
    assert redact(f"401: key {key}", secret_values(None, {name: key})) == "401: key ***"
    with pytest.raises(UsageError, match="would write a secret into the manifest"):
        JobSpec(name="j", image="img:1", command=["python", "x.py"], completions=1, env={name: key}).validate()


@pytest.mark.parametrize("name", ["SORT_KEY", "KEYBOARD", "PRIMARY_KEY_COLUMN", "HOTKEYS"])
def test_ordinary_names_with_key_in_them_are_not_secrets(name):
    from shardwright.secrets import is_secret_env_name

    assert not is_secret_env_name(name)


def test_a_cut_jsonl_gz_is_named_as_cut_not_as_inputs_that_cannot_be_sliced(tmp_path):
    """Before: the source's own line ("is not a complete compressed file ... restore it") is an
    InputsError, a TypeError, and the check that inputs can be sliced replaced it with "inputs
    is a JsonlSource, which cannot be sliced ... Pass list(inputs) instead"."""
    import gzip

    from shardwright import sources
    from shardwright.engine.planning import check_inputs
    from shardwright.errors import InputsError

    raw = gzip.compress(b"".join(b'{"a":%d}\n' % i for i in range(2000)))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputsError, match="is not a complete compressed file") as raised:
        check_inputs(sources.jsonl(str(cut)))
    assert "list(inputs)" not in str(raised.value)


def test_status_names_a_signal_stop_once_and_keeps_the_run_ids_own_digits(capsys):
    """Before: "state:    interrupted (interrupted (SIGTERM)) (run s7-d85c4, ...)": the state
    twice, and the run id's mark ate three of its eight characters."""
    from shardwright.cli.main import print_status
    from shardwright.protocol.status import RunStatus

    report = RunStatus(
        "/tmp/x",
        "interrupted",
        False,
        None,
        0,
        run_id="s7-d85c4e0f1a2b",
        mode="create",
        inputs=10,
        stop_reason="interrupted (SIGTERM)",
    )
    print_status(report)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("state:"))
    assert line.startswith("state:    interrupted (SIGTERM) (run d85c4e0f,"), line


def test_a_rate_budget_path_in_a_missing_directory_names_the_directory(tmp_path):
    """Before: "... cannot be opened (No such file or directory): a file there that this user's
    runs did not make is not used; delete it if it is yours": there was nothing to delete."""
    from shardwright.engine.limits import SharedBudget
    from shardwright.errors import UsageError

    missing = tmp_path / "nope"
    with pytest.raises(UsageError) as raised:
        SharedBudget("2/s", path=str(missing / "budget")).reserve()
    message = str(raised.value)
    assert f"its directory {missing} does not exist" in message and "delete it" not in message, message

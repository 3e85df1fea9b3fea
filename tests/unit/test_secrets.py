"""shardwright.secrets: what counts as a secret, and that it is hidden everywhere it is applied."""

from __future__ import annotations

import pytest

from shardwright.errors import FnError, StorageError, UsageError
from shardwright.secrets import (
    public_options,
    redact,
    redact_exception,
    redacting,
    secret_values,
)

ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONN = f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};BlobEndpoint=http://127.0.0.1:1/x;"


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"aws_secret_access_key": "S3CRETKEY"}, ["S3CRETKEY"]),
        ({"config": {"aws_session_token": "TOKEN123"}}, ["TOKEN123"]),
        ({"endpoint_url": "http://KEY1:SECRET1@host:1"}, ["SECRET1", "KEY1"]),
        ({"account_key": "AZUREKEY"}, ["AZUREKEY"]),
        ({"credential": "sas-or-key"}, ["sas-or-key"]),
        ({"sas_token": "sv=2020&sig=abc"}, ["sv=2020&sig=abc"]),
        ({"region_name": "us-east-1", "endpoint_url": "http://host:1"}, []),
        ({"key": "ab"}, []),  # too short to redact safely
    ],
)
def test_secret_values_of_storage_options(options, expected):
    assert secret_values(options, env={}) == sorted(expected, key=len, reverse=True)


def test_connection_string_hides_the_whole_string_and_its_account_key():
    found = secret_values({"connection_string": CONN}, env={})
    assert CONN in found and ACCOUNT_KEY in found
    # a connection string under another key still has its AccountKey found
    assert ACCOUNT_KEY in secret_values({"conn": CONN}, env={})


def test_environment_variables_named_like_secrets():
    env = {"AZURE_STORAGE_CONNECTION_STRING": CONN, "MY_TOKEN": "true", "AWS_SECRET_ACCESS_KEY": "abcdefgh12"}
    found = secret_values(None, env=env)
    assert ACCOUNT_KEY in found and CONN in found and "abcdefgh12" in found
    assert "true" not in found  # a short flag is not a secret


def test_redact_replaces_plain_and_url_quoted_forms():
    assert redact("x a/b+c y a%2Fb%2Bc", ["a/b+c"]) == "x *** y ***"


def test_public_options_drops_credentials_and_url_users():
    public = public_options(
        {
            "endpoint_url": "http://K:S@host:9000/p",
            "aws_secret_access_key": "S",
            "config": {"aws_session_token": "T", "retries": {"max_attempts": 3}},
            "connection_string": CONN,
            "conn": CONN,
        }
    )
    assert public == {"endpoint_url": "http://host:9000/p", "config": {"retries": {"max_attempts": 3}}}


def test_redact_exception_cuts_a_chain_that_holds_a_secret():
    try:
        try:
            raise RuntimeError("connect to http://KEY:SECRETVALUE@h failed")
        except RuntimeError as inner:
            raise UsageError("outer") from inner
    except UsageError as exc:
        clean = redact_exception(exc, ["SECRETVALUE"])
    assert isinstance(clean, UsageError) and clean.__cause__ is None and clean.__suppress_context__
    assert "SECRETVALUE" not in str(clean) and "***" in str(clean)


def test_redact_exception_keeps_fn_error_fields_and_foreign_becomes_storage_error():
    exc = FnError("boom SECRETVALUE", input_index=3, input_repr="SECRETVALUE", worker_traceback="tb SECRETVALUE")
    clean = redact_exception(exc, ["SECRETVALUE"])
    assert isinstance(clean, FnError) and clean.input_index == 3
    assert "SECRETVALUE" not in clean.input_repr + clean.worker_traceback + str(clean)
    foreign = redact_exception(RuntimeError("SECRETVALUE"), ["SECRETVALUE"])
    assert isinstance(foreign, StorageError)
    untouched = RuntimeError("nothing here")
    assert redact_exception(untouched, ["SECRETVALUE"]) is untouched


def test_redacting_reraises_without_the_secret():
    @redacting
    def fails(storage_options=None):
        raise OSError("bad http://A:LONGSECRET@x")

    with pytest.raises(StorageError) as info:
        fails(storage_options={"endpoint_url": "http://A:LONGSECRET@x"})
    assert "LONGSECRET" not in str(info.value)
    assert redacting(lambda: 5)() == 5

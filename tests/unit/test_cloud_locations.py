"""gs:// and az:// locations and options: every mistake is one line naming the fix, raised
before anything is contacted or written (no server needed: nothing here opens a connection)."""

from __future__ import annotations

import pytest

from shardwright import optimize
from shardwright.errors import OutputDirError, UsageError
from shardwright.secrets import public_options, redact, secret_values
from shardwright.storage import open_storage
from shardwright.storage.azure import AzureStorage
from shardwright.storage.gcs import GCSStorage

KEY = "c2VjcmV0LWtleS10aGF0LW11c3QtbmV2ZXItYmUtcHJpbnRlZA=="
CONN = f"DefaultEndpointsProtocol=https;AccountName=myacct;AccountKey={KEY};EndpointSuffix=core.windows.net"


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch):
    for name in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_KEY",
    ):
        monkeypatch.delenv(name, raising=False)


def test_gcs_urls_and_alias():
    s = open_storage("GCS://my-bucket/some/prefix/")
    assert isinstance(s, GCSStorage) and s.url == "gs://my-bucket/some/prefix" and s.prefix == "some/prefix"
    assert open_storage("gs://my-bucket").url == "gs://my-bucket"


def test_azure_urls_carry_the_account():
    a = open_storage("az://data/train", {"connection_string": CONN})
    assert isinstance(a, AzureStorage) and a.url == "az://data/train"
    assert a.account == "myacct" and a.endpoint == "https://myacct.blob.core.windows.net"
    b = open_storage("abfs://data@myacct.dfs.core.windows.net/train", {"account_name": "myacct", "account_key": KEY})
    assert b.url == "abfs://data@myacct.dfs.core.windows.net/train" and b.endpoint == a.endpoint
    other = open_storage("az://data/train", {"account_name": "otheracct", "account_key": KEY})
    assert other.endpoint != a.endpoint  # same container and prefix, another account: another location
    with pytest.raises(OutputDirError, match="names the storage account myacct but the credentials are for otheracct"):
        open_storage("abfs://data@myacct.dfs.core.windows.net/t", {"account_name": "otheracct", "account_key": KEY})
    for storage in (a, b):
        assert KEY not in repr(storage) and KEY not in storage.url


@pytest.mark.parametrize(
    "url, message",
    [
        ("gs://", "invalid GCS URL 'gs://': use gs://bucket/prefix"),
        ("gs:///prefix", "invalid GCS URL 'gs:///prefix': use gs://bucket/prefix"),
        ("gs://Bad_Bucket/p", "invalid GCS bucket name 'Bad_Bucket'"),
        ("gs://bucket/a//b", "has an empty segment (//) in its key prefix"),
        ("gs://bucket/a/../b", "has a '..' segment"),
        ("gcs://bucket/./b", "has a '.' segment"),
        ("az://", "invalid Azure URL 'az://': use az://container/prefix"),
        ("az://Container/p", "invalid Azure container name 'Container'"),
        ("az://ab/p", "invalid Azure container name 'ab'"),
        ("az://c@acct/p", "az:// takes the container only"),
        ("abfs://data@acct.example.com/p", "write abfs://container@account.dfs.core.windows.net/prefix"),
        ("az://data/x/../y", "has a '..' segment"),
        ("gcp://bucket/p", "write it as gs://bucket/p"),
        ("azure://data/p", "write it as az://data/p"),
        ("wasbs://data@acct.blob.core.windows.net/p", "write it as abfs://data@acct.dfs.core.windows.net/p"),
    ],
)
def test_location_mistakes_are_one_line(url, message):
    with pytest.raises(OutputDirError) as info:
        open_storage(url, {"connection_string": CONN})
    text = str(info.value)
    assert message in text and "\n" not in text, text


def test_no_azure_credentials_names_the_chain():
    with pytest.raises(OutputDirError) as info:
        open_storage("az://data/p")
    text = str(info.value)
    assert text.startswith("no Azure credentials found: tried storage_options connection_string"), text
    assert "AZURE_STORAGE_CONNECTION_STRING" in text and "DefaultAzureCredential" in text


@pytest.mark.parametrize(
    "url, options, fix",
    [
        ("gs://bucket/p", {"token": "/path/key.json"}, "'token' -> 'credentials'"),
        ("gs://bucket/p", {"endpoint_url": "http://x"}, "'endpoint_url' -> 'api_endpoint'"),
        ("gs://bucket/p", {"anon": True}, "AnonymousCredentials"),
        ("az://data/p", {"connection_string": CONN, "account_host": "x"}, "'account_host' -> 'account_url'"),
        ("az://data/p", {"connection_string": CONN, "client_secret": "s3cr3t-value"}, "ClientSecretCredential"),
        ("az://data/p", {"connection_string": CONN, "anon": False}, "'anon' -> nothing"),
    ],
)
def test_fsspec_option_names_name_the_right_key(url, options, fix):
    with pytest.raises(UsageError) as info:
        open_storage(url, options)
    text = str(info.value)
    assert fix in text and "fsspec-style" in text and "\n" not in text, text
    assert "s3cr3t-value" not in text


def test_unknown_and_mistyped_options():
    with pytest.raises(UsageError, match="unknown key\\(s\\) 'region_name': use api_endpoint, credentials"):
        open_storage("gs://bucket/p", {"region_name": "x"})
    with pytest.raises(UsageError, match=r"storage_options\['retry_timeout'\] must be a number"):
        open_storage("gs://bucket/p", {"retry_timeout": "60"})
    with pytest.raises(UsageError, match=r"storage_options\['max_block_size'\] must be a number"):
        open_storage("az://data/p", {"connection_string": CONN, "max_block_size": True})


@pytest.mark.parametrize(
    "name, value",
    [("retry_timeout", "60"), ("retry_timeout", -1), ("retry_timeout", True), ("retry_timeout", 10**9)]
    + [("multipart_threshold", "64MiB"), ("multipart_threshold", 0), ("multipart_chunksize", 6 * 1024**3)],
)
def test_s3_numbers_are_typed_and_bounded_like_the_other_clouds(name, value):
    # a string, a bool or an out-of-range number is refused in one line, before any client exists
    with pytest.raises(UsageError, match=rf"storage_options\[{name!r}\] must be a number from") as info:
        open_storage("s3://bucket/p", {name: value, "aws_secret_access_key": "s3cr3t-value"})
    assert "\n" not in str(info.value) and "s3cr3t-value" not in str(info.value)


def test_s3_numbers_in_range_are_kept():
    storage = open_storage("s3://bucket/p", {"retry_timeout": 2, "multipart_threshold": 5 * 1024**2})
    assert (storage.retry_timeout, storage.multipart_threshold) == (2, 5 * 1024**2)


def test_optimize_refuses_before_writing_anything(tmp_path):
    # the S3 names check does not misreport gs:// options as boto3 ones
    with pytest.raises(UsageError, match="'token' -> 'credentials'"):
        optimize(lambda i: {"i": i}, [1], "gs://bucket/p", chunk_size=1, storage_options={"token": "x"})
    with pytest.raises(UsageError, match="'key' -> 'account_key'"):
        optimize(lambda i: {"i": i}, [1], "az://data/p", chunk_size=1, storage_options={"key": KEY})


def test_azure_secrets_are_known_to_the_redaction():
    options = {"connection_string": CONN}
    secrets = secret_values(options, env={"AZURE_STORAGE_KEY": KEY})
    assert KEY in secrets and CONN in secrets
    assert KEY not in redact(f"failed with {CONN} and {KEY}", secrets)
    assert public_options({**options, "account_key": KEY, "sas_token": "sv=2020&sig=abcdef", "max_block_size": 1}) == {
        "max_block_size": 1
    }


def test_shared_option_check_uses_each_clouds_names():
    """optimize(), the reader, verify and the jobs API check names through one function: S3's
    boto3 names for s3://, each cloud SDK's own for gs:// and az:// (pure: nothing contacted)."""
    from shardwright.storage.options import check_storage_option_names

    check_storage_option_names({"project": "p"}, "gs://b/p")
    check_storage_option_names({"connection_string": CONN}, "az://data/p")
    with pytest.raises(UsageError, match="'token' -> 'credentials'"):
        check_storage_option_names({"token": "x"}, "gcs://b/p")
    with pytest.raises(UsageError, match="'token' -> aws_session_token"):
        check_storage_option_names({"token": "x"}, "s3://b/p")
    with pytest.raises(UsageError, match="'blocksize' -> 'max_block_size'"):
        check_storage_option_names({"blocksize": 1}, "abfs://data@myacct.dfs.core.windows.net/p")


def test_slurm_merge_job_command_line_keeps_no_azure_secret():
    """`shardwright slurm --merge-job --output-dir az://... --storage-options ...`: the merge job's
    command line (kept by Slurm in its job record) carries no key; the job reads it from the
    environment sbatch exports (AZURE_STORAGE_CONNECTION_STRING)."""
    import json

    from shardwright.cluster.slurm import public_storage_options

    options = {"connection_string": CONN, "account_key": KEY, "sas_token": "sv=2024&sig=abcdefgh", "max_concurrency": 2}
    public = public_storage_options(json.dumps(options))
    assert KEY not in (public or "") and "abcdefgh" not in (public or "") and "AccountKey" not in (public or "")
    assert json.loads(public or "{}") == {"max_concurrency": 2}

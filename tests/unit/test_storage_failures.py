"""How object-store failures read: each backend's ``failure(exc)`` (storage/failure.py) and
the one line the user gets, checked without a server (a closed loopback port, the SDKs'
own exception objects)."""

from __future__ import annotations

import socket
import time

import pytest

from shardwright.errors import OutputDirError, StorageError
from shardwright.storage import open_storage


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gcs_token_endpoint_that_fails_is_named_at_once(monkeypatch):
    """A token endpoint that does not answer is the credentials' problem, said within
    seconds, not 60 s of retries blamed on the network."""
    pytest.importorskip("google.cloud.storage")
    from google.oauth2.credentials import Credentials

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    dead = _closed_port()
    credentials = Credentials(
        token=None, refresh_token="r", token_uri=f"http://127.0.0.1:{dead}/token", client_id="c", client_secret="s"
    )
    store = open_storage("gs://sw-bucket/p", {"credentials": credentials, "api_endpoint": f"http://127.0.0.1:{dead}"})
    start = time.monotonic()
    with pytest.raises(StorageError) as info:
        store.check()
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert elapsed < 10, elapsed  # the default retry budget is 60 s
    assert "token endpoint" in message and "gs://sw-bucket/p" in message, message
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "kept failing" not in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("credentials", "fix"),
    [
        ({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----"}, "from_service_account_info"),
        ("/keys/sa.json", "GOOGLE_APPLICATION_CREDENTIALS"),
        (42, "google.auth credentials object"),
    ],
)
def test_gcs_credentials_that_are_not_a_credentials_object_are_refused_in_one_line(credentials, fix):
    pytest.importorskip("google.auth")
    with pytest.raises(OutputDirError) as info:
        open_storage("gs://sw-bucket/p", {"credentials": credentials})
    message = str(info.value)
    assert message.startswith("storage_options['credentials'] for gs:// must be a google.auth credentials object")
    assert fix in message and "PRIVATE KEY" not in message and "\n" not in message, message


def _s3(url: str = "s3://sw-bucket/p"):
    pytest.importorskip("boto3")
    dead = _closed_port()
    options = {"endpoint_url": f"http://127.0.0.1:{dead}", "aws_access_key_id": "k", "aws_secret_access_key": "s"}
    return open_storage(url, dict(options, region_name="us-east-1"))


@pytest.mark.parametrize(
    ("code", "status", "operation", "kind"),
    [
        ("SlowDown", 503, "PutObject", "TRANSIENT"),
        ("RequestTimeTooSkewed", 403, "PutObject", "TRANSIENT"),  # a retry code wins over its 403
        ("AccessDenied", 403, "GetObject", "REJECTED"),
        ("SignatureDoesNotMatch", 403, "PutObject", "REJECTED"),
        ("NoSuchBucket", 404, "ListObjectsV2", "NO_BUCKET"),
        ("404", 404, "HeadBucket", "NO_BUCKET"),
        ("NoSuchKey", 404, "GetObject", "MISSING"),
        ("PermanentRedirect", 301, "GetObject", "WRONG_REGION"),
        ("InternalError", 500, "GetObject", "TRANSIENT"),
        ("Weird", 429, "GetObject", "TRANSIENT"),
        ("InvalidArgument", 400, "PutObject", "OTHER"),
    ],
)
def test_s3_failure_is_read_from_its_tables(code, status, operation, kind):
    from botocore.exceptions import ClientError

    from shardwright.storage.failure import Failure

    error = ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )
    assert _s3().failure(error) is Failure[kind]


def test_an_object_store_url_that_is_not_unicode_is_refused_before_anything():
    """A prefix holding a surrogate (bytes of a file name decoded with surrogateescape) cannot
    be sent: refused when the location is parsed, never a raw UnicodeEncodeError from the
    first upload (which the engine would blame on fn)."""
    with pytest.raises(OutputDirError, match="is not valid Unicode text: object stores name objects in UTF-8"):
        _s3("s3://sw-bucket/pre\udcfffix")
    from shardwright import optimize

    with pytest.raises(OutputDirError, match="not valid Unicode"):
        optimize(lambda i: {"i": i}, [1, 2], "s3://sw-bucket/pre\udcfffix", verbose=False)


def test_an_s3_key_that_cannot_be_sent_names_the_storage_not_fn():
    view = _s3().input_view()  # an input view takes users' keys as they are
    with pytest.raises(StorageError) as info:
        view.read_bytes("in/a\udcffb.txt")
    message = str(info.value)
    assert message.startswith("S3 GET s3://sw-bucket/p/in/a\\udcffb.txt at http://127.0.0.1:"), message
    assert "not valid Unicode" in message and "\n" not in message, message

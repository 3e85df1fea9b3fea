"""The S3 backend of :class:`~shardwright.storage.base.Storage` (any S3-compatible store).

Every guarantee of the interface maps onto one S3 feature: atomic replace is a single PUT
(or a multipart upload, invisible until completed); create-if-absent is a conditional PUT
with ``If-None-Match: *``; compare-and-swap is ``If-Match: <etag>``. S3's strong
read-after-write consistency means an object is visible to every reader once its PUT
returned, which is what lets a commit record be written right after its chunk.

Retries, the client per process, the lost-reply rule and the atomic download are the
:class:`~.cloud.CloudStorage` base's, as for GCS and Azure; S3 brings its tables of error
codes and its one extra rule: an endpoint never reached gets one more try (a first
connection may lose a race with a server starting up) before the clear error.

Registers the ``s3`` scheme with :mod:`.registry`; boto3 is imported on first use.
"""

from __future__ import annotations

import builtins
import os
from typing import Any

from ..errors import OutputDirError, UsageError
from ..secrets import without_url_credentials
from .base import ObjectInfo, check_range
from .cloud import CloudStorage, TruncatedBody, pop_number
from .failure import Failure, Fixes
from .registry import parse_location, register_backend

__all__ = ["FSSPEC_NAMES", "S3Storage", "check_option_names", "open_s3"]

_MiB = 1024 * 1024
_GiB = 1024 * _MiB

# Every upload sends this checksum of its body; the server refuses a body damaged in flight
# (BadDigest, retried). SeaweedFS verifies it too: tests/system/test_trust_s3_upload.py.
UPLOAD_CHECKSUM = "CRC32"

# Error codes worth another try: botocore's own transient and throttling codes (its retries
# are off: ours replace them), and S3's.
_RETRY_CODES = frozenset(
    "SlowDown ServiceUnavailable InternalError RequestTimeout RequestTimeoutException PriorRequestNotComplete"
    " RequestTimeTooSkewed Throttling ThrottlingException ThrottledException RequestThrottledException"
    " RequestThrottled RequestLimitExceeded BandwidthLimitExceeded LimitExceededException TooManyRequestsException"
    " ConditionalRequestConflict OperationAborted BadDigest IncompleteBody 500 502 503 504".split()
)
_CREDENTIAL_CODES = frozenset(
    "InvalidAccessKeyId SignatureDoesNotMatch AccessDenied InvalidToken ExpiredToken InvalidClientTokenId"
    " UnrecognizedClientException AuthorizationHeaderMalformed InvalidSecurity TokenRefreshRequired 403".split()
)
_REGION_CODES = frozenset({"PermanentRedirect", "301"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# botocore's errors of a connection cut or a reply cut short (by name: not every version has each)
_STREAM_ERROR_NAMES = (
    "IncompleteReadError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "HTTPClientError",
    "ResponseStreamingError",
)
_FIXES = Fixes(
    "S3",
    "bucket",
    {
        Failure.NO_CREDENTIALS: "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or pass "
        "aws_access_key_id/aws_secret_access_key in storage_options",
        Failure.REJECTED: "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, AWS_SESSION_TOKEN) or "
        "storage_options, and that they may read and write this bucket",
        Failure.WRONG_REGION: "set region_name in storage_options or AWS_REGION",
        Failure.UNREACHABLE: "check endpoint_url (storage_options or AWS_ENDPOINT_URL), the network, and that the "
        "server is running",
    },
    credentials="AWS",
)


#: fsspec/s3fs spellings -> what boto3's client takes (s3:// storage_options are boto3 client arguments)
FSSPEC_NAMES = {
    "key": "aws_access_key_id",
    "secret": "aws_secret_access_key",
    "token": "aws_session_token",
    "client_kwargs": "its contents (endpoint_url, region_name) at the top level",
    "anon": "no credentials at all",
    "endpoint": "endpoint_url",
    "region": "region_name",
}


def check_option_names(options: dict[str, Any]) -> None:
    """UsageError for an fsspec/s3fs-style key (pure: nothing is contacted). Other names are
    boto3's to judge (its client takes many)."""
    wrong = [k for k in options if k in FSSPEC_NAMES]
    if wrong:
        fixes = "; ".join(f"{k!r} -> {FSSPEC_NAMES[k]}" for k in wrong)
        raise UsageError(
            f"storage_options uses fsspec/s3fs names ({', '.join(repr(k) for k in wrong)}); shardwright passes "
            f"them to boto3's client, which names them differently: {fixes}"
        )


def _endpoint_for_messages(url: str) -> str:
    """Endpoint for messages: no user:password@, no query string."""
    return without_url_credentials(url).split("?")[0].split("#")[0]


def _client_error_info(e: BaseException) -> tuple[str, int | None, str]:
    resp = getattr(e, "response", None) or {}
    err = resp.get("Error", {}) or {}
    status = (resp.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode")
    return str(err.get("Code", "")), status, str(err.get("Message", ""))


def _retried(e: BaseException) -> bool:
    resp = getattr(e, "response", None) or {}
    return bool((resp.get("ResponseMetadata", {}) or {}).get("RetryAttempts", 0))


def _is_missing(e: BaseException) -> bool:
    """A ClientError saying "no such object" (a missing bucket is not that)."""
    code, status, _ = _client_error_info(e)
    return code in _MISSING_CODES or (status == 404 and code != "NoSuchBucket")


def _transient_errors() -> tuple[type[BaseException], ...]:
    """Connections cut and replies cut short, from botocore, urllib3 and http.client."""
    import http.client

    import urllib3.exceptions as u3
    from botocore import exceptions as bce

    stream = tuple(getattr(bce, name) for name in _STREAM_ERROR_NAMES if hasattr(bce, name))
    return (*stream, u3.ProtocolError, u3.ReadTimeoutError, u3.IncompleteRead, http.client.IncompleteRead)


class S3Storage(CloudStorage):
    """Objects under ``s3://bucket/prefix`` on AWS S3 or any S3-compatible server.

    * Atomicity comes from S3 itself: a PUT (or a completed multipart upload) replaces the
      object all at once, and is durable when it returns.
    * create-if-absent and compare-and-swap use conditional PUTs (``If-None-Match: *`` and
      ``If-Match: <etag>``); the server answers 412 to the loser, so they are race-free across
      machines without any lock service.
    * The boto3 client is created lazily and once per process: the engine forks workers, and
      a client (its connection pool) must never be shared across a fork.
    * Flaky networks (the :class:`~.cloud.CloudStorage` base): one retry loop with one budget (about ``retry_timeout`` = 60 s, exponential
      backoff with jitter) around every operation, and botocore's own retries off: nested, its
      10 attempts of up to 20 s each made a budget of 2 s last half a minute. The loop retries
      what botocore would (throttling, 5xx, connection errors) and what it would not: bodies
      cut mid-stream, connection resets while reading, read timeouts. A body is only accepted
      if it has exactly Content-Length bytes.
    * An endpoint that was never reachable fails fast (two attempts, seconds), so a typo in
      the URL does not hang for minutes; once the endpoint has answered, connection failures
      are treated as transient and retried within the budget.
    * Every failure surfaces as StorageError naming the bucket, key and endpoint, never a
      secret.

    Besides boto3 client kwargs, ``storage_options`` may hold ``config`` (dict merged into
    ``botocore.config.Config``; a ``retries`` there turns botocore's own retries back on,
    inside our loop, so failures then take longer than ``retry_timeout``) and the shardwright
    settings ``multipart_threshold``, ``multipart_chunksize`` (bytes) and ``retry_timeout``
    (seconds).
    """

    scheme = "s3"
    fixes = _FIXES
    multipart_threshold: int = 64 * _MiB
    multipart_chunksize: int = 16 * _MiB

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        super().__init__()
        location = parse_location(url)  # the one check of a location: refuses what S3 would alias
        if location.scheme != "s3":
            raise OutputDirError(f"invalid S3 URL {url!r}: use s3://bucket/prefix")
        self.bucket, self.prefix, self.url = location.bucket, location.prefix, location.url
        opts = dict(storage_options or {})
        # S3's own limits: a single PUT and a part are at most 5 GiB (a part at least 5 MiB,
        # which the upload enforces by rounding up)
        self.multipart_threshold = int(
            pop_number(opts, "multipart_threshold", self.multipart_threshold, minimum=1, maximum=5 * _GiB)
        )
        self.multipart_chunksize = int(
            pop_number(opts, "multipart_chunksize", self.multipart_chunksize, minimum=1, maximum=5 * _GiB)
        )
        self.retry_timeout = pop_number(opts, "retry_timeout", self.retry_timeout, minimum=0, maximum=86400)
        self._config = opts.pop("config", None)
        self._client_kwargs = opts  # may hold secrets: never printed

    def __repr__(self) -> str:
        return f"S3Storage({self.url!r}, endpoint={self.endpoint!r})"

    # -- client ---------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The endpoint URL, for messages (credentials in the URL are stripped)."""
        ep = None
        if self._client is not None:
            ep = self._client.meta.endpoint_url
        ep = (
            ep
            or self._client_kwargs.get("endpoint_url")
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        return _endpoint_for_messages(ep) if ep else "https://s3.amazonaws.com (default AWS endpoint)"

    def _botocore_config(self) -> Any:
        from botocore.config import Config

        cfg = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},  # the base's loop retries
            connect_timeout=3,
            read_timeout=30,
            max_pool_connections=32,
        )
        extra = self._config
        if extra:
            cfg = cfg.merge(extra if isinstance(extra, Config) else Config(**extra))
        return cfg

    def make_client(self) -> Any:
        import boto3

        session = boto3.session.Session()  # sessions are not thread-safe: one per client
        return session.client("s3", config=self._botocore_config(), **self._client_kwargs)

    # -- errors -----------------------------------------------------------------------------

    def object_url(self, full_key: str) -> str:
        return f"s3://{self.bucket}/{full_key}"

    def retry_unreached(self, attempt: int) -> bool:
        return attempt < 1  # never answered: one more try, then a clear error

    def failure(self, e: BaseException) -> Failure:
        from botocore import exceptions as bce

        if isinstance(e, TruncatedBody):
            return Failure.TRANSIENT
        if isinstance(e, (bce.NoCredentialsError, bce.PartialCredentialsError)):
            return Failure.NO_CREDENTIALS
        if isinstance(e, (bce.EndpointConnectionError, bce.ConnectTimeoutError)):
            return Failure.UNREACHABLE
        if isinstance(e, bce.ClientError):
            code, status, _ = _client_error_info(e)
            if code in _RETRY_CODES:
                return Failure.TRANSIENT
            if code in _CREDENTIAL_CODES or status == 403:
                return Failure.REJECTED
            if code == "NoSuchBucket" or (status == 404 and getattr(e, "operation_name", "") == "HeadBucket"):
                return Failure.NO_BUCKET
            if code in _REGION_CODES or status == 301:
                return Failure.WRONG_REGION
            if status is not None and (status >= 500 or status == 429):
                return Failure.TRANSIENT
            return Failure.MISSING if _is_missing(e) else Failure.OTHER
        if isinstance(e, (*_transient_errors(), ConnectionError, TimeoutError)):
            return Failure.TRANSIENT
        cause = e.__cause__ or e.__context__
        if cause is not None and cause is not e and type(e).__name__ == "S3UploadFailedError":
            return self.failure(cause)  # boto3's multipart upload wraps what failed
        return Failure.OTHER

    def detail(self, e: BaseException) -> str | None:
        from boto3.exceptions import Boto3Error
        from botocore import exceptions as bce

        if isinstance(e, bce.ClientError):
            code, status, msg = _client_error_info(e)
            return f"{code or status} {msg}".rstrip()
        if isinstance(e, (bce.BotoCoreError, Boto3Error)):
            return f"{type(e).__name__}: {e}"
        return None

    # -- single attempts ------------------------------------------------------------------

    def get_versioned(self, full_key: str, byte_range: str | None = None) -> tuple[bytes, str] | None:
        """One GET (of ``byte_range``, "bytes=a-b", if given): (bytes, etag) or None if
        missing; TruncatedBody if cut short; b"" for a range starting past the end."""
        from botocore.exceptions import ClientError

        extra = {"Range": byte_range} if byte_range else {}
        try:
            r = self.client().get_object(Bucket=self.bucket, Key=full_key, **extra)
        except ClientError as e:
            code, status, _ = _client_error_info(e)
            if _is_missing(e):
                return None
            if byte_range and (code == "InvalidRange" or status == 416):
                return b"", ""
            raise
        body = r["Body"]
        try:
            data = body.read()
        finally:
            body.close()
        expected = r.get("ContentLength")
        if expected is not None and len(data) != expected:
            raise TruncatedBody(f"got {len(data)} of {expected} bytes")
        return data, r.get("ETag", "")

    def get_at_most(self, full_key: str, limit: int) -> tuple[bytes | None, str] | None:
        # A plain GET (not a ranged one: an empty object has no range, and a range would
        # download limit + 1 bytes of an object refused anyway); Content-Length decides
        # before the body is read, and a body is never read past limit + 1 bytes.
        from botocore.exceptions import ClientError

        try:
            r = self.client().get_object(Bucket=self.bucket, Key=full_key)
        except ClientError as e:
            if _is_missing(e):
                return None
            raise
        body, etag, announced = r["Body"], r.get("ETag", ""), r.get("ContentLength")
        try:
            if announced is not None and announced > limit:
                return None, etag  # closed unread: the connection is dropped, not drained
            data = body.read(limit + 1)
        finally:
            body.close()
        if len(data) > limit:
            return None, etag
        if announced is not None and len(data) != announced:
            raise TruncatedBody(f"got {len(data)} of {announced} bytes")
        return data, etag

    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        """PUT with If-None-Match (``version`` None) or If-Match; the reply's ETag, None on 412
        (see the base's conditional_write for the lost reply; botocore's own retries, if a
        ``config`` turns them on, count too)."""
        from botocore.exceptions import ClientError

        full = self._key(key)
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}

        def put() -> str | None:
            try:
                r = self.client().put_object(
                    Bucket=self.bucket, Key=full, Body=data, ChecksumAlgorithm=UPLOAD_CHECKSUM, **condition
                )
                return str(r.get("ETag") or "")
            except ClientError as e:
                code, status, _ = _client_error_info(e)
                if status == 412 or code == "PreconditionFailed":
                    if _retried(e):  # botocore retried inside this attempt: the 412 may be our own write
                        got = self.get_versioned(full)
                        return got[1] if got is not None and got[0] == data else None
                    return None
                if version is not None and _is_missing(e):
                    return None  # deleted since it was read
                raise  # 409 ConditionalRequestConflict is retried by the loop

        return self.conditional_write("PUT If-None-Match" if version is None else "PUT If-Match", key, data, put)

    # -- Storage API ----------------------------------------------------------------------

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        # A PUT is durable when it returns: ``durable`` changes nothing on S3.
        full = self._key(key)
        if len(data) < self.multipart_threshold:
            body = bytes(data)
            args = {"Bucket": self.bucket, "Key": full, "Body": body, "ChecksumAlgorithm": UPLOAD_CHECKSUM}
            self.run("PUT", key, lambda _a: self.client().put_object(**args))
            return
        import io

        from boto3.s3.transfer import TransferConfig

        chunk = max(self.multipart_chunksize, 5 * _MiB)
        cfg = TransferConfig(multipart_threshold=self.multipart_threshold, multipart_chunksize=chunk, max_concurrency=8)

        def upload(_attempt: int) -> None:
            # Parts are invisible until CompleteMultipartUpload: readers still see old or new.
            self.client().upload_fileobj(
                io.BytesIO(data), self.bucket, full, Config=cfg, ExtraArgs={"ChecksumAlgorithm": UPLOAD_CHECKSUM}
            )

        self.run("multipart PUT", key, upload)

    def head(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        full = self._key(key)

        def once(_attempt: int) -> ObjectInfo | None:
            try:
                head = self.client().head_object(Bucket=self.bucket, Key=full)
            except ValueError as e:  # botocore could not parse headers cut short by the network: retry
                raise TruncatedBody(f"unparseable HEAD response: {e}") from e
            except ClientError as e:
                code, status, _ = _client_error_info(e)
                if code in _MISSING_CODES or status == 404:  # a HEAD has no body: a missing bucket is a 404 too
                    return None
                raise
            if "ContentLength" not in head:  # headers cut short: retry
                raise TruncatedBody("HEAD response without Content-Length")
            modified = head.get("LastModified")
            etag = str(head.get("ETag", "")).strip('"')
            return ObjectInfo(self._rel(full), int(head["ContentLength"]), etag, modified and modified.timestamp())

        return self.run("HEAD", key, once)

    def _list_objects(self, full_prefix: str) -> builtins.list[dict[str, Any]]:
        """Every object under ``full_prefix``, as list_objects_v2 describes it."""
        objects: builtins.list[dict[str, Any]] = []
        token = None
        while True:
            kwargs = {"Bucket": self.bucket, "Prefix": full_prefix}
            if token:
                kwargs["ContinuationToken"] = token

            def once(_a: int, kw: dict[str, str] = kwargs) -> Any:
                return self.client().list_objects_v2(**kw)

            page = self.run("LIST", None, once)
            objects.extend(o for o in page.get("Contents", ()) if not o["Key"].endswith("/"))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return objects

    def list_info(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        infos = []
        for o in self._list_objects(self._full_prefix(prefix)):
            modified, etag = o.get("LastModified"), str(o.get("ETag", "")).strip('"')
            infos.append(
                ObjectInfo(self._rel(o["Key"]), int(o.get("Size", 0)), etag, modified and modified.timestamp())
            )
        return sorted(infos, key=lambda info: info.key)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        check_range(start, length)
        full = self._key(key)
        if length == 0:
            got = (b"", "") if self.exists(key) else None
        else:
            span = f"bytes={start}-{start + length - 1}"
            got = self.run("GET range", key, lambda _a: self.get_versioned(full, span))
        if got is None:
            raise self._missing(key)
        body = got[0]
        return bytes(body[start : start + length] if len(body) > length else body)  # a server may ignore Range

    def delete(self, key: str, *, durable: bool = True) -> None:
        full = self._key(key)
        self.run("DELETE", key, lambda _a: self.client().delete_object(Bucket=self.bucket, Key=full))

    def delete_prefix(self, prefix: str) -> None:
        keys = [o["Key"] for o in self._list_objects(self._full_prefix(prefix))]
        for i in range(0, len(keys), 1000):
            batch = {"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}

            def once(_a: int, batch: dict[str, Any] = batch) -> None:
                r = self.client().delete_objects(Bucket=self.bucket, Delete=batch)
                errors = [e for e in r.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
                if errors:
                    from botocore.exceptions import ClientError

                    first = errors[0]
                    raise ClientError(
                        {
                            "Error": {
                                "Code": first.get("Code", ""),
                                "Message": f"{first.get('Message', '')} "
                                f"(key {first.get('Key')}; {len(errors)} keys failed)",
                            }
                        },
                        "DeleteObjects",
                    )

            self.run("DELETE prefix", None, once)

    def download_to(self, key: str, local_path: str, *, durable: bool = True) -> None:
        from botocore.exceptions import ClientError

        full = self._key(key)

        def fetch(f: Any) -> int | None:
            try:
                r = self.client().get_object(Bucket=self.bucket, Key=full)
            except ClientError as e:
                if _is_missing(e):
                    return None
                raise
            body = r["Body"]
            try:
                for chunk in body.iter_chunks(1 * _MiB):
                    f.write(chunk)
            finally:
                body.close()
            return int(r.get("ContentLength", f.tell()))

        self.download_into(key, local_path, durable, fetch)

    def check(self) -> None:
        """One cheap HeadBucket at run start, so a wrong bucket, endpoint or credentials fail
        immediately with a message that says which and how to fix it."""
        self.run("HeadBucket", None, lambda _a: self.client().head_bucket(Bucket=self.bucket))


def open_s3(url: str, storage_options: dict[str, Any] | None = None, *, create: bool = False) -> S3Storage:
    """The registry's factory for ``s3://bucket/prefix`` (nothing is created: see ``check``)."""
    return S3Storage(url, storage_options)


register_backend("s3", open_s3, check_options=check_option_names)

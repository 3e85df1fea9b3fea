"""The S3 backend of :class:`~shardwright.storage.base.Storage` (any S3-compatible store).

Every guarantee of the interface maps onto one S3 feature: atomic replace is a single PUT
(or a multipart upload, invisible until completed); create-if-absent is a conditional PUT
with ``If-None-Match: *``; compare-and-swap is ``If-Match: <etag>``. S3's strong
read-after-write consistency means an object is visible to every reader once its PUT
returned, which is what lets a commit record be written right after its chunk.

Retries: one bounded loop of ours (``retry_timeout``), botocore's own retries off, so the
budget a caller sets is the time a failure takes. A client is created lazily per process,
so forked workers never share a connection pool.

Registers the ``s3`` scheme with :mod:`.registry`; boto3 is imported on first use.
"""

from __future__ import annotations

import builtins
import copy
import errno
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import OutputDirError, StorageError
from ..process import ForkSafeLock
from ..secrets import without_url_credentials
from .base import ObjectInfo, Storage, check_range
from .cloud import pop_number
from .files import download_atomically
from .registry import parse_location, register_backend

__all__ = ["S3Storage", "open_s3"]

T = TypeVar("T")

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

_CLIENT_LOCK = ForkSafeLock()  # one client per process; a forked child starts with it unlocked


def _endpoint_for_messages(url: str) -> str:
    """Endpoint for messages: no user:password@, no query string."""
    return without_url_credentials(url).split("?")[0].split("#")[0]


class _TruncatedBody(Exception):
    """A GET body shorter than its Content-Length (connection cut mid-body)."""


def _client_error_info(e: BaseException) -> tuple[str, int | None, str]:
    resp = getattr(e, "response", None) or {}
    err = resp.get("Error", {}) or {}
    status = (resp.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode")
    return str(err.get("Code", "")), status, str(err.get("Message", ""))


def _retried(e: BaseException) -> bool:
    resp = getattr(e, "response", None) or {}
    return bool((resp.get("ResponseMetadata", {}) or {}).get("RetryAttempts", 0))


class S3Storage(Storage):
    """Objects under ``s3://bucket/prefix`` on AWS S3 or any S3-compatible server.

    * Atomicity comes from S3 itself: a PUT (or a completed multipart upload) replaces the
      object all at once, and is durable when it returns.
    * create-if-absent and compare-and-swap use conditional PUTs (``If-None-Match: *`` and
      ``If-Match: <etag>``); the server answers 412 to the loser, so they are race-free across
      machines without any lock service.
    * The boto3 client is created lazily and once per process: the engine forks workers, and
      a client (its connection pool) must never be shared across a fork.
    * Flaky networks: one retry loop with one budget (about ``retry_timeout`` = 60 s, exponential
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

    multipart_threshold: int = 64 * _MiB
    multipart_chunksize: int = 16 * _MiB
    retry_timeout: float = 60.0

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
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
        self._client = None
        self._client_pid: int | None = None
        self._reached = False  # has the endpoint ever answered in this process?

    # -- pickling / repr: no client, no secrets in repr ------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state["_client_pid"] = None
        return state

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
            retries={"total_max_attempts": 1, "mode": "standard"},  # our loop retries (_run)
            connect_timeout=3,
            read_timeout=30,
            max_pool_connections=32,
        )
        extra = self._config
        if extra:
            cfg = cfg.merge(extra if isinstance(extra, Config) else Config(**extra))
        return cfg

    def client(self) -> Any:
        """The boto3 S3 client of this process (created on first use, recreated after fork)."""
        pid = os.getpid()
        client = self._client
        if client is not None and self._client_pid == pid:
            return client
        with _CLIENT_LOCK:
            if self._client is not None and self._client_pid == pid:
                return self._client
            import boto3

            session = boto3.session.Session()  # sessions are not thread-safe: one per client
            client = session.client("s3", config=self._botocore_config(), **self._client_kwargs)
            self._client = client
            self._client_pid = pid
            return client

    # -- retry loop and error mapping -----------------------------------------------------

    def _key(self, key: str) -> str:
        self.checked_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _full_prefix(self, prefix: str) -> str:
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def _rel(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    def _is_retryable(self, e: BaseException, attempt: int = 0) -> bool:
        from botocore import exceptions as bce

        if isinstance(e, _TruncatedBody):
            return True
        if isinstance(e, (bce.EndpointConnectionError, bce.ConnectTimeoutError)):
            return self._reached or attempt < 1  # never answered: one more try, then a clear error
        if isinstance(e, bce.ClientError):
            code, status, _ = _client_error_info(e)
            return code in _RETRY_CODES or (status is not None and (status >= 500 or status == 429))
        stream_errors = [bce.IncompleteReadError, bce.ReadTimeoutError, bce.ConnectionClosedError, bce.HTTPClientError]
        if hasattr(bce, "ResponseStreamingError"):
            stream_errors.append(bce.ResponseStreamingError)
        if isinstance(e, tuple(stream_errors)):
            return True
        try:
            import http.client

            import urllib3.exceptions as u3

            if isinstance(e, (u3.ProtocolError, u3.ReadTimeoutError, u3.IncompleteRead, http.client.IncompleteRead)):
                return True
        except ImportError:  # pragma: no cover
            pass
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        cause = e.__cause__ or e.__context__
        if cause is not None and cause is not e and type(e).__name__ == "S3UploadFailedError":
            return self._is_retryable(cause)
        return False

    def _where(self, op: str, key: str | None) -> str:
        target = f"s3://{self.bucket}/{self._key(key)}" if key else self.url
        return f"{op} {target}"

    def _to_storage_error(
        self, op: str, key: str | None, e: BaseException, attempts: int, elapsed: float
    ) -> StorageError | None:
        from botocore import exceptions as bce

        ep, bucket, where = self.endpoint, self.bucket, self._where(op, key)
        if isinstance(e, (bce.NoCredentialsError, bce.PartialCredentialsError)):
            return StorageError(
                f"no usable AWS credentials for bucket {bucket} at {ep} ({where}): set "
                f"AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or pass aws_access_key_id/"
                f"aws_secret_access_key in storage_options"
            )
        if isinstance(e, bce.ClientError):
            code, status, msg = _client_error_info(e)
            if code in _CREDENTIAL_CODES or status == 403:
                return StorageError(
                    f"credentials rejected by {ep} for bucket {bucket} ({code or status}: {msg or 'Forbidden'}; "
                    f"during {where}): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, "
                    f"AWS_SESSION_TOKEN) or storage_options, and that they may read and write this bucket"
                )
            if code == "NoSuchBucket" or (op == "HeadBucket" and status == 404):
                return StorageError(f"bucket {bucket} does not exist at {ep}: create it or fix the URL ({self.url})")
            if code in ("PermanentRedirect", "301", "AuthorizationHeaderMalformed") or status == 301:
                return StorageError(
                    f"bucket {bucket} is in another region than the client uses at {ep}: set region_name "
                    f"in storage_options or AWS_REGION"
                )
            if self._is_retryable(e):
                return StorageError(
                    f"S3 {where} at {ep} kept failing for {elapsed:.0f} s ({attempts} attempt{'s' if attempts != 1 else ''}, last: {code} {msg}): "
                    f"the server is overloaded or unstable; rerun the same call to resume"
                )
            return StorageError(f"S3 {where} at {ep} failed: {code or status} {msg}")
        if isinstance(e, (bce.EndpointConnectionError, bce.ConnectTimeoutError)) and not self._reached:
            return StorageError(
                f"cannot reach S3 endpoint {ep} for bucket {bucket} ({type(e).__name__}): check endpoint_url "
                f"(storage_options or AWS_ENDPOINT_URL), the network, and that the server is running"
            )
        if self._is_retryable(e):
            return StorageError(
                f"S3 {where} at {ep} kept failing for {elapsed:.0f} s ({attempts} attempt{'s' if attempts != 1 else ''}, last: "
                f"{type(e).__name__}: {e}): the network or the server is unstable; rerun the same call to resume"
            )
        if isinstance(e, bce.BotoCoreError):
            return StorageError(f"S3 {where} at {ep} failed: {type(e).__name__}: {e}")
        return None

    def _run(self, op: str, key: str | None, fn: Callable[[int], T]) -> T:
        """Run ``fn(attempt)`` with bounded retries; map final failures to StorageError."""
        start = time.monotonic()
        deadline = start + self.retry_timeout
        attempt = 0
        while True:
            try:
                result = fn(attempt)
                self._reached = True
                return result
            except (StorageError, FileNotFoundError, ValueError):
                raise
            except Exception as e:
                if self._is_retryable(e, attempt):
                    delay = min(4.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)
                    if time.monotonic() + delay < deadline:
                        attempt += 1
                        time.sleep(delay)
                        continue
                err = self._to_storage_error(op, key, e, attempt + 1, time.monotonic() - start)
                if err is None:
                    raise
                raise err from e

    # -- single attempts ------------------------------------------------------------------

    def _get_once(self, full_key: str, byte_range: str | None = None) -> tuple[bytes, str] | None:
        """One GET (of ``byte_range``, "bytes=a-b", if given): (bytes, etag) or None if
        missing; _TruncatedBody if cut short; b"" for a range starting past the end."""
        from botocore.exceptions import ClientError

        extra = {"Range": byte_range} if byte_range else {}
        try:
            r = self.client().get_object(Bucket=self.bucket, Key=full_key, **extra)
        except ClientError as e:
            code, status, _ = _client_error_info(e)
            if code in ("NoSuchKey", "404") or (status == 404 and code != "NoSuchBucket"):
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
            raise _TruncatedBody(f"got {len(data)} of {expected} bytes")
        return data, r.get("ETag", "")

    def _head_once(self, full_key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            head: dict[str, Any] = self.client().head_object(Bucket=self.bucket, Key=full_key)
            return head
        except ValueError as e:  # botocore could not parse headers cut short by the network: retry
            raise _TruncatedBody(f"unparseable HEAD response: {e}") from e
        except ClientError as e:
            code, status, _ = _client_error_info(e)
            if code in ("NoSuchKey", "404", "NotFound") or status == 404:
                return None
            raise

    def _conditional_put(self, op: str, key: str, data: bytes, **condition: str) -> bool:
        """PUT with If-None-Match/If-Match; False on 412.

        A conditional PUT is not idempotent: if the server applied our first attempt but the
        answer was lost (connection reset), the retry gets 412 although we succeeded. So
        after any retry a 412 is checked by reading the object back: if it holds exactly our
        bytes, the write was ours.
        """
        from botocore.exceptions import ClientError

        full = self._key(key)
        body = bytes(data)

        def once(attempt: int) -> bool:
            try:
                self.client().put_object(
                    Bucket=self.bucket, Key=full, Body=body, ChecksumAlgorithm=UPLOAD_CHECKSUM, **condition
                )
                return True
            except ClientError as e:
                code, status, _ = _client_error_info(e)
                if status == 412 or code == "PreconditionFailed":
                    if attempt > 0 or _retried(e):
                        got = self._get_once(full)
                        return got is not None and got[0] == body
                    return False
                if "IfMatch" in condition and (code in ("NoSuchKey", "404") or status == 404):
                    return False  # deleted since it was read
                raise  # 409 ConditionalRequestConflict is retried by _run

        return self._run(op, key, once)

    # -- Storage API ----------------------------------------------------------------------

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        # A PUT is durable when it returns: ``durable`` changes nothing on S3.
        full = self._key(key)
        if len(data) < self.multipart_threshold:
            body = bytes(data)
            args = {"Bucket": self.bucket, "Key": full, "Body": body, "ChecksumAlgorithm": UPLOAD_CHECKSUM}
            self._run("PUT", key, lambda _a: self.client().put_object(**args))
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

        self._run("multipart PUT", key, upload)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        return self._conditional_put("PUT If-None-Match", key, data, IfNoneMatch="*")

    def read_bytes(self, key: str) -> bytes:
        full = self._key(key)
        got = self._run("GET", key, lambda _a: self._get_once(full))
        if got is None:
            raise FileNotFoundError(errno.ENOENT, "no such S3 object", f"s3://{self.bucket}/{full}")
        return got[0]

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        full = self._key(key)
        return self._run("GET", key, lambda _a: self._get_once(full))

    def replace_if_version(self, key: str, data: bytes, version: str) -> bool:
        return self._conditional_put("PUT If-Match", key, data, IfMatch=version)

    def exists(self, key: str) -> bool:
        full = self._key(key)
        return self._run("HEAD", key, lambda _a: self._head_once(full)) is not None

    def size(self, key: str) -> int:
        full = self._key(key)

        def head_with_length(_attempt: int) -> dict[str, Any] | None:
            head = self._head_once(full)
            if head is not None and "ContentLength" not in head:  # headers cut short: retry
                raise _TruncatedBody("HEAD response without Content-Length")
            return head

        head = self._run("HEAD", key, head_with_length)
        if head is None:
            raise FileNotFoundError(errno.ENOENT, "no such S3 object", f"s3://{self.bucket}/{full}")
        return int(head["ContentLength"])

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

            page = self._run("LIST", None, once)
            objects.extend(o for o in page.get("Contents", ()) if not o["Key"].endswith("/"))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return objects

    def _list_full(self, full_prefix: str) -> builtins.list[str]:
        return [o["Key"] for o in self._list_objects(full_prefix)]

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self._rel(k) for k in self._list_full(self._full_prefix(prefix)))

    def read_range(self, key: str, start: int, length: int) -> bytes:
        check_range(start, length)
        full = self._key(key)
        if length == 0:
            got = (b"", "") if self.exists(key) else None
        else:
            span = f"bytes={start}-{start + length - 1}"
            got = self._run("GET range", key, lambda _a: self._get_once(full, span))
        if got is None:
            raise FileNotFoundError(errno.ENOENT, "no such S3 object", f"s3://{self.bucket}/{full}")
        body = got[0]
        return bytes(body[start : start + length] if len(body) > length else body)  # a server may ignore Range

    def list_info(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        infos = []
        for o in self._list_objects(self._full_prefix(prefix)):
            modified, etag = o.get("LastModified"), str(o.get("ETag", "")).strip('"')
            infos.append(
                ObjectInfo(self._rel(o["Key"]), int(o.get("Size", 0)), etag, modified and modified.timestamp())
            )
        return sorted(infos, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        full = self._key(key)
        self._run("DELETE", key, lambda _a: self.client().delete_object(Bucket=self.bucket, Key=full))

    def delete_prefix(self, prefix: str) -> None:
        keys = self._list_full(self._full_prefix(prefix))
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

            self._run("DELETE prefix", None, once)

    def local_path(self, key: str) -> str | None:
        return None

    def with_short_retries(self, seconds: float = 5.0) -> S3Storage:
        impatient = copy.copy(self)  # shares the client; only the retry budget differs
        impatient.retry_timeout = min(seconds, self.retry_timeout)
        return impatient

    def download_to(self, key: str, local_path: str, *, durable: bool = True) -> None:
        full = self._key(key)

        def once(_attempt: int) -> bool:
            from botocore.exceptions import ClientError

            try:
                r = self.client().get_object(Bucket=self.bucket, Key=full)
            except ClientError as e:
                code, status, _ = _client_error_info(e)
                if code in ("NoSuchKey", "404") or (status == 404 and code != "NoSuchBucket"):
                    return False
                raise

            def body() -> Iterator[bytes]:  # a cut body raises before the file is renamed into place
                n = 0
                for chunk in r["Body"].iter_chunks(1 * _MiB):
                    n += len(chunk)
                    yield chunk
                if n != r.get("ContentLength", n):
                    raise _TruncatedBody(f"got {n} of {r['ContentLength']} bytes")

            try:  # a full or unwritable local disk stays an OSError (not retried, not mapped by _run)
                download_atomically(local_path, body(), durable=durable)
            finally:
                r["Body"].close()
            return True

        if not self._run("GET", key, once):
            raise FileNotFoundError(errno.ENOENT, "no such S3 object", f"s3://{self.bucket}/{full}")

    def check(self) -> None:
        """One cheap HeadBucket at run start, so a wrong bucket, endpoint or credentials fail
        immediately with a message that says which and how to fix it."""
        self._run("HeadBucket", None, lambda _a: self.client().head_bucket(Bucket=self.bucket))


def open_s3(url: str, storage_options: dict[str, Any] | None = None, *, create: bool = False) -> S3Storage:
    """The registry's factory for ``s3://bucket/prefix`` (nothing is created: see ``check``)."""
    return S3Storage(url, storage_options)


register_backend("s3", open_s3)

"""The Google Cloud Storage backend (``gs://bucket/prefix``; ``gcs://`` is an alias).

Client: the official ``google-cloud-storage`` SDK (extra ``shardwright[gcs]``), chosen by
measurement over obstore (benchmarks/README.md): its JSON API is what fake-gcs-server
implements, and it exposes every precondition we need.

Every guarantee of the interface maps onto one GCS feature:

* atomic replace: an object upload is visible only once complete. Every write is one
  multipart request, at any size (our own request on the SDK's authorized session: one
  request per chunk where the SDK's resumable upload takes two).
* create-if-absent: ``ifGenerationMatch=0``; compare-and-swap: ``ifGenerationMatch=<generation>``
  (the version token is the generation). Multipart uploads are the one upload path on which
  fake-gcs-server enforces the precondition (it ignores it on resumable uploads, with or
  without a chunk size, on media uploads, copies and deletes: checked with v1.54); nothing is
  deleted or copied conditionally.
* checksums: every upload sends its CRC32C in the multipart metadata, which GCS verifies; we
  also compare the CRC32C the service reports for the stored object with ours and rewrite on a
  mismatch (fake-gcs-server does not verify what is sent, but does report what it stored: that
  comparison is what the tests cover). Whole-object downloads are checked against the
  service's CRC32C (``x-goog-hash``): each is our own GET read in 1 MiB pieces (the SDK reads
  8 KiB at a time); ranges are not checked (GCS sends no checksum of a part).
* retries: the SDK's retry policies are off; one loop (``retry_timeout``, default 60 s,
  exponential backoff with jitter) retries 408/429/5xx, timeouts, connection resets and bodies
  cut short. A conditional write whose reply was lost counts as ours when the object holds
  exactly our bytes (see :meth:`CloudStorage.conditional_write`).

Credentials are Google's default chain (``GOOGLE_APPLICATION_CREDENTIALS``, the gcloud ADC
file, the metadata server), or a ``credentials`` object in storage_options.
``STORAGE_EMULATOR_HOST`` is honoured as google-cloud-storage does, with anonymous credentials
(so nothing ever probes a metadata server for an emulator).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from ..errors import OutputDirError, StorageError
from .base import ObjectInfo, check_range
from .cloud import BoundedBuffer, CloudStorage, TooLarge, TruncatedBody, pop_number, refuse_options
from .failure import RETRY_STATUS, Failure, Fixes
from .registry import parse_location, register_backend

__all__ = ["GCSStorage", "check_option_names", "open_gcs"]

_MiB = 1024 * 1024
_TIMEOUT = (5.0, 60.0)  # (connect, read) seconds per request
_OPTIONS = ("project", "credentials", "api_endpoint", "retry_timeout")
# gcsfs/fsspec spellings: refused with the right key (never mapped: see refuse_options)
_FSSPEC_NAMES = {
    "token": "'credentials' (a google.auth credentials object), or GOOGLE_APPLICATION_CREDENTIALS for a key file",
    "anon": "'credentials': google.auth.credentials.AnonymousCredentials()",
    "endpoint_url": "'api_endpoint' (or STORAGE_EMULATOR_HOST for an emulator)",
    "access": "nothing: shardwright needs read and write access",
    "consistency": "nothing: uploads are always checked with CRC32C",
    "requester_pays": "nothing (not supported)",
    "session_kwargs": "nothing (not supported)",
    "default_location": "nothing: create the bucket yourself",
    "aws_access_key_id": "GOOGLE_APPLICATION_CREDENTIALS (S3 keys are for s3:// only)",
    "aws_secret_access_key": "GOOGLE_APPLICATION_CREDENTIALS (S3 keys are for s3:// only)",
}
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
#: google-resumable-media's errors (by name: the module is the SDK's): a reply cut short, a
#: download failing its CRC32C
_TRANSIENT_TYPE_NAMES = frozenset({"DataCorruption"})
_FIXES = Fixes(
    "GCS",
    "bucket",
    {
        Failure.NO_CREDENTIALS: "tried GOOGLE_APPLICATION_CREDENTIALS, the gcloud application-default file and the "
        "metadata server: run `gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to a key "
        "file, pass storage_options={'credentials': ...}, or set STORAGE_EMULATOR_HOST for an emulator",
        Failure.REJECTED: "check GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`, and that "
        "the account may read and write this bucket (roles/storage.objectAdmin)",
        Failure.UNREACHABLE: "check STORAGE_EMULATOR_HOST or storage_options['api_endpoint'], the network, and that "
        "the service is up",
    },
    credentials="Google Cloud",
)
_TOKEN_FIX = (
    "check the credentials (GOOGLE_APPLICATION_CREDENTIALS, the gcloud application-default file or "
    "storage_options['credentials']): their token endpoint (token_uri) must be right and reachable"
)


def _transient_requests_errors() -> tuple[type[BaseException], ...]:
    """requests' transient errors (a reset or cut connection, a timeout): imported on use."""
    import requests

    return (
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
        requests.exceptions.ChunkedEncodingError,
    )


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:300] if str(e) else ""


def check_option_names(options: dict[str, Any]) -> None:
    """UsageError for a gcsfs-style or unknown key (pure: nothing is contacted)."""
    refuse_options("gs", options, _FSSPEC_NAMES, _OPTIONS)


def _checked_credentials(value: Any) -> Any:
    """``storage_options['credentials']``: a google.auth credentials object (or None). A dict
    or a path (a key file's contents or name, as gcsfs's ``token`` takes) is refused here with
    the fix, not as the SDK's ValueError on first use."""
    if value is None:
        return None
    try:
        from google.auth.credentials import Credentials
    except ImportError:  # the SDK is missing: make_client says which extra to install
        return value
    if isinstance(value, Credentials):
        return value
    if isinstance(value, dict):
        fix = (
            "for a service-account key pass google.oauth2.service_account.Credentials.from_service_account_info(d), "
            "or set GOOGLE_APPLICATION_CREDENTIALS to the key file"
        )
    elif isinstance(value, (str, bytes, os.PathLike)):
        fix = (
            "for a key file set GOOGLE_APPLICATION_CREDENTIALS to its path, or pass "
            "google.oauth2.service_account.Credentials.from_service_account_file(path)"
        )
    else:
        fix = "pass a google.auth credentials object (google.oauth2.service_account.Credentials, ...)"
    raise OutputDirError(
        f"storage_options['credentials'] for gs:// must be a google.auth credentials object; got "
        f"{type(value).__name__}: {fix}"
    )


def parse_gcs_url(url: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``gs://bucket/prefix`` or ``gcs://bucket/prefix``: the registry's
    one check of a location (no bucket, ``//``, ``.``, ``..``), then GCS's bucket-name rules."""
    location = parse_location(url)
    bucket = location.bucket
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise OutputDirError(
            f"invalid GCS bucket name {bucket!r} in {url!r}: use 3-222 lowercase letters, digits, '-', '_' or '.' "
            "(gs://bucket/prefix)"
        )
    return bucket, location.prefix


class GCSStorage(CloudStorage):
    """Objects under ``gs://bucket/prefix`` (see the module docstring for the guarantees).

    ``storage_options``: ``project``, ``credentials`` (a google.auth credentials object),
    ``api_endpoint``, and the shardwright setting ``retry_timeout`` (seconds).
    """

    scheme = "gs"
    fixes = _FIXES

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        super().__init__()
        self.bucket, self.prefix = parse_gcs_url(url)
        self.url = f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}"
        opts = dict(storage_options or {})
        check_option_names(opts)
        self.retry_timeout = pop_number(opts, "retry_timeout", self.retry_timeout, minimum=0, maximum=86400)
        self._project = opts.pop("project", None)
        self._credentials = _checked_credentials(opts.pop("credentials", None))  # never printed
        self._api_endpoint = opts.pop("api_endpoint", None)
        self._session: Any = None
        for name, value in (("project", self._project), ("api_endpoint", self._api_endpoint)):
            if value is not None and not isinstance(value, str):
                raise OutputDirError(f"storage_options[{name!r}] must be a str; got {type(value).__name__}")

    def __repr__(self) -> str:
        return f"GCSStorage({self.url!r}, endpoint={self.endpoint!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_session"] = None
        return state

    # -- client ------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Where requests go (part of the location's identity: the reader's cache key)."""
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if self._api_endpoint:
            return self._api_endpoint.rstrip("/")
        if emulator:
            return emulator if "://" in emulator else f"http://{emulator}"
        return "https://storage.googleapis.com"

    def make_client(self) -> Any:
        try:
            from google.cloud import storage
        except ImportError:
            raise StorageError("gs:// needs google-cloud-storage: pip install 'shardwright[gcs]'") from None
        credentials = self._credentials
        project = self._project
        options = {"api_endpoint": self._api_endpoint} if self._api_endpoint else None
        if credentials is None and os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()  # an emulator: never look for real credentials
        elif credentials is None:
            import google.auth

            credentials, default_project = google.auth.default(
                scopes=["https://www.googleapis.com/auth/devstorage.read_write"]
            )
            project = project or default_project
        # A connection pool as large as the threads that share this client (workers' uploads,
        # the committer, prefetching readers); requests' default of 10 discards connections.
        import requests.adapters
        from google.auth.transport.requests import AuthorizedSession

        session = AuthorizedSession(credentials)
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        self._session = session  # this process's, like the client (dropped when pickled)
        return storage.Client(project=project, credentials=credentials, client_options=options, _http=session)

    def _blob(self, full_key: str) -> Any:
        return self.client().bucket(self.bucket).blob(full_key)

    # -- errors --------------------------------------------------------------------------------

    def object_url(self, full_key: str) -> str:
        return f"gs://{self.bucket}/{full_key}"

    @staticmethod
    def _status(e: BaseException) -> int | None:
        code = getattr(e, "code", None)
        if isinstance(code, int):
            return code
        response = getattr(e, "response", None)
        status = getattr(response, "status_code", None)
        return status if isinstance(status, int) else None

    def failure(self, e: BaseException) -> Failure:
        import json

        import requests
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        status = self._status(e)
        if isinstance(e, (TruncatedBody, json.JSONDecodeError)) or type(e).__name__ in _TRANSIENT_TYPE_NAMES:
            return Failure.TRANSIENT  # a body or JSON reply cut short, a download failing its checksum
        if isinstance(e, auth_exc.DefaultCredentialsError):
            return Failure.NO_CREDENTIALS
        if isinstance(e, auth_exc.TransportError):
            return Failure.UNREACHABLE  # the credentials' token endpoint (see to_storage_error)
        if isinstance(e, auth_exc.RefreshError) or status in (401, 403):
            return Failure.REJECTED
        if isinstance(e, gexc.NotFound) or status == 404:
            return Failure.NO_BUCKET  # an object's 404 is an answer inside each operation, never raised
        if isinstance(e, (requests.exceptions.ConnectionError, ConnectionRefusedError)) and not isinstance(
            e, requests.exceptions.ChunkedEncodingError
        ):
            return Failure.UNREACHABLE
        if isinstance(e, gexc.GoogleAPICallError) or type(e).__name__ == "InvalidResponse":
            return Failure.TRANSIENT if status in RETRY_STATUS else Failure.OTHER
        if isinstance(e, (*_transient_requests_errors(), ConnectionError, TimeoutError)):
            return Failure.TRANSIENT
        return Failure.OTHER

    def detail(self, e: BaseException) -> str | None:
        from google.api_core import exceptions as gexc

        if isinstance(e, gexc.GoogleAPICallError):
            return f"{self._status(e)} {getattr(e, 'message', '')}".rstrip()
        return None

    def to_storage_error(
        self, op: str, key: str | None, e: BaseException, attempts: int, elapsed: float, kind: Failure
    ) -> BaseException:
        from google.auth import exceptions as auth_exc

        if isinstance(e, auth_exc.TransportError):  # not the storage endpoint: the token's
            how = "did not answer" if kind is Failure.UNREACHABLE else f"kept failing for {elapsed:.0f} s"
            return StorageError(
                f"could not get an access token for {self.url}: the credentials' token endpoint {how} "
                f"({type(e).__name__}: {_first_line(e)}): {_TOKEN_FIX}"
            )
        return super().to_storage_error(op, key, e, attempts, elapsed, kind)

    # -- single attempts ---------------------------------------------------------------------

    def get_versioned(self, full_key: str) -> tuple[bytes, str] | None:
        import io

        buffer = io.BytesIO()
        got = self._fetch(full_key, buffer)
        if got is None:
            return None
        data = buffer.getvalue()
        if len(data) != got[0]:
            raise TruncatedBody(f"got {len(data)} of {got[0]} bytes")
        return data, got[1]

    def get_at_most(self, full_key: str, limit: int) -> tuple[bytes | None, str] | None:
        buffer = BoundedBuffer(limit)
        try:
            got = self._fetch(full_key, buffer, limit)
        except TooLarge:  # more bytes than Content-Length said (or none was sent)
            return None, ""
        if got is None:
            return None
        size, generation = got
        if size > limit:
            return None, generation  # judged from Content-Length: the body was not read
        if buffer.tell() != size:
            raise TruncatedBody(f"got {buffer.tell()} of {size} bytes")
        return buffer.getvalue(), generation

    @staticmethod
    def _check_stored(stored_crc32c: str | None, ours: str) -> None:
        """Rewrite (retry) when the service stored other bytes than we sent: GCS refuses such an
        upload itself by the CRC32C we send; fake-gcs-server does not, but reports its own."""
        if stored_crc32c is not None and stored_crc32c != ours:
            raise TruncatedBody(f"stored CRC32C {stored_crc32c} != sent {ours}: rewriting")

    def _upload(self, full_key: str, parts: Sequence[Any], generation: int | None) -> str | None:
        """One multipart upload of ``parts`` joined, at any size; ``generation``: None (overwrite)
        or ``ifGenerationMatch`` (0: must not exist). The generation written ("" if the reply
        named none), None when the precondition failed.

        Every write is a single multipart request. Conditional ones must be: fake-gcs-server
        enforces ``ifGenerationMatch`` on multipart uploads only (not on resumable ones,
        whatever their chunk size: checked with v1.54), and the SDK switches to a resumable
        upload above 8 MiB. Unconditional ones too since issue 36: the SDK's resumable upload
        costs two requests per chunk (start, then the bytes), its multipart one a join of the
        chunk the parts here are joined into anyway. GCS takes multipart uploads of any size;
        the metadata carries the CRC32C, which GCS verifies."""
        import base64
        import json
        import uuid
        from urllib.parse import quote

        import google_crc32c
        from google.api_core import exceptions as gexc

        self.client()  # this process's client and session
        checksum = google_crc32c.Checksum()
        for part in parts:
            checksum.update(part if isinstance(part, bytes) else bytes(part))
        crc = base64.b64encode(checksum.digest()).decode()
        boundary = "sw-" + uuid.uuid4().hex  # 128 random bits: never found inside the data
        meta = json.dumps({"name": full_key, "contentType": "application/octet-stream", "crc32c": crc})
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n".encode(),
                f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                *parts,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        url = f"{self.endpoint}/upload/storage/v1/b/{quote(self.bucket, safe='')}/o?uploadType=multipart"
        if generation is not None:
            url += f"&ifGenerationMatch={generation}"
        response = self._session.post(
            url, data=body, headers={"Content-Type": f"multipart/related; boundary={boundary}"}, timeout=_TIMEOUT
        )
        if generation is not None and response.status_code == 412:
            return None
        if generation and response.status_code == 404:
            return None  # the object was deleted since it was read
        if response.status_code >= 300:
            raise gexc.from_http_response(response)
        stored = response.json()  # a body cut short is a JSONDecodeError: retried
        self._check_stored(stored.get("crc32c"), crc)
        return str(stored.get("generation") or "")

    # -- Storage API -------------------------------------------------------------------------

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        # An upload is durable when it returns: ``durable`` changes nothing on GCS.
        self.write_parts(key, [data])

    def write_parts(self, key: str, parts: Sequence[bytes], *, durable: bool = True) -> None:
        # parts joined once, into the request's body (no joined copy of the chunk first)
        full = self._key(key)
        self.run("PUT", key, lambda _a: self._upload(full, parts, None))

    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        if version is None:
            generation = 0  # ifGenerationMatch=0: must not exist
        else:
            try:
                generation = int(version)
            except (TypeError, ValueError):
                return None  # not a generation of this store: it cannot match
            if not generation:
                return None
        full = self._key(key)
        op = "PUT ifGenerationMatch=0" if version is None else "PUT ifGenerationMatch"
        return self.conditional_write(op, key, data, lambda: self._upload(full, [data], generation))

    def head(self, key: str) -> ObjectInfo | None:
        full = self._key(key)

        def once(_attempt: int) -> ObjectInfo | None:
            blob = self.client().bucket(self.bucket).get_blob(full, retry=None, timeout=_TIMEOUT)
            return None if blob is None else self._info(blob)

        return self.run("HEAD", key, once)

    def _info(self, blob: Any) -> ObjectInfo:
        updated = blob.updated
        return ObjectInfo(
            self._rel(blob.name), int(blob.size or 0), str(blob.generation), updated.timestamp() if updated else None
        )

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from ``start`` (fewer at the end of the object)."""
        check_range(start, length)
        full = self._key(key)

        def once(_attempt: int) -> bytes | None:
            from google.api_core import exceptions as gexc

            if length == 0:
                return b"" if self.client().bucket(self.bucket).get_blob(full, retry=None, timeout=_TIMEOUT) else None
            try:
                return self._blob(full).download_as_bytes(
                    start=start, end=start + length - 1, retry=None, timeout=_TIMEOUT, checksum=None
                )
            except gexc.NotFound:
                return None
            except gexc.RequestRangeNotSatisfiable:
                return b""

        got = self.run("GET range", key, once)
        if got is None:
            raise self._missing(key)
        return got

    def list_info(self, prefix: str = "") -> list[ObjectInfo]:
        full_prefix = self._full_prefix(prefix)

        def once(_attempt: int) -> list[ObjectInfo]:
            blobs = self.client().list_blobs(self.bucket, prefix=full_prefix, retry=None, timeout=_TIMEOUT)
            return [self._info(b) for b in _pages_read_whole(blobs) if not b.name.endswith("/")]

        return sorted(self.run("LIST", None, once), key=lambda info: info.key)

    def delete(self, key: str, *, durable: bool = True) -> None:
        full = self._key(key)

        def once(_attempt: int) -> None:
            from google.api_core import exceptions as gexc

            try:
                self._blob(full).delete(retry=None, timeout=_TIMEOUT)
            except gexc.NotFound:
                pass  # missing (or deleted by our first attempt whose reply was lost)

        self.run("DELETE", key, once)

    def download_to(self, key: str, local_path: str, *, durable: bool = True) -> None:
        full = self._key(key)

        def fetch(f: Any) -> int | None:
            got = self._fetch(full, f)
            return None if got is None else got[0]

        self.download_into(key, local_path, durable, fetch)

    def _fetch(self, full_key: str, f: Any, limit: int | None = None) -> tuple[int, str] | None:
        """One GET of ``full_key`` written into ``f``: (its size, its generation), None when missing.
        With a ``limit``, an object whose Content-Length is larger returns at once, its body unread.

        Our own request on the client's session (as :meth:`_upload`), read in
        1 MiB pieces: the SDK's download reads and checksums the body 8 KiB at a time, a
        Python loop of ~13,000 turns per 100 MB that cost the cold reader more CPU than the
        bytes themselves on the same cores (issue 36's profile). The body is checked against
        the CRC32C the service sends (``x-goog-hash``), as the SDK does; a body cut short or
        a checksum that does not match is retried (TruncatedBody)."""
        import base64
        from urllib.parse import quote

        import google_crc32c
        from google.api_core import exceptions as gexc
        from urllib3.exceptions import HTTPError as Urllib3Error

        self.client()  # this process's client and session
        url = f"{self.endpoint}/download/storage/v1/b/{quote(self.bucket, safe='')}/o/{quote(full_key, safe='')}"
        # identity: the stored bytes as they are, which x-goog-hash describes (never transcoded)
        with self._session.get(
            url, params={"alt": "media"}, headers={"Accept-Encoding": "identity"}, stream=True, timeout=_TIMEOUT
        ) as response:
            if response.status_code == 404:
                return None
            if response.status_code >= 300:
                raise gexc.from_http_response(response)
            headers = response.headers
            generation = headers.get("x-goog-generation")
            if generation is None:  # headers cut short: retry
                raise TruncatedBody("download without x-goog-generation")
            if headers.get("x-goog-stored-content-encoding", "identity") != "identity":
                return self._sdk_fetch(full_key, f)  # a gzip-encoded object (not ours): the SDK decodes it
            announced = headers.get("Content-Length")
            if limit is not None and announced is not None and int(announced) > limit:
                return int(announced), str(generation)
            hashes = dict(
                part.strip().split("=", 1) for part in headers.get("x-goog-hash", "").split(",") if "=" in part
            )
            crc = google_crc32c.Checksum()
            try:
                while piece := response.raw.read(_MiB, decode_content=False):
                    f.write(piece)
                    crc.update(piece)
            except (Urllib3Error, OSError) as e:  # a reset or a body cut short (urllib3 checks the length)
                if isinstance(e, OSError) and not isinstance(e, ConnectionError):
                    raise  # the local file (disk full): the caller's to fix, not retried
                raise TruncatedBody(f"download cut short: {type(e).__name__}") from e
        sent = hashes.get("crc32c")
        if sent is not None and base64.b64encode(crc.digest()).decode() != sent:
            raise TruncatedBody(f"downloaded CRC32C does not match the service's {sent}: fetching again")
        return (int(announced) if announced is not None else f.tell()), str(generation)

    def _sdk_fetch(self, full_key: str, f: Any) -> tuple[int, str] | None:
        from google.api_core import exceptions as gexc

        blob = self._blob(full_key)
        try:
            blob.download_to_file(f, retry=None, timeout=_TIMEOUT, checksum="crc32c")
        except gexc.NotFound:
            return None
        if blob.generation is None:  # headers cut short: retry
            raise TruncatedBody("download without x-goog-generation")
        return (int(blob.size) if blob.size is not None else f.tell()), str(blob.generation)

    def check(self) -> None:
        """One cheap listing (at most one object) at run start: a wrong bucket, endpoint or
        credentials fail now. A listing, not a bucket lookup: storage.buckets.get is not in
        roles/storage.objectAdmin, which is all a writer needs."""

        def once(_attempt: int) -> None:
            blobs = self.client().list_blobs(
                self.bucket, prefix=self._full_prefix(""), max_results=1, retry=None, timeout=_TIMEOUT
            )
            list(_pages_read_whole(blobs))

        self.run("LIST", None, once)


def _pages_read_whole(blobs: Any) -> list[Any]:
    """Every item of a listing; TruncatedBody (retried) when a page came back cut short: the
    SDK then hands its page parser the raw bytes, which fail as an AttributeError."""
    try:
        return list(blobs)
    except AttributeError as e:
        raise TruncatedBody(f"listing page cut short: {e}") from e


def open_gcs(url: str, storage_options: dict[str, Any] | None = None, *, create: bool = False) -> GCSStorage:
    """The registry's factory for ``gs://`` and ``gcs://`` (nothing is created: see ``check``)."""
    return GCSStorage(url, storage_options)


register_backend("gs", open_gcs, check_options=check_option_names)
register_backend("gcs", open_gcs, check_options=check_option_names)

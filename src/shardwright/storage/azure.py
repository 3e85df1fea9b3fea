"""The Azure Blob Storage backend: ``az://container/prefix`` (the account comes from the
credentials) and ``abfs://container@account.dfs.core.windows.net/prefix`` (``abfss://`` too).

Client: the official ``azure-storage-blob`` SDK (extra ``shardwright[azure]``), chosen by
measurement over obstore (benchmarks/README.md).

Every guarantee of the interface maps onto one Azure feature:

* atomic replace: Put Blob, or staged blocks that become visible all at once with Put Block
  List;
* create-if-absent: ``If-None-Match: *`` (409 to the loser); compare-and-swap: ``If-Match:
  <etag>`` (412 to the loser); the version token is the etag. Azurite enforces both on Put
  Blob and Put Block List, the only write paths used.
* checksums: every request that carries data sends its Content-MD5 (``validate_content``),
  which Azure (and Azurite: tested) verifies before storing anything.
* retries: the SDK's retry policy is off; one loop (``retry_timeout``, default 60 s,
  exponential backoff with jitter) retries 408/429/5xx, timeouts, connection resets and bodies
  cut short. A conditional write whose reply was lost counts as ours when the blob holds
  exactly our bytes (see :meth:`CloudStorage.conditional_write`).

Credentials, first match wins (all resolved before anything is contacted):
``storage_options`` ``connection_string``; ``account_url`` + ``credential``;
``account_name`` + ``account_key``; ``account_name``/``account_url`` + ``sas_token``;
``AZURE_STORAGE_CONNECTION_STRING``; ``AZURE_STORAGE_ACCOUNT`` + ``AZURE_STORAGE_KEY``; and, when
only the account is known (an abfs URL, ``account_url`` or ``account_name``),
DefaultAzureCredential from azure-identity.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import OutputDirError, StorageError
from ..secrets import without_url_credentials
from .azure_stream import fetch_blob
from .base import ObjectInfo, check_range
from .cloud import CloudStorage, TruncatedBody, pop_number, refuse_options
from .failure import RETRY_STATUS, Failure, Fixes
from .registry import parse_location, register_backend

__all__ = ["AzureStorage", "check_option_names", "open_azure", "parse_azure_url"]

_MiB = 1024 * 1024
_OPTIONS = (
    "connection_string",
    "account_name",
    "account_key",
    "account_url",
    "credential",
    "sas_token",
    "retry_timeout",
    "max_single_put_size",
    "max_block_size",
    "max_concurrency",
)
# adlfs/fsspec spellings: refused with the right key (never mapped: see refuse_options)
_FSSPEC_NAMES = {
    "anon": "nothing: give credentials (connection_string, account_key, credential or sas_token)",
    "client_id": "'credential': azure.identity.ClientSecretCredential(tenant_id, client_id, client_secret)",
    "client_secret": "'credential': azure.identity.ClientSecretCredential(tenant_id, client_id, client_secret)",
    "tenant_id": "'credential': azure.identity.ClientSecretCredential(tenant_id, client_id, client_secret)",
    "account_host": "'account_url' (https://ACCOUNT.blob.core.windows.net)",
    "blocksize": "'max_block_size' (bytes)",
    "default_fill_cache": "nothing (not supported)",
    "key": "'account_key'",
    "secret": "'account_key'",
    "token": "'credential' or 'sas_token'",
    "endpoint_url": "'account_url'",
    "aws_access_key_id": "'account_name' and 'account_key' (S3 keys are for s3:// only)",
    "aws_secret_access_key": "'account_name' and 'account_key' (S3 keys are for s3:// only)",
}
_CONTAINER_RE = re.compile(r"^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*$")
_ACCOUNT_RE = re.compile(r"^[a-z0-9]{3,24}$")
_NO_CREDENTIALS = (
    "tried storage_options connection_string / account_url+credential / account_name+account_key / sas_token, "
    "then AZURE_STORAGE_CONNECTION_STRING and AZURE_STORAGE_ACCOUNT+AZURE_STORAGE_KEY: set one of them, or name "
    "the account (abfs://container@ACCOUNT.dfs.core.windows.net/prefix or storage_options['account_url']) to use "
    "DefaultAzureCredential (az login, managed identity, AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
)


_FIXES = Fixes(
    "Azure",
    "container",
    {
        Failure.NO_CREDENTIALS: f"DefaultAzureCredential found none; {_NO_CREDENTIALS}",
        Failure.REJECTED: "check the connection string, account key, SAS token or credential (and "
        "AZURE_STORAGE_CONNECTION_STRING), and that they may read and write this container",
        Failure.UNREACHABLE: "check the account name, account_url or connection string, the network, and that the "
        "service is up",
    },
    credentials="Azure",
)


def _transient_errors() -> tuple[type[BaseException], ...]:
    """azure-core's errors of a reply that arrived broken or not at all (imported on use)."""
    from azure.core import exceptions as aexc

    return (aexc.ServiceResponseError, aexc.IncompleteReadError, aexc.DecodeError, aexc.DeserializationError)


def check_option_names(options: dict[str, Any]) -> None:
    """UsageError for an adlfs-style or unknown key (pure: nothing is contacted)."""
    refuse_options("az", options, _FSSPEC_NAMES, _OPTIONS)


def parse_azure_url(url: str) -> tuple[str, str | None, str]:
    """``(container, account or None, prefix)`` of ``az://container/prefix`` or
    ``abfs[s]://container@account.dfs.core.windows.net/prefix``: the registry's one check of a
    location (no container, ``//``, ``.``, ``..``), then Azure's naming rules; OutputDirError
    with the fix."""
    location = parse_location(url)
    scheme, authority = location.scheme, location.bucket
    if authority.startswith("@"):
        raise OutputDirError(
            f"invalid Azure URL {url!r}: no container; use abfs://container@account.dfs.core.windows.net/prefix"
        )
    account = None
    container = authority
    if scheme in ("abfs", "abfss"):
        am = re.match(r"^([^@]+)@([^.]+)\.(?:dfs|blob)\.core\.windows\.net$", authority, re.IGNORECASE)
        if not am:
            raise OutputDirError(
                f"invalid Azure URL {url!r}: write abfs://container@account.dfs.core.windows.net/prefix "
                "(or az://container/prefix with the account in the credentials)"
            )
        container, account = am.group(1), am.group(2).lower()
        if not _ACCOUNT_RE.match(account):
            raise OutputDirError(
                f"invalid Azure storage account name {account!r} in {url!r}: 3-24 lowercase letters or digits"
            )
    elif "@" in authority:
        raise OutputDirError(
            f"invalid Azure URL {url!r}: az:// takes the container only (az://container/prefix); "
            "for an explicit account write abfs://container@account.dfs.core.windows.net/prefix"
        )
    if not _CONTAINER_RE.match(container):
        raise OutputDirError(
            f"invalid Azure container name {container!r} in {url!r}: use 3-63 lowercase letters, digits and single "
            "hyphens (az://container/prefix)"
        )
    return container, account, location.prefix


def _connection_string_fields(value: str) -> dict[str, str]:
    fields = {}
    for part in value.split(";"):
        name, sep, val = part.partition("=")
        if sep:
            fields[name.strip().lower()] = val.strip()
    return fields


class AzureStorage(CloudStorage):
    """Blobs under ``az://container/prefix`` (see the module docstring for the guarantees)."""

    scheme = "az"
    fixes = _FIXES
    max_single_put_size: int = 32 * _MiB
    max_block_size: int = 16 * _MiB
    max_concurrency: int = 4

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        super().__init__()
        self.container, url_account, self.prefix = parse_azure_url(url)
        opts = dict(storage_options or {})
        check_option_names(opts)
        self.retry_timeout = pop_number(opts, "retry_timeout", self.retry_timeout, minimum=0, maximum=86400)
        self.max_single_put_size = int(
            pop_number(opts, "max_single_put_size", self.max_single_put_size, minimum=1, maximum=5000 * _MiB)
        )
        self.max_block_size = int(
            pop_number(opts, "max_block_size", self.max_block_size, minimum=1, maximum=4000 * _MiB)
        )
        self.max_concurrency = int(pop_number(opts, "max_concurrency", self.max_concurrency, minimum=1, maximum=64))
        for name, value in opts.items():
            if name != "credential" and not isinstance(value, str):
                raise OutputDirError(f"storage_options[{name!r}] for az:// must be a str; got {type(value).__name__}")
        # What the client is built from; may hold secrets: never printed (see __repr__).
        self._auth: dict[str, Any] = self._resolve_credentials(opts, url_account)
        self.account = self._auth["account"]
        if url_account and self.account != url_account:
            raise OutputDirError(
                f"{url!r} names the storage account {url_account} but the credentials are for {self.account}: "
                "use the matching credentials or URL"
            )
        self.account_url = self._auth["account_url"]
        if url_account or url.lower().startswith("abfs"):
            self.url = f"abfs://{self.container}@{self.account}.dfs.core.windows.net"
        else:
            self.url = f"az://{self.container}"
        if self.prefix:
            self.url += f"/{self.prefix}"

    @staticmethod
    def _resolve_credentials(opts: dict[str, Any], url_account: str | None) -> dict[str, Any]:
        """Which credential to use, without contacting anything; OutputDirError when none."""
        env = os.environ
        conn = opts.get("connection_string")
        if conn is None and not {"account_url", "account_name", "credential", "account_key", "sas_token"} & set(opts):
            conn = env.get("AZURE_STORAGE_CONNECTION_STRING") or None
        if conn:
            fields = _connection_string_fields(conn)
            account = fields.get("accountname", "").lower()
            endpoint = fields.get("blobendpoint")
            if not account and not endpoint:
                raise OutputDirError(
                    "the Azure connection string has no AccountName or BlobEndpoint: copy it whole from the portal "
                    "(Storage account > Access keys)"
                )
            if not endpoint:
                protocol = fields.get("defaultendpointsprotocol", "https")
                endpoint = f"{protocol}://{account}.blob.{fields.get('endpointsuffix', 'core.windows.net')}"
            account = account or _account_of(endpoint)
            return {"kind": "connection_string", "value": conn, "account": account, "account_url": _no_query(endpoint)}
        account_url = opts.get("account_url")
        name = opts.get("account_name") or url_account
        if account_url is None and name is None:
            name = env.get("AZURE_STORAGE_ACCOUNT") or env.get("AZURE_STORAGE_ACCOUNT_NAME") or None
        if account_url is None and name is None:
            raise OutputDirError(f"no Azure credentials found: {_NO_CREDENTIALS}")
        if account_url is None:
            account_url = f"https://{name}.blob.core.windows.net"
        account = (name or _account_of(account_url)).lower()
        if "credential" in opts:
            credential: Any = opts["credential"]
        elif "account_key" in opts:
            credential = {"account_name": account, "account_key": opts["account_key"]}
        elif "sas_token" in opts:
            credential = opts["sas_token"]
        elif env.get("AZURE_STORAGE_KEY") and "account_url" not in opts:
            credential = {"account_name": account, "account_key": env["AZURE_STORAGE_KEY"]}
        else:
            credential = None  # DefaultAzureCredential, created with the client
        return {"kind": "account", "credential": credential, "account": account, "account_url": _no_query(account_url)}

    def __repr__(self) -> str:
        return f"AzureStorage({self.url!r}, endpoint={self.endpoint!r})"

    # -- client ------------------------------------------------------------------------------

    @property
    def container_name(self) -> str:
        return self.container

    @property
    def endpoint(self) -> str:
        """The account's blob endpoint (part of the location's identity: the reader's cache key)."""
        return self.account_url

    def make_client(self) -> Any:
        try:
            from azure.storage.blob import BlobServiceClient
        except ImportError:
            raise StorageError("az:// needs azure-storage-blob: pip install 'shardwright[azure]'") from None
        kwargs: dict[str, Any] = dict(
            retry_total=0,  # our own loop retries (one budget, lost-reply checks)
            connection_timeout=5,
            read_timeout=60,
            max_single_put_size=self.max_single_put_size,
            max_block_size=self.max_block_size,
            connection_data_block_size=_MiB,  # downloads stream in 1 MiB pieces (azure_stream.py)
        )
        auth = self._auth
        if auth["kind"] == "connection_string":
            service = BlobServiceClient.from_connection_string(auth["value"], **kwargs)
        else:
            credential = auth["credential"]
            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            service = BlobServiceClient(auth["account_url"], credential=credential, **kwargs)
        return service.get_container_client(self.container)

    def _blob(self, full_key: str) -> Any:
        return self.client().get_blob_client(full_key)

    # -- errors ------------------------------------------------------------------------------

    def object_url(self, full_key: str) -> str:
        return f"{self.url.split('/', 3)[0]}//{self.url.split('/', 3)[2]}/{full_key}"

    @staticmethod
    def _status(e: BaseException) -> int | None:
        status = getattr(e, "status_code", None)
        return status if isinstance(status, int) else None

    @staticmethod
    def _code(e: BaseException) -> str:
        return str(getattr(e, "error_code", "") or "")

    def failure(self, e: BaseException) -> Failure:
        from azure.core import exceptions as aexc

        status, code = self._status(e), self._code(e)
        if isinstance(e, TruncatedBody):
            return Failure.TRANSIENT
        if type(e).__name__ == "CredentialUnavailableError":  # azure-identity's: DefaultAzureCredential found none
            return Failure.NO_CREDENTIALS
        if isinstance(e, aexc.ServiceRequestError):  # never sent (connect failure)
            return Failure.UNREACHABLE
        if isinstance(e, _transient_errors()):
            return Failure.TRANSIENT
        if isinstance(e, aexc.ClientAuthenticationError) or status in (401, 403):
            return Failure.REJECTED
        if "ContainerNotFound" in code:
            return Failure.NO_BUCKET
        if type(e) is aexc.AzureError and "MD5 mismatch" in str(e):  # validate_content: a reply cut or garbled
            return Failure.TRANSIENT
        if isinstance(e, aexc.HttpResponseError):
            # None: the reply never arrived whole ("Response ended prematurely"). A body damaged
            # in flight, refused by its Content-MD5: Azure says Md5Mismatch, Azurite
            # InvalidOperation "Provided contentMD5 doesn't match".
            damaged = "Md5Mismatch" in code or (status == 400 and "contentmd5" in str(e).lower())
            if status is None or status in RETRY_STATUS or damaged:
                return Failure.TRANSIENT
            return Failure.MISSING if status == 404 else Failure.OTHER
        if isinstance(e, (ConnectionError, TimeoutError)):
            return Failure.TRANSIENT
        return Failure.OTHER

    def detail(self, e: BaseException) -> str | None:
        from azure.core import exceptions as aexc

        if isinstance(e, aexc.HttpResponseError):
            return f"{self._status(e)} {self._code(e)}".rstrip()
        return None

    # -- single attempts ---------------------------------------------------------------------

    def get_versioned(self, full_key: str) -> tuple[bytes, str] | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            downloader = self._blob(full_key).download_blob(max_concurrency=1)
            data = downloader.readall()
        except ResourceNotFoundError as e:
            if "ContainerNotFound" in self._code(e):
                raise
            return None
        props = downloader.properties
        if props.size is not None and len(data) != props.size:
            raise TruncatedBody(f"got {len(data)} of {props.size} bytes")
        return data, str(props.etag)

    def get_at_most(self, full_key: str, limit: int) -> tuple[bytes | None, str] | None:
        # The SDK's first GET asks for the range 0..limit (capped at its single-GET size,
        # 32 MiB) and reads it before the object's size is known: so at most min(limit + 1,
        # 32 MiB) bytes arrive before an object too large is refused, and the rest is never
        # asked for.
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            downloader = self._blob(full_key).download_blob(offset=0, length=limit + 1, max_concurrency=1)
            etag = str(downloader.properties.etag)
            if downloader.size > limit:  # the range's length: limit + 1 exactly when the blob is larger
                return None, etag
            data = downloader.readall()
        except ResourceNotFoundError as e:
            if "ContainerNotFound" in self._code(e):
                raise
            return None
        except HttpResponseError as e:
            if self._status(e) == 416:  # an empty blob has no range: its plain GET is as small
                return self.get_versioned(full_key)
            raise
        if len(data) != downloader.size:
            raise TruncatedBody(f"got {len(data)} of {downloader.size} bytes")
        return data, etag

    def _upload(self, full_key: str, data: bytes, condition: str | None) -> str | None:
        """One upload; ``condition``: None (overwrite), "*" (must not exist) or an etag. The
        etag written ("" if the reply named none), None when the condition failed."""
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError

        kwargs: dict[str, Any] = {"overwrite": condition != "*"}
        if condition not in (None, "*"):
            kwargs.update(etag=condition, match_condition=MatchConditions.IfNotModified)
        try:
            reply = self._blob(full_key).upload_blob(
                data, length=len(data), validate_content=True, max_concurrency=self.max_concurrency, **kwargs
            )
        except HttpResponseError as e:
            # By status, not by exception class: a reply cut short keeps its status line but
            # loses the error code the SDK picks its class from.
            status = self._status(e)
            if condition is not None and status == 412:
                return None
            if condition == "*" and status == 409:
                return None  # BlobAlreadyExists
            if condition not in (None, "*") and status == 404 and "ContainerNotFound" not in self._code(e):
                return None  # deleted since it was read
            raise
        etag = reply.get("etag") if isinstance(reply, dict) else None
        return str(etag or "")

    # -- Storage API -------------------------------------------------------------------------

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        # A Put Blob / Put Block List is durable when it returns: ``durable`` changes nothing.
        full, body = self._key(key), bytes(data)
        self.run("PUT", key, lambda _a: self._upload(full, body, None))

    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        if version is not None and (not version or version == "*"):
            return None  # not an etag of this store: it cannot match
        full = self._key(key)
        op = "PUT If-None-Match: *" if version is None else "PUT If-Match"
        return self.conditional_write(op, key, data, lambda: self._upload(full, data, version or "*"))

    def _info(self, name: str, props: Any) -> ObjectInfo:
        modified = props.last_modified
        return ObjectInfo(
            self._rel(name), int(props.size or 0), str(props.etag), modified.timestamp() if modified else None
        )

    def head(self, key: str) -> ObjectInfo | None:
        full = self._key(key)

        def once(_attempt: int) -> ObjectInfo | None:
            from azure.core.exceptions import ResourceNotFoundError

            try:
                props = self._blob(full).get_blob_properties()
            except ResourceNotFoundError as e:
                if "ContainerNotFound" in self._code(e):
                    raise
                return None
            return self._info(full, props)

        return self.run("HEAD", key, once)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from ``start`` (fewer at the end of the object)."""
        check_range(start, length)
        full = self._key(key)

        def once(_attempt: int) -> bytes | None:
            from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

            try:
                if length == 0:
                    self._blob(full).get_blob_properties()
                    return b""
                return bytes(self._blob(full).download_blob(offset=start, length=length, max_concurrency=1).readall())
            except ResourceNotFoundError as e:
                if "ContainerNotFound" in self._code(e):
                    raise
                return None
            except HttpResponseError as e:
                if self._status(e) == 416:  # start at or past the end
                    return b""
                raise

        got = self.run("GET range", key, once)
        if got is None:
            raise self._missing(key)
        return got

    def list_info(self, prefix: str = "") -> list[ObjectInfo]:
        full_prefix = self._full_prefix(prefix)

        def once(_attempt: int) -> list[ObjectInfo]:
            blobs = self.client().list_blobs(name_starts_with=full_prefix or None)
            try:
                return [self._info(b.name, b) for b in blobs if not b.name.endswith("/")]
            except AttributeError as e:  # the SDK read a page cut short as an empty response
                raise TruncatedBody(f"listing page cut short: {e}") from e

        return sorted(self.run("LIST", None, once), key=lambda info: info.key)

    def delete(self, key: str, *, durable: bool = True) -> None:
        full = self._key(key)

        def once(_attempt: int) -> None:
            from azure.core.exceptions import ResourceNotFoundError

            try:
                self._blob(full).delete_blob()
            except ResourceNotFoundError as e:
                if "ContainerNotFound" in self._code(e):
                    raise  # missing blob (or deleted by our first attempt whose reply was lost): fine

        self.run("DELETE", key, once)

    def delete_if_version(self, key: str, version: str) -> bool | None:
        # If-Match on the DELETE: a lease released without reading it back first (issue 36)
        if not version or version == "*":
            return False  # not an etag of this store: it cannot match
        full = self._key(key)

        def once(_attempt: int) -> bool:
            from azure.core import MatchConditions
            from azure.core.exceptions import HttpResponseError

            try:
                self._blob(full).delete_blob(etag=version, match_condition=MatchConditions.IfNotModified)
            except HttpResponseError as e:
                status = self._status(e)
                if status == 412 or (status == 404 and "ContainerNotFound" not in self._code(e)):
                    return False  # replaced, or gone (a first attempt whose reply was lost included)
                raise
            return True

        return self.run("DELETE If-Match", key, once)

    def download_to(self, key: str, local_path: str, *, durable: bool = True) -> None:
        full = self._key(key)
        self.download_into(key, local_path, durable, lambda f: fetch_blob(self._blob(full), f))

    def check(self) -> None:
        """One cheap listing (one page of at most one blob) at run start: a wrong container,
        account or credentials fail now, with only the permissions a writer needs (a SAS
        without container-read rights cannot get the container's properties)."""

        def once(_attempt: int) -> None:
            pages = self.client().list_blobs(name_starts_with=self._full_prefix("") or None, results_per_page=1)
            next(iter(pages.by_page()), None)

        self.run("LIST", None, once)


def _no_query(url: str) -> str:
    """``url`` without a query string (a SAS token) or user info, for identity and messages."""
    return without_url_credentials(url, query=False).rstrip("/")


def _account_of(url: str) -> str:
    """The account of ``https://ACCOUNT.blob...`` or of an emulator's ``http://host:port/ACCOUNT``."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if host.endswith(".windows.net") or host.count(".") >= 2 and not host.replace(".", "").isdigit():
        return host.split(".")[0].lower()
    return parts.path.strip("/").split("/")[0].lower()


def open_azure(url: str, storage_options: dict[str, Any] | None = None, *, create: bool = False) -> AzureStorage:
    """The registry's factory for ``az://``, ``abfs://`` and ``abfss://`` (nothing is created: see ``check``)."""
    return AzureStorage(url, storage_options)


for _scheme in ("az", "abfs", "abfss"):
    register_backend(_scheme, open_azure, check_options=check_option_names)

"""URL scheme -> storage backend, as fsspec's registry does.

A backend is one module that calls :func:`register_backend` when imported. The built-in
backends are imported on first use of their scheme (so boto3 is imported only by those who
use S3); a third-party backend registers itself when its module is imported.

* local paths and ``file://...`` -> :class:`~shardwright.storage.local.LocalStorage`
* ``s3://bucket/prefix`` -> :class:`~shardwright.storage.s3.S3Storage`
* ``gs://bucket/prefix`` (alias ``gcs://``) -> :class:`~shardwright.storage.gcs.GCSStorage`
* ``az://container/prefix``, ``abfs[s]://container@account.dfs.core.windows.net/prefix`` ->
  :class:`~shardwright.storage.azure.AzureStorage`
* ``memory://name`` -> :class:`~shardwright.storage.memory.MemoryStorage` (tests)
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import OutputDirError
from .base import Storage

__all__ = [
    "LOCAL_SCHEME",
    "BackendFactory",
    "Location",
    "OptionCheck",
    "check_option_names",
    "open_storage",
    "parse_location",
    "register_backend",
    "registered_schemes",
]


class BackendFactory(Protocol):
    """``factory(url, storage_options, create=...) -> Storage`` for one URL scheme."""

    def __call__(self, url: str, storage_options: dict[str, Any] | None, *, create: bool) -> Storage: ...


class OptionCheck(Protocol):
    """``check(storage_options)``: UsageError for a name the backend does not take (pure)."""

    def __call__(self, options: dict[str, Any]) -> None: ...


LOCAL_SCHEME = "file"

# Built-in backends, imported on first use of their scheme; each registers itself. A new
# built-in backend is one line here (plus, if its URLs are not scheme://bucket/prefix or its
# name is not the scheme, one line in SCHEME_SHAPES / SCHEME_LABELS for the error messages).
_BUILTIN = {
    "file": "shardwright.storage.local",
    "s3": "shardwright.storage.s3",
    "gs": "shardwright.storage.gcs",
    "gcs": "shardwright.storage.gcs",
    "az": "shardwright.storage.azure",
    "abfs": "shardwright.storage.azure",
    "abfss": "shardwright.storage.azure",
    "memory": "shardwright.storage.memory",
}
#: How messages name a scheme's URLs (default: the scheme itself).
SCHEME_LABELS = {"s3": "S3", "gs": "GCS", "gcs": "GCS", "az": "Azure", "abfs": "Azure", "abfss": "Azure"}
#: The URL shape a message suggests (default: ``scheme://bucket/prefix``).
SCHEME_SHAPES = {
    "memory": "memory://name",
    "az": "az://container/prefix",
    "abfs": "abfs://container@account.dfs.core.windows.net/prefix",
    "abfss": "abfss://container@account.dfs.core.windows.net/prefix",
}
#: Two spellings of one scheme, both accepted: a location is named (and compared) by the second.
SCHEME_CANONICAL = {"gcs": "gs"}
#: Spellings of a scheme that other tools use and we do not: the message says which to write.
SCHEME_ALIASES = {
    "s3a": "s3",
    "s3n": "s3",
    "gcp": "gs",
    "google": "gs",
    "azure": "az",
    "wasb": "az",
    "wasbs": "az",
    "adl": "az",
    "blob": "az",
}
_BACKENDS: dict[str, BackendFactory] = {}
_OPTION_CHECKS: dict[str, OptionCheck] = {}
#: Whose option names a scheme without its own check takes (local paths: their inputs' store).
DEFAULT_OPTION_NAMES = "s3"
_LOCK = threading.Lock()
# "scheme:" at the start of a URL (a one-letter "scheme" is a Windows drive, not a URL).
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(//)?")


def register_backend(
    scheme: str, factory: BackendFactory, *, replace: bool = False, check_options: OptionCheck | None = None
) -> None:
    """Make ``open_storage`` use ``factory`` for ``scheme://...`` URLs (case-insensitive);
    ``check_options`` is the backend's pure check of ``storage_options`` names (every entry
    point runs it before anything is opened: :func:`check_option_names`).

    ValueError if another factory already has the scheme, unless ``replace=True``.
    """
    scheme = scheme.lower()
    with _LOCK:
        current = _BACKENDS.get(scheme)
        if current is not None and current is not factory and not replace:
            raise ValueError(f"storage scheme {scheme!r} is already registered ({current!r}): pass replace=True")
        _BACKENDS[scheme] = factory
        if check_options is not None:
            _OPTION_CHECKS[scheme] = check_options
        else:
            _OPTION_CHECKS.pop(scheme, None)


def check_option_names(scheme: str, options: dict[str, Any]) -> None:
    """The ``scheme`` backend's check of ``storage_options`` names (UsageError with the fix);
    a scheme without its own check takes :data:`DEFAULT_OPTION_NAMES`'s. Pure: nothing is
    contacted or opened."""
    scheme = scheme.lower()
    check = _OPTION_CHECKS.get(scheme) if _factory(scheme) is not None else None
    if check is None and _factory(DEFAULT_OPTION_NAMES) is not None:
        check = _OPTION_CHECKS.get(DEFAULT_OPTION_NAMES)
    if check is not None:
        check(dict(options))


def registered_schemes() -> list[str]:
    """Every scheme ``open_storage`` accepts (built-in or registered), sorted."""
    return sorted(set(_BUILTIN) | set(_BACKENDS))


def _factory(scheme: str) -> BackendFactory | None:
    factory = _BACKENDS.get(scheme)
    if factory is None and scheme in _BUILTIN:
        importlib.import_module(_BUILTIN[scheme])  # registers itself
        factory = _BACKENDS.get(scheme)
    return factory


def open_storage(
    output_dir: str | os.PathLike[str], storage_options: dict[str, Any] | None = None, *, create: bool = False
) -> Storage:
    """Return the Storage for a local path or a ``scheme://...`` URL (``s3://bucket/prefix``,
    ``file:///abs/path``, ``memory://name``).

    ``storage_options`` goes to the backend, in its own names: for s3:// boto3 client
    kwargs such as ``endpoint_url``, ``aws_access_key_id``, ``region_name``, plus ``config``
    (a dict merged into ``botocore.config.Config``); for gs:// and az:// their SDKs' names
    (docs/clouds.md); local paths ignore it.

    ``create=True`` (writers) makes a local directory if needed and checks that it is
    writable. For S3 nothing is created; call :meth:`Storage.check` to validate bucket and
    credentials. A location :func:`parse_location` refuses raises its OutputDirError.
    """
    location = parse_location(output_dir)
    return _require(location.scheme, location.url)(location.url, storage_options, create=create)


def open_dataset_storage(location: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Storage:
    """:func:`open_storage` for a command that only reads a dataset (verify, diff, status,
    history, runs): a location's mistake names it as the dataset location. The messages above
    speak of output_dir, which these commands have not (`shardwright diff A /dev/null` said
    "output_dir /dev/null is a file … remove it")."""
    try:
        return open_storage(location, storage_options)
    except OutputDirError as exc:
        text = str(exc).replace("remove it or choose another output_dir", "pass the dataset's directory")
        raise OutputDirError(text.replace("output_dir", "dataset location")) from None


@dataclass(frozen=True)
class Location:
    """Where a dataset lives, parsed once (litdata's ``resolver.Dir`` plays this part there).

    ``scheme`` is lower-case (``"file"`` for local paths); ``bucket`` is the bucket, container
    or store name ("" for local paths); ``prefix`` is the key prefix inside it, without
    leading or trailing "/" (for local paths: the path as given, "~" not expanded); ``url``
    is the normalised form every backend and message uses.
    """

    scheme: str
    bucket: str
    prefix: str
    url: str

    @property
    def is_local(self) -> bool:
        return self.scheme == LOCAL_SCHEME

    @property
    def path(self) -> str:
        """The local path (local locations only)."""
        if not self.is_local:
            raise ValueError(f"{self.url} is not a local path")
        return self.prefix


def parse_location(output_dir: str | os.PathLike[str]) -> Location:
    """The one check of "is this a valid location": a local path, ``file://path`` or
    ``scheme://bucket/prefix`` for a registered scheme. Pure: nothing is opened or created.

    OutputDirError (one line naming the problem and the fix) for an empty location, a NUL
    byte, an unknown or mistyped scheme (``s3:/x``, ``s3a://x``), a URL without a bucket
    (``s3://``, ``s3:///x``) and a key prefix with empty, ``.`` or ``..`` segments
    (``s3://b/a//c``, ``s3://b/../c``), which object stores would keep as literal names, and
    a URL that is not valid Unicode (the store's keys are UTF-8).
    """
    raw = os.fspath(output_dir)
    url = os.fsdecode(raw) if isinstance(raw, bytes) else raw
    if not url.strip():
        raise OutputDirError("output_dir is empty: pass a local directory or a URL such as s3://bucket/prefix")
    if "\0" in url:
        raise OutputDirError(f"output_dir {_safe(url)!r} contains a NUL byte: remove it")
    m = _SCHEME_RE.match(url)
    if m is None:
        if "://" in url:  # "./x://y" or "1s3://b": not a URL we know, and surely not meant as a path
            raise OutputDirError(f"unsupported URL {_safe(url)!r}: use a local path or one of {_schemes_text()}")
        return _local(url)
    scheme = m.group(1).lower()
    known = scheme in _BUILTIN or scheme in _BACKENDS
    if m.group(2) is None:
        if not known:  # "data:v1" is a relative local path with a colon in its name
            return _local(url)
        rest = url[m.end() :].lstrip("/")
        raise OutputDirError(
            f"malformed URL {_safe(url)!r}: write {scheme}://{rest} (two slashes), or ./{url} for a local directory"
        )
    if not known:
        alias = SCHEME_ALIASES.get(scheme)
        if alias is not None:
            rest = url[m.end() :]
            if alias == "az" and "@" in rest.split("/", 1)[0]:  # wasbs://container@account.blob...: the abfs form
                alias, rest = "abfs", rest.replace(".blob.core.windows.net", ".dfs.core.windows.net", 1)
            raise OutputDirError(f"unsupported URL scheme {scheme!r} in {_safe(url)!r}: write it as {alias}://{rest}")
        raise OutputDirError(
            f"unsupported URL scheme {scheme!r} in {_safe(url)!r}: use a local path or one of {_schemes_text()}"
        )
    rest = url[m.end() :]
    if scheme == LOCAL_SCHEME:
        return _local(rest)
    if not rest.isascii():
        try:
            rest.encode("utf-8")
        except UnicodeEncodeError:  # a surrogate: bytes decoded from a file name, no text an object store takes
            raise OutputDirError(
                f"{_safe(url)!r} is not valid Unicode text: object stores name objects in UTF-8; write the URL "
                "as text (a name taken from a file system may hold undecodable bytes)"
            ) from None
    bucket, _, key = rest.partition("/")
    shape = SCHEME_SHAPES.get(scheme, f"{scheme}://bucket/prefix")
    if not bucket:
        label = SCHEME_LABELS.get(scheme, scheme)
        raise OutputDirError(f"invalid {label} URL {_safe(url)!r}: use {shape}")
    if "@" in bucket and scheme not in ("abfs", "abfss", "az"):  # Azure: container@account (its own message)
        # s3://KEY:SECRET@bucket/x: no store takes credentials there, and the SDK's own error
        # printed them back (the bucket name, in full) to the terminal and the CI log
        raise OutputDirError(
            f"{_safe(url)!r} has user:password@ before the {shape.split('://')[1].split('/')[0]} name: "
            "credentials never go in a location; pass them in storage_options or the environment"
        )
    prefix = key.rstrip("/")  # one trailing "/" (or several) names the same prefix
    segments = prefix.split("/") if prefix else []
    bad = next((s for s in segments if s in ("", ".", "..")), None)
    if bad is not None:
        what = "an empty segment (//)" if bad == "" else f"a {bad!r} segment"
        raise OutputDirError(
            f"{_safe(url)!r} has {what} in its key prefix, which the store would keep as a literal name: "
            f"use {shape} with plain names between single slashes"
        )
    scheme = SCHEME_CANONICAL.get(scheme, scheme)  # gcs://b/p is gs://b/p: one spelling per location
    normalised = f"{scheme}://{bucket}/{prefix}" if prefix else f"{scheme}://{bucket}"
    return Location(scheme=scheme, bucket=bucket, prefix=prefix, url=normalised)


def _local(path: str) -> Location:
    return Location(scheme=LOCAL_SCHEME, bucket="", prefix=path, url=path)


def _schemes_text() -> str:
    return ", ".join(f"{s}://" for s in registered_schemes())


def _require(scheme: str, url: str) -> BackendFactory:
    factory = _factory(scheme)
    if factory is None:  # a built-in module that failed to register itself: a bug, not a user error
        raise RuntimeError(f"storage backend for {scheme}:// did not register itself (opening {_safe(url)!r})")
    return factory


def _safe(url: str) -> str:
    """``url`` for messages: no ``user:password@``."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*:/*)[^@/]*@", r"\1", url)

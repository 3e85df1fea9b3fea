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
from typing import Any, Protocol

from ..errors import OutputDirError
from .base import Storage

__all__ = ["BackendFactory", "open_storage", "register_backend", "registered_schemes"]


class BackendFactory(Protocol):
    """``factory(url, storage_options, create=...) -> Storage`` for one URL scheme."""

    def __call__(self, url: str, storage_options: dict[str, Any] | None, *, create: bool) -> Storage: ...


# Built-in backends, imported on first use of their scheme; each registers itself.
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
_BACKENDS: dict[str, BackendFactory] = {}
_LOCK = threading.Lock()
# Schemes users reach for that are spelled otherwise here: named in the error, never mapped.
_NEAR_MISSES = {
    "gcp": "gs",
    "google": "gs",
    "azure": "az",
    "wasb": "az",
    "wasbs": "az",
    "adl": "az",
    "blob": "az",
    "s3a": "s3",
    "s3n": "s3",
}
# "scheme:" at the start of a URL (a one-letter "scheme" is a Windows drive, not a URL).
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(//)?")


def register_backend(scheme: str, factory: BackendFactory, *, replace: bool = False) -> None:
    """Make ``open_storage`` use ``factory`` for ``scheme://...`` URLs (case-insensitive).

    ValueError if another factory already has the scheme, unless ``replace=True``.
    """
    scheme = scheme.lower()
    with _LOCK:
        current = _BACKENDS.get(scheme)
        if current is not None and current is not factory and not replace:
            raise ValueError(f"storage scheme {scheme!r} is already registered ({current!r}): pass replace=True")
        _BACKENDS[scheme] = factory


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

    ``storage_options`` goes to the backend: for S3 boto3 client kwargs such as
    ``endpoint_url``, ``aws_access_key_id``, ``region_name``, plus ``config`` (a dict merged
    into ``botocore.config.Config``); for GCS and Azure see docs/clouds.md; local paths
    ignore it.

    ``create=True`` (writers) makes a local directory if needed and checks that it is
    writable. For S3 nothing is created; call :meth:`Storage.check` to validate bucket and
    credentials. An empty location, an unknown scheme or a malformed URL (``s3:/x``) raises
    OutputDirError naming the problem and the fix.
    """
    raw = os.fspath(output_dir)
    url = os.fsdecode(raw) if isinstance(raw, bytes) else raw
    if not url.strip():
        raise OutputDirError("output_dir is empty: pass a local directory or a URL such as s3://bucket/prefix")
    m = _SCHEME_RE.match(url)
    if m is None:
        if "://" in url:  # "./x://y" or "1s3://b": not a URL we know, and surely not meant as a path
            raise OutputDirError(
                f"unsupported URL {_safe(url)!r}: use a local path or one of "
                + ", ".join(f"{s}://" for s in registered_schemes())
            )
        return _require("file", url)(url, storage_options, create=create)
    scheme = m.group(1).lower()
    known = scheme in _BUILTIN or scheme in _BACKENDS
    if m.group(2) is None:
        if not known:  # "data:v1" is a relative local path with a colon in its name
            return _require("file", url)(url, storage_options, create=create)
        rest = url[m.end() :].lstrip("/")
        raise OutputDirError(
            f"malformed URL {_safe(url)!r}: write {scheme}://{rest} (two slashes), or ./{url} for a local directory"
        )
    if not known:
        rest = url[m.end() :]
        near = _NEAR_MISSES.get(scheme)
        if near == "az" and "@" in rest.split("/", 1)[0]:  # wasbs://container@account.blob...: the abfs form
            near = "abfs"
            rest = rest.replace(".blob.core.windows.net", ".dfs.core.windows.net", 1)
        hint = f"did you mean {near}://{rest}? " if near else ""
        raise OutputDirError(
            f"unsupported URL scheme {scheme!r} in {_safe(url)!r}: {hint}use a local path or one of "
            + ", ".join(f"{s}://" for s in registered_schemes())
        )
    url = scheme + url[len(m.group(1)) :]  # S3://b/p and s3://b/p are the same location
    return _require(scheme, url)(url, storage_options, create=create)


def _require(scheme: str, url: str) -> BackendFactory:
    factory = _factory(scheme)
    if factory is None:  # a built-in module that failed to register itself: a bug, not a user error
        raise RuntimeError(f"storage backend for {scheme}:// did not register itself (opening {_safe(url)!r})")
    return factory


def _safe(url: str) -> str:
    """``url`` for messages: no ``user:password@``."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*:/*)[^@/]*@", r"\1", url)

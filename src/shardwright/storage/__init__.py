"""Where a dataset's bytes live: one small interface, several backends, chosen by URL.

========================  ===================================================================
module                    its one job
========================  ===================================================================
:mod:`.base`              the :class:`Storage` interface and its guarantees; ``check_key``
:mod:`.files`             local-file helpers: temp names, fsync of dirs, syncfs, quiet unlink,
                          the one disk-full mapping (each caller gives its own fix)
:mod:`.local`             :class:`LocalStorage`, a directory (its CAS side-lock: :mod:`.file_lock`)
:mod:`.cloud`             the one base of every object store: retry loop, client per process,
                          lost-reply rule, atomic download, the error mapping
:mod:`.failure`           the kinds of failure (:class:`~.failure.Failure`) and their one line
:mod:`.s3`                :class:`S3Storage`, any S3-compatible store (boto3, imported lazily)
:mod:`.gcs`               :class:`GCSStorage`, ``gs://`` (google-cloud-storage, imported lazily)
:mod:`.azure`             :class:`AzureStorage`, ``az://`` / ``abfs://`` (azure-storage-blob, lazily)
:mod:`.memory`            :class:`MemoryStorage`, in-process, with fault and crash hooks (tests)
:mod:`.registry`          URL scheme -> backend; :func:`parse_location` (the one check of a
                          location), :func:`open_storage`, :func:`register_backend`
========================  ===================================================================

Layering: this package imports only :mod:`shardwright.errors` from the rest of shardwright;
``base``, ``files`` and ``failure`` import nothing of the package, ``registry`` only
``base``, and each backend ``base``, ``files``, ``registry`` (and, for object stores,
``cloud`` and ``failure``) (the registry imports backends by name on
first use of their scheme, so there is no import cycle).
"""

from __future__ import annotations

from .base import ObjectInfo, Storage
from .local import LocalStorage
from .memory import MemoryStorage
from .registry import Location, open_dataset_storage, open_storage, parse_location, register_backend, registered_schemes
from .s3 import S3Storage  # cheap: boto3 itself is imported on first use

__all__ = [
    "LocalStorage",
    "ObjectInfo",
    "Location",
    "MemoryStorage",
    "S3Storage",
    "Storage",
    "open_dataset_storage",
    "open_storage",
    "parse_location",
    "register_backend",
    "registered_schemes",
]

"""The check of ``storage_options`` names shared by every entry point (optimize, the reader,
the CLI, the jobs service). Each backend carries its own check in the registry
(:func:`~.registry.register_backend`'s ``check_options``): S3's boto3 names (fsspec/s3fs
spellings refused with the fix), GCS's and Azure's SDK names (gcsfs/adlfs spellings named
with the right key)."""

from __future__ import annotations

from collections.abc import Mapping

from .registry import check_option_names

__all__ = ["check_storage_option_names"]


def check_storage_option_names(storage_options: Mapping, location: object = None) -> None:
    """Refuse option names the location's backend does not take (a silent ignore would
    connect with other credentials). ``location`` (the output or dataset URL) picks the
    backend; local paths take S3's names (their inputs' store).

    Raises:
        UsageError: one line naming every wrong key and the name to use instead.
    """
    scheme = location.split("://", 1)[0].lower() if isinstance(location, str) and "://" in location else ""
    check_option_names(scheme or "file", dict(storage_options))

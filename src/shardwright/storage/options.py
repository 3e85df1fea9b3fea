"""The check of ``storage_options`` names shared by every entry point (optimize, the reader,
the CLI, the jobs service). Each backend carries its own check in the registry
(:func:`~.registry.register_backend`'s ``check_options``): S3's boto3 names (fsspec/s3fs
spellings refused with the fix), GCS's and Azure's SDK names (gcsfs/adlfs spellings named
with the right key)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..errors import UsageError
from .registry import check_option_names

__all__ = ["check_storage_option_names", "parse_storage_options"]


def parse_storage_options(text: str | None) -> dict | None:
    """``--storage-options`` JSON (a command line, a job's stdin) as a dict, None when empty;
    the one parser of storage options given as text.

    Raises:
        UsageError: one line when the text is not JSON or not a JSON object.
    """
    if not text or not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f"--storage-options is not valid JSON ({exc.args[0]}); pass a JSON object, e.g. "
            '\'{"endpoint_url": "http://127.0.0.1:8333"}\''
        ) from None
    if not isinstance(value, dict):
        raise UsageError(
            f"--storage-options must be a JSON object of the storage backend's options; got {type(value).__name__}"
        )
    return value


def check_storage_option_names(storage_options: Mapping, location: object = None) -> None:
    """Refuse option names the location's backend does not take (a silent ignore would
    connect with other credentials). ``location`` (the output or dataset URL) picks the
    backend; local paths take S3's names (their inputs' store).

    Raises:
        UsageError: one line naming every wrong key and the name to use instead.
    """
    scheme = location.split("://", 1)[0].lower() if isinstance(location, str) and "://" in location else ""
    check_option_names(scheme or "file", dict(storage_options))

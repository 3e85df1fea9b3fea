"""Checks of ``storage_options`` names shared by every entry point (optimize, the reader, the
CLI, the jobs service): for S3 they are boto3 client arguments, and fsspec/s3fs spellings are
refused with the fix. gs:// and az:// options are checked by their backends when opened,
against their own SDKs' names (gcsfs/adlfs spellings named with the right key there)."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UsageError

__all__ = ["FSSPEC_NAMES", "check_storage_option_names"]

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


#: Schemes whose option names are their SDK's, checked by their backend module's own function.
OWN_NAMES = {
    "gs": "shardwright.storage.gcs",
    "gcs": "shardwright.storage.gcs",
    "az": "shardwright.storage.azure",
    "abfs": "shardwright.storage.azure",
    "abfss": "shardwright.storage.azure",
}


def check_storage_option_names(storage_options: Mapping, location: object = None) -> None:
    """Refuse fsspec-style keys (a silent ignore would connect with other credentials).

    ``location`` (the output or dataset URL) picks the names: S3's boto3 names for ``s3://``
    and local paths; for gs:// and az:// their SDK's (gcsfs/adlfs spellings named with the
    right key by the backend module's ``check_option_names``).

    Raises:
        UsageError: one line naming every fsspec-style key and the boto3 name to use instead.
    """
    scheme = location.split("://", 1)[0].lower() if isinstance(location, str) and "://" in location else ""
    if scheme in OWN_NAMES:
        import importlib

        importlib.import_module(OWN_NAMES[scheme]).check_option_names(dict(storage_options))
        return
    wrong = [k for k in storage_options if k in FSSPEC_NAMES]
    if wrong:
        fixes = "; ".join(f"{k!r} -> {FSSPEC_NAMES[k]}" for k in wrong)
        raise UsageError(
            f"storage_options uses fsspec/s3fs names ({', '.join(repr(k) for k in wrong)}); shardwright passes "
            f"them to boto3's client, which names them differently: {fixes}"
        )

"""Checks of ``storage_options`` names shared by every entry point (optimize, the reader, the
CLI): they are boto3 client arguments, and fsspec/s3fs spellings are refused with the fix."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UsageError

__all__ = ["FSSPEC_NAMES", "check_storage_option_names"]

#: fsspec/s3fs spellings -> what boto3's client takes (storage_options are boto3 client arguments)
FSSPEC_NAMES = {
    "key": "aws_access_key_id",
    "secret": "aws_secret_access_key",
    "token": "aws_session_token",
    "client_kwargs": "its contents (endpoint_url, region_name) at the top level",
    "anon": "no credentials at all",
    "endpoint": "endpoint_url",
    "region": "region_name",
}


def check_storage_option_names(storage_options: Mapping) -> None:
    """Refuse fsspec-style keys (a silent ignore would connect with other credentials).

    Raises:
        UsageError: one line naming every fsspec-style key and the boto3 name to use instead.
    """
    wrong = [k for k in storage_options if k in FSSPEC_NAMES]
    if wrong:
        fixes = "; ".join(f"{k!r} -> {FSSPEC_NAMES[k]}" for k in wrong)
        raise UsageError(
            f"storage_options uses fsspec/s3fs names ({', '.join(repr(k) for k in wrong)}); shardwright passes "
            f"them to boto3's client, which names them differently: {fixes}"
        )

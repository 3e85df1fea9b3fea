"""Jobs whose inputs are a source (``shardwright.sources``) instead of a list:
``"inputs": {"source": "parquet", "url": "s3://bucket/raw/", "columns": ["text"]}``.

* Read only under an ``--input-root`` (repeatable, like ``--output-root``): without one, a
  server reads no source at all (refused with 403). The same location rules as outputs: one
  check of the URL by the storage registry (schemes, ``//``, ``.``, ``..``), symbolic links
  resolved (a local path must stay under its root once resolved), and checked again when
  the job process starts (a directory swapped for a link while the job was queued).
* A listed local file that is a symbolic link out of the source's directory fails the job
  when it starts (a user error naming the file).
* Bounded: the URL, the columns and the pattern have size limits (the request body's limit
  bounds the rest); the job's ``--max-inputs`` applies to the rows or files it lists once
  the job process has built the source.
* Its own credentials: the source is read with the job's ``storage_options`` (sent with the
  job, kept in memory only), never the server's: with none, S3 is read anonymously
  (unsigned requests), not with the server's environment or profile; GCS is read with
  anonymous credentials unless the job gives its own; Azure needs the job's own credential
  (``connection_string``, ``account_key``, ``sas_token`` or ``credential``): without one the
  job is refused, since the Azure client would fall back to the server's identity.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import OutputDirError, UsageError
from .locations import AZURE_KEYS, LocationRefused, has_own_s3_credentials

__all__ = ["SourceSpec", "check_input_location", "job_read_options", "open_source"]

SOURCE_KINDS = ("parquet", "jsonl", "files")


class SourceSpec(BaseModel):
    """A job's inputs read where they live (docs/sources.md)."""

    model_config = ConfigDict(extra="forbid")
    source: Literal["parquet", "jsonl", "files"]
    url: str = Field(..., min_length=1, max_length=4096, description="a path or URL under an --input-root")
    columns: list[str] | None = Field(None, max_length=1000, description="parquet: the columns to read")
    pattern: str | None = Field(None, min_length=1, max_length=1000, description="files: a glob, e.g. '**/*.jpg'")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_input_location(url: str, roots: tuple[str, ...]) -> str:
    """The normalized location of a source (links resolved), or LocationRefused naming the problem."""
    from ..storage import parse_location

    if not roots:
        raise LocationRefused(
            "inputs.url: this server reads no sources (its operator allows them with --input-root ROOT)", 403
        )
    if any(ch in url for ch in "*?["):
        raise LocationRefused("inputs.url: give a directory or file; put a glob in inputs.pattern (files only)")
    try:
        location = parse_location(url)
    except OutputDirError as exc:
        raise LocationRefused(f"inputs.url: {str(exc).replace('output_dir', 'input')}") from None
    if location.is_local:
        if not os.path.isabs(url):
            raise LocationRefused(f"inputs.url: {url!r} is relative; give an absolute path")
        parts = url.rstrip("/").split("/")[1:]
        bad = next((p for p in parts if p in ("", ".", "..")), None)
        if bad is not None:
            raise LocationRefused(f"inputs.url: {url!r} has a {bad or '//'!r} segment; write the path without it")
        normalized = os.path.realpath(location.prefix)
    else:
        normalized = location.url
    resolved = [r.rstrip("/") if "://" in r else os.path.realpath(r) for r in roots]
    if not any(_inside(normalized, r) for r in resolved):
        raise LocationRefused(
            f"inputs.url: {url} is outside the allowed input roots ({', '.join(roots)}); read from under one of them",
            403,
        )
    return normalized


AZURE_CREDENTIAL_KEYS = AZURE_KEYS  # one home: service.locations


def job_read_options(url: str, storage_options: dict | None) -> dict | None:
    """The storage_options a source at ``url`` is read with: the job's own, never the
    server's credentials (see the module docstring)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    options = dict(storage_options) if storage_options else None
    if scheme == "s3" and not has_own_s3_credentials(options):
        # options without the job's own keys (an endpoint_url only, say) would let boto3 find
        # the server's: read unsigned instead, never with the server's credentials
        from botocore import UNSIGNED

        config = (options or {}).get("config")
        config = dict(config) if isinstance(config, dict) else {}
        return {**(options or {}), "config": {**config, "signature_version": UNSIGNED}}
    if scheme in ("gs", "gcs") and not (options or {}).get("credentials"):
        from google.auth.credentials import AnonymousCredentials

        return {**(options or {}), "credentials": AnonymousCredentials()}
    if scheme in ("az", "abfs", "abfss") and not any((options or {}).get(k) for k in AZURE_CREDENTIAL_KEYS):
        raise UsageError(
            f"inputs: {url} is read with the job's own credentials, never this server's: send storage_options "
            f"with one of {', '.join(AZURE_CREDENTIAL_KEYS)} (a SAS token for a read-only container, say)"
        )
    return options


def open_source(spec: dict, storage_options: dict | None, max_inputs: int | None = None) -> Any:
    """The source a job spec names, read with the job's own credentials (see the module)."""
    from .. import sources

    parsed = SourceSpec.model_validate(spec)
    options = job_read_options(parsed.url, storage_options)
    source: sources.Source
    if parsed.source == "parquet":
        source = sources.parquet(parsed.url, columns=parsed.columns, storage_options=options)
    elif parsed.source == "jsonl":
        source = sources.jsonl(parsed.url, storage_options=options)
    else:
        source = sources.files(parsed.url, pattern=parsed.pattern or "**/*", storage_options=options)
    if "://" not in parsed.url:  # a listed file may be a link: it must stay under the url too
        root = os.path.realpath(parsed.url)
        for name in source.unit_columns()[0]:
            if not _inside(os.path.realpath(name), root):
                raise UsageError(
                    f"inputs: {name} is a symbolic link out of {parsed.url}; this server reads only under its "
                    "input roots: replace the link with the file"
                )
    if max_inputs is not None and len(source) > max_inputs:
        raise UsageError(
            f"inputs: the {parsed.source} source {parsed.url} has {len(source):,} inputs, more than this "
            f"server's limit of {max_inputs:,}; split it into several jobs"
        )
    return source

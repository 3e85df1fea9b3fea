"""Arguments several commands share: ``--storage-options``."""

from __future__ import annotations

import json

from ..errors import UsageError

__all__ = ["parse_storage_options"]


def parse_storage_options(text: str | None) -> dict | None:
    """``--storage-options`` JSON as a dict; a mistake is one clear UsageError."""
    if not text:
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

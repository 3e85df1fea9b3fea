"""Arguments several commands share: ``--storage-options`` (parsed in its one home,
:func:`shardwright.storage.options.parse_storage_options`)."""

from __future__ import annotations

from ..storage.options import parse_storage_options

__all__ = ["parse_storage_options"]

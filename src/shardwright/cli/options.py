"""Arguments several commands share: ``--storage-options`` (parsed in its one home,
:func:`shardwright.storage.options.parse_storage_options`) and the command given after ``--``."""

from __future__ import annotations

from ..storage.options import parse_storage_options

__all__ = ["command_after_dashes", "parse_storage_options"]


def command_after_dashes(words: list[str]) -> list[str]:
    """The command a user gave after ``--`` (argparse's REMAINDER keeps the ``--`` itself)."""
    return list(words[1:] if words and words[0] == "--" else words)

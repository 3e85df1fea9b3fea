"""The safe ways out that protocol errors suggest (every suggestion must be safe to follow)."""

from __future__ import annotations

#: For damaged run state: abandoning keeps a published dataset; overwrite is named with its cost.
START_OVER = (
    "Abandon the run with `shardwright clean OUTPUT_DIR` (the published dataset is kept) and rerun; "
    "mode='overwrite' replaces the dataset too"
)


def naming_output(message: str, url: str) -> str:
    """``message`` with START_OVER's placeholder replaced by the output's own URL, where the
    caller knows it (trust round 9: the line to paste said `shardwright clean OUTPUT_DIR`)."""
    return message.replace("`shardwright clean OUTPUT_DIR`", f"`shardwright clean {url}`")


def start_over_hint(mode: str, url: str) -> str:
    """The safe way to give up the interrupted run (of manifest mode ``mode``) in ``url``: an
    append (or retry, or incremental) run sits on a published dataset that mode='overwrite' would delete, so
    it is abandoned with ``shardwright clean``."""
    if mode in ("append", "retry", "incremental"):
        return (
            f"or abandon the unfinished {mode} with `shardwright clean {url}` "
            "(or shardwright.abandon(); the published dataset is kept)"
        )
    return f"or abandon it with `shardwright clean {url}` (or pass mode='overwrite') to start over"

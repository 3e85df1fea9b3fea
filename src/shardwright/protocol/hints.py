"""The safe ways out that protocol errors suggest (every suggestion must be safe to follow)."""

from __future__ import annotations

#: For damaged run state: abandoning keeps a published dataset; overwrite is named with its cost.
START_OVER = (
    "Abandon the run with `shardwright clean OUTPUT_DIR` (the published dataset is kept) and rerun; "
    "mode='overwrite' replaces the dataset too"
)

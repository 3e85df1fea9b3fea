"""``abandon()``: give up an unfinished run and keep the published dataset (``shardwright clean``).
The logic is :func:`shardwright.protocol.abandon.abandon_run`; this is the public entry point."""

from __future__ import annotations

from ..protocol.abandon import abandon_run
from ..secrets import redacting
from ..storage import open_storage
from .planning import check_output_dir


@redacting
def abandon(output_dir: str, storage_options: dict | None = None) -> bool:
    """Discard the unfinished run in ``output_dir`` (its checkpoints, unpublished chunks and
    manifest) and keep the published dataset, if any, exactly as it is. The way out of a
    failed ``mode="append"`` that must not be finished, without ``mode="overwrite"`` (which
    deletes the dataset).

    Returns True if there was a run to discard, False if there was none.

    Raises:
        ConcurrentRunError: a run is live there (stop it first).
        OutputDirError: a symbolic link inside the output.
    """
    check_output_dir(output_dir)  # abandon(5): one TypeError line naming output_dir, not a raw one
    return abandon_run(open_storage(output_dir, storage_options))

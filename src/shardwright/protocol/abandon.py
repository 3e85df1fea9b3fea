"""Abandoning an unfinished run: discard its checkpoints, unpublished chunks and manifest, and
keep the published dataset, if any, exactly as it is (``shardwright clean``, ``abandon()``)."""

from __future__ import annotations

import logging
import os

from ..errors import ConcurrentRunError, CorruptStateError, DatasetNotFoundError
from ..format import ChunkEntry
from ..storage import Storage
from .index import read_index
from .layout import INDEX_KEY, chunk_generation, is_our_chunk_name, lease_key
from .lease import Lease, live_leases
from .links import check_no_links
from .manifest import is_published, read_manifest
from .publish import discard_run_state, finish_published

__all__ = ["abandon_run"]

log = logging.getLogger("shardwright")


def abandon_run(storage: Storage) -> bool:
    """Discard the unfinished run in ``storage``; True if there was one, False if not.

    Raises:
        DatasetNotFoundError: a local output that does not exist.
        ConcurrentRunError: a run is live there (stop it first).
        OutputDirError: a symbolic link inside the output.
    """
    root = storage.local_path(INDEX_KEY)
    if root is not None and not os.path.isdir(os.path.dirname(root)):
        raise DatasetNotFoundError(f"{storage.url} does not exist: there is no run to abandon")
    check_no_links(storage)
    try:
        if read_manifest(storage) is None:
            return False  # nothing to abandon; and nothing written
    except CorruptStateError:
        pass  # discarded below
    for name, holder in live_leases(storage, ""):
        raise ConcurrentRunError(
            f"a run is live in {storage.url} ({holder.describe(lease_key(name), storage.url)}); "
            "stop it (or wait for it) before abandoning its run"
        )
    # Hold the single-node and the publish lease meanwhile, so no run starts or publishes
    # while its state is being deleted.
    leases = [Lease(storage, "node-0", "the run"), Lease(storage, "publish", "the final merge")]
    try:
        for lease in leases:
            lease.acquire(storage.url)
        return _discard(storage)
    finally:
        for lease in leases:
            lease.release()


def _discard(storage: Storage) -> bool:
    index_names: set[str] = set()
    index_chunks: list[ChunkEntry] = []
    try:
        index_chunks = read_index(storage).chunks
        index_names = {c.filename for c in index_chunks}
    except FileNotFoundError:
        pass
    try:
        manifest = read_manifest(storage)
    except CorruptStateError:
        # unreadable: discard every unpublished chunk of ours, whatever its generation
        generations = {
            chunk_generation(k) for k in storage.list("chunk-") if is_our_chunk_name(k) and k not in index_names
        }
        for generation in sorted(g for g in generations if g is not None):
            discard_run_state(storage, generation, keep=index_names)
        discard_run_state(storage, -1, keep=index_names)
        return True
    if manifest is None:
        return False
    if index_chunks and is_published(index_chunks, manifest):
        finish_published(storage, manifest, index_chunks)  # it had finished: just its cleanup
    else:
        discard_run_state(storage, manifest.generation, keep=index_names)
    log.info("abandoned the unfinished %s run in %s", manifest.mode, storage.url)
    return True

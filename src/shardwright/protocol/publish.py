"""Publishing: index.json from every shard's records (the publication point), then ONE cleanup;
and ``merge``, which publishes once every shard is done (``shardwright merge``)."""

from __future__ import annotations

from ..errors import CorruptStateError, DatasetNotFoundError, IncompleteRunError
from ..format import ChunkEntry, IndexConfig, render_index
from ..storage import Storage
from .claim import read_format
from .crash import crash_point
from .failures import forget_resolved_failures
from .fn_identity import FnIdentity
from .hints import START_OVER
from .index import read_index
from .layout import (
    CHUNK_PREFIX,
    CLAIM_PREFIX,
    FORMAT_KEY,
    INDEX_KEY,
    LEASES_PREFIX,
    MANIFEST_KEY,
    PROGRESS_PREFIX,
    SHARDS_PREFIX,
    SOURCES_PREFIX,
    STATE_DIR,
    chunk_generation,
    is_our_chunk_name,
    is_state_key,
    is_top_level_chunk,
    record_key,
)
from .lease import Lease
from .links import check_no_links
from .manifest import Manifest, read_manifest
from .recorded import read_selection, selected_positions, skipped_by_selection, write_selection
from .records import ShardProgress, load_progress, trusted_progress
from .run_record import RunRecord, read_run_record, write_run_record


def finish_published(
    storage: Storage, manifest: Manifest, index_chunks: list[ChunkEntry], finisher: FnIdentity | None = None
) -> None:
    """Steps 4-5 after a crash that followed step 3. If run.json of this run was written
    (step 4), records may be partly deleted already, so it is not rewritten from them."""
    previous = read_run_record(storage)
    if previous is not None and previous.run_id == manifest.run_id:
        cleanup_after_publish(storage, manifest, index_chunks, None)
        return
    cleanup_after_publish(storage, manifest, index_chunks, published_failures(storage, manifest), finisher)


def published_failures(storage: Storage, manifest: Manifest) -> list[list[int]]:
    """[input id, outputs committed] of the inputs a published run skipped, for its run.json:
    from the records when every shard's chain reaches its ``done`` record; else from the
    selection written before index.json. A worker leaves its last round's records to the page
    cache (engine.committer), so a power cut after publishing can take them."""
    progress = load_progress(storage, manifest.shard_bounds(), manifest.run_id, sealed=manifest.records_sealed)
    if all(p.done for p in progress.values()):
        return [i for s in sorted(progress) for i in progress[s].failed]
    try:
        selection = read_selection(storage, manifest.generation)
    except FileNotFoundError:
        raise CorruptStateError(
            f"{storage.url} was published by run {manifest.run_id}, but its input selection "
            f"and some of its checkpoint records are gone. {START_OVER}"
        ) from None
    return skipped_by_selection(manifest, *selection)


def cleanup_after_publish(
    storage: Storage,
    manifest: Manifest,
    index_chunks: list[ChunkEntry],
    failed: list[list[int]] | None,
    finisher: FnIdentity | None = None,
) -> None:
    """Steps 4-5. Safe to repeat: each step is idempotent. ``failed`` holds [input id, outputs
    committed] pairs of inputs skipped by the run; None when run.json of this run is already
    written (step 4 done before a crash)."""
    if failed is not None:
        try:
            previous = read_run_record(storage)
        except CorruptStateError:  # a damaged record of an earlier run: this run's replaces it
            previous = None
        write_run_record(storage, RunRecord.of_run(manifest, index_chunks, failed, finisher, previous))
        forget_resolved_failures(storage, {pair[0] for pair in failed})
    crash_point("after_run_record")
    discard_run_state(storage, manifest.generation, keep={c.filename for c in index_chunks})


def discard_run_state(storage: Storage, generation: int, keep: frozenset[str] | set[str] = frozenset()) -> None:
    """THE cleanup of a run's state, used after publishing and when a run is abandoned: chunk
    files of its generation not in ``keep`` (unpublished ones), its records and format claim,
    and the manifest last: until the manifest is gone, a rerun finds the run and finishes
    this cleanup."""
    # Every deletion but the manifest's is made durable by one barrier before it (not an
    # fsync of its directory each): the manifest still goes last, so a power cut before it
    # leaves a run whose cleanup a rerun finishes.
    for key in storage.list("chunk-"):
        if is_top_level_chunk(key) and chunk_generation(key) == generation and key not in keep:
            storage.delete(key, durable=False)
    # temp files of chunks whose writer was SIGKILLed before placing them (local disk): every
    # shard is done or the run abandoned, so no writer of this run may still be placing one
    storage.remove_leftover_temps(f"{CHUNK_PREFIX}{generation}-")
    # One listing of the run state serves the claims, records, sources and progress below
    # (issue 36: a listing each was 4 of a run's ~85 requests on an object store, serial
    # at its end); what a key is, is decided by its name as before.
    state = storage.list(f"{STATE_DIR}/")
    # shard claims left by killed processes (a done shard is never claimed again, so nobody
    # else would take them over); a holder still running somewhere loses its claim and stops
    # at its next record write
    claims = [key for key in state if key.startswith(LEASES_PREFIX + CLAIM_PREFIX)]
    storage.map_requests(lambda key: storage.delete(key, durable=False), claims)
    records = [key for key in state if key.startswith(SHARDS_PREFIX)]
    if all(is_state_key(key) for key in records):
        storage.delete_prefix(SHARDS_PREFIX)  # one batch request on S3
    else:  # a foreign file under shards/ is not ours to delete
        for key in records:
            if is_state_key(key):
                storage.delete(key, durable=False)
    # a source's run state (a JSONL line index) and progress snapshots (protocol.progress):
    # work past a record
    leftovers = [key for key in state if key.startswith((SOURCES_PREFIX, PROGRESS_PREFIX)) and is_state_key(key)]
    storage.map_requests(lambda key: storage.delete(key, durable=False), leftovers)
    storage.delete(FORMAT_KEY, durable=False)
    storage.barrier()
    storage.delete(MANIFEST_KEY)  # last


def our_files(storage: Storage) -> set[str]:
    """What ``mode="overwrite"`` may delete at the top level: index.json, the chunks it lists
    (a dataset's own chunks, ours or litdata's), and every chunk with one of our names."""
    mine = {INDEX_KEY}
    try:
        listed = [c.filename for c in read_index(storage).chunks]
    except (FileNotFoundError, CorruptStateError):
        listed = []
    mine.update(name for name in listed if "/" not in name and name not in ("", ".", ".."))
    mine.update(key for key in storage.list(CHUNK_PREFIX) if is_our_chunk_name(key))
    return mine


def wipe(storage: Storage) -> None:
    """mode='overwrite': remove the dataset (index.json and the chunks it lists), every chunk
    with one of our names, and every piece of run state (keys named as
    :func:`~shardwright.protocol.layout.is_state_key` says); never other files the user keeps
    in the folder (``chunk-final.bin``, ``search-index.json``) or under ``.shardwright/``
    (another program's files), nor leases."""
    present = set(storage.list(""))
    for key in sorted(our_files(storage) & present):
        if key != INDEX_KEY:
            storage.delete(key)
    storage.delete(INDEX_KEY)  # after its chunks: a crash in between leaves chunks we still know
    for key in present:
        if is_state_key(key) and not key.startswith(LEASES_PREFIX) and key != MANIFEST_KEY:
            storage.delete(key)  # only names the engine writes: never a foreign file under .shardwright/
    storage.delete(MANIFEST_KEY)  # last, as in every cleanup


def publish(storage: Storage, manifest: Manifest, progress: dict[int, ShardProgress]) -> list[ChunkEntry]:
    """Step 3: write index.json from the records of every shard. Callers hold the publish lease."""
    base = [ChunkEntry.from_json(c) for c in manifest.base_chunks]
    committed = [(r, r.chunk) for s in sorted(progress) for r in progress[s].records if r.chunk is not None]
    # One listing gives every chunk's size: no HEAD per chunk (on an object store each is a
    # request, serial latency at the end of every run: issue 36 counted 8 of 101 on Azure).
    present = {info.key: info.size for info in storage.list_info("chunk-")}
    for record, chunk in committed:
        size = present.get(chunk.filename)
        if size != record.stored_bytes:
            what = "is missing" if size is None else f"holds {size:,} bytes, its record says {record.stored_bytes:,}"
            raise CorruptStateError(
                f"chunk {storage.url}/{chunk.filename}, committed by checkpoint record "
                f"{record_key(record.shard, record.seq, record.epoch)}, {what}: it was deleted or changed by hand. "
                f"{START_OVER}"
            )
    fmt = read_format(storage, manifest.run_id)
    if fmt is None and manifest.base_config:
        fmt = manifest.base_config
    settings = manifest.settings
    config = IndexConfig(
        chunk_bytes=settings.chunk_bytes,
        chunk_size=settings.chunk_size,
        compression=settings.compression,
        data_format=list(fmt["data_format"]) if fmt else [],
        data_spec=fmt["data_spec"] if fmt else None,
        item_loader=settings.item_loader,
    )
    chunks = base + [chunk for _, chunk in committed]
    storage.barrier()  # chunks written without checkpoints are made durable before being named
    pairs = [pair for s in sorted(progress) for pair in progress[s].failed]
    partial = [list(pair) for pair in pairs if pair[1] > 0]  # failed midway: their first outputs are in
    selected = selected_positions(manifest, [pair[0] for pair in pairs])
    write_selection(storage, manifest.generation, manifest.inputs["count"], selected, partial)
    storage.write_bytes(INDEX_KEY, render_index(chunks, config))  # the publication point
    return chunks


def _published_by_another(storage: Storage, manifest: Manifest) -> bool:
    """Publishing writes index.json, then run.json (with the run's id), and only then deletes
    records (the manifest last): whoever sees records vanish sees one of these."""
    previous = read_run_record(storage)
    if previous is not None and previous.run_id == manifest.run_id:
        return True
    current = read_manifest(storage)
    return current is None or current.run_id != manifest.run_id


def finished_by_another(storage: Storage, run_id: str) -> str | None:
    """Why a run that stopped (its lease taken over while it was paused or cut off) has
    nothing left to do: another run finished the dataset since; None when it did not.
    Finished means published: run.json names ``run_id`` (a publisher writes it right after
    index.json, before its cleanup), as :func:`_published_by_another` judges. A manifest
    merely gone says nothing: an abandoned run (``shardwright clean``) leaves an older
    index.json behind."""
    try:
        last = read_run_record(storage)
        if last is None or last.run_id != run_id:
            return None
        items = sum(chunk.chunk_size for chunk in read_index(storage).chunks)
    except (FileNotFoundError, CorruptStateError, OSError):
        return None  # no dataset (or a damaged one): the original error says more
    return (
        f"another run finished and published {storage.url} ({items:,} items) while this one was paused "
        f"or cut off past the lease TTL; the dataset is complete and nothing needs doing "
        f"(`shardwright status {storage.url}` shows it; a rerun of the same call is a no-op)"
    )


def publish_if_complete(
    storage: Storage, manifest: Manifest, known: dict[int, ShardProgress], finisher: FnIdentity | None = None
) -> tuple[bool, list[int]]:
    """Publish when every shard is done (steps 3-5); returns (published, shards still missing).

    ``finisher`` is the identity of the fn that finished the run, for run.json.
    ``known`` is what this process already knows (its own shards); the other shards' records
    are read. Whoever gets the ``publish`` lease publishes; a node finishing at the same moment
    sees the lease taken (or the manifest gone) and leaves it to the winner.
    """
    everything = dict(known)
    others = {s: b for s, b in manifest.shard_bounds().items() if s not in known}
    if others:
        try:
            everything.update(load_progress(storage, others, manifest.run_id, sealed=manifest.records_sealed))
        except (FileNotFoundError, CorruptStateError):
            # A record listed a moment ago is gone (or seems to leave a gap): another node
            # published and its cleanup is deleting the records we are reading.
            if _published_by_another(storage, manifest):
                return True, []
            raise
    missing = sorted(s for s, p in everything.items() if not p.done)
    if missing:
        if _published_by_another(storage, manifest):  # listed after that cleanup deleted them
            return True, []
        return False, missing
    publisher = Lease(storage, "publish", "the final merge")
    if publisher.try_acquire() is not None:
        return False, []
    try:
        current = read_manifest(storage)
        if current is None or current.run_id != manifest.run_id:
            return True, []  # published by a node that finished at the same moment
        if manifest.use_checkpoint:
            # What is on storage, not what this process believes: a writer that lost its lease
            # (paused past the TTL) may have been superseded; only the records' chains count.
            # A shard whose record files one listing shows to be exactly those our workers
            # wrote is not read back (step 4 of the package docstring says why that is the same).
            everything, _ = trusted_progress(
                storage, manifest.shard_bounds(), known, manifest.run_id, sealed=manifest.records_sealed
            )
            missing = sorted(s for s, p in everything.items() if not p.done)
            if missing:
                return False, missing
        chunks = publish(storage, manifest, everything)
        crash_point("after_index")
        failed = [i for s in sorted(everything) for i in everything[s].failed]
        cleanup_after_publish(storage, manifest, chunks, failed, finisher)
    finally:
        publisher.release()
    return True, []


def merge(storage: Storage) -> None:
    """Publish index.json if every shard is done (a no-op when it is published already).

    Raises:
        IncompleteRunError: some shards are not finished (``missing_shards`` lists them).
        DatasetNotFoundError: there is neither a run nor a dataset.
    """
    check_no_links(storage)  # merging writes and deletes
    manifest = read_manifest(storage)
    if manifest is None:
        if storage.exists(INDEX_KEY):
            return
        raise DatasetNotFoundError(f"{storage.url} has no run to merge (no manifest) and no dataset")
    published, missing = publish_if_complete(storage, manifest, {})
    if missing:
        raise IncompleteRunError(
            f"not merged: {len(missing)} shard(s) are not finished: {missing[:20]}"
            f"{' ...' if len(missing) > 20 else ''}; rerun the array tasks that own them",
            missing_shards=missing,
        )

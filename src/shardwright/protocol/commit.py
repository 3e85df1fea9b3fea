"""The commit order of one round of chunks (protocol steps 1 and 2, see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..format import (
    ChunkEntry,
    PackedItems,
    build_chunk,
    chunk_checksum,
    chunk_header,
    compress,
    items_nbytes,
    parts_checksum,
)
from ..storage import Storage
from .crash import crash_point
from .layout import chunk_filename
from .lease import check_still_held
from .record_log import RecordLog
from .records import CommitRecord, write_records

# Items at least this large on average are written as parts (Storage.write_parts) rather than
# joined into one chunk first: a copy of the whole chunk saved (issue 19: arrays of 1 MiB).
# Smaller ones are joined, where the copy is cheap and one hash call beats one per item.
LARGE_ITEM_BYTES = 64 * 1024
SAME_EPOCH = -1  # PendingChunk.prev_epoch: the shard's previous record was this writer's own


@dataclass(frozen=True)
class PendingChunk:
    """A chunk (or a shard's end, with no items) waiting to be committed, and where its shard
    resumes once it is: what its commit record will say. The worker's committer empties
    ``items`` once the chunk file is written (:func:`write_chunks`); :func:`seal_round`
    reads only the claims."""

    shard: int
    seq: int
    items: list[bytes] | PackedItems  # PackedItems: items of one size, as blocks (format/packed.py)
    first_input: int
    next_input: int
    skip_outputs: int
    done: bool
    failed: tuple = ()  # [input id, outputs committed] pairs skipped since the previous record
    prev_epoch: int | None = -1  # epoch of the shard's record seq-1; -1 (SAME_EPOCH): this writer's own
    dim: int | None = None  # token datasets: tokens in the chunk (index.json's "dim")
    epoch: int | None = None  # the shard claim's epoch (protocol 5); None: the round's
    claim: tuple[str, str] | None = None  # (key, owner) of the shard's claim, checked before its record

    @cached_property
    def nbytes(self) -> int:  # asked for by the committer's backpressure twice per chunk
        return items_nbytes(self.items)


@dataclass(frozen=True)
class RoundSettings:
    """What a commit round needs to know about its run."""

    run_id: str
    generation: int
    compression: str | None
    use_checkpoint: bool
    epoch: int = 0  # the lease epoch this process writes under (fencing)
    lease_key: str | None = None  # the lease to check before each record write ...
    lease_owner: str | None = None  # ... and the owner it must still name


def commit_round(storage: Storage, batch: list[PendingChunk], run: RoundSettings) -> list[CommitRecord]:
    """Commit a batch of chunks; returns their records, in batch order.

    1. write every chunk file (not yet durable): :func:`write_chunks`;
    2. ``storage.barrier()``: those chunks, and the records of earlier rounds, become durable;
    3. check the lease and every shard claim of the round are still ours (a fenced writer
       stops here, one round late at most);
    4. write one record file per shard for the round (made durable by the writer's next
       barrier; a worker's last round by none, see the package docstring): 2-4 are
       :func:`seal_round`.
    So a durable record never names a chunk that is not durable, and one barrier serves the
    whole round instead of an fsync per file. Record names carry the epoch and chunk names the
    chunk's checksum, so a writer paused between 3 and 4 past its lease cannot overwrite the
    new holder's files with other bytes (nor, on local disk, replace them at all).

    A worker's committer runs step 1 of round k+1 while round k is in steps 2-4 (the disk
    flushes one round while the next is copied into the page cache): nothing names a chunk
    before its own round's record, so a barrier that happens to flush the next round's files
    too only makes them durable early.
    """
    records = write_chunks(storage, batch, run)
    seal_round(storage, batch, records, run)
    return records


def write_chunks(storage: Storage, batch: list[PendingChunk], run: RoundSettings) -> list[CommitRecord]:
    """Step 1 of :func:`commit_round`: the round's chunk files, and the records that will
    name them (not written yet)."""
    records = []
    for job in batch:
        epoch = job.epoch if job.epoch is not None else run.epoch
        entry, stored = None, 0
        if job.items:
            # the name comes from the bytes (protocol 6): the checksum first, then the write
            if run.compression is None and job.nbytes >= LARGE_ITEM_BYTES * len(job.items):
                # large items: written as they are (no joined copy of the chunk), hashed in place
                parts = [chunk_header(job.items), *job.items]
                raw_size = stored = len(parts[0]) + job.nbytes
                checksum = parts_checksum(parts)
            else:
                raw = build_chunk(job.items)
                parts = [compress(raw, run.compression)]
                raw_size, stored = len(raw), len(parts[0])
                checksum = chunk_checksum(parts[0])  # over the bytes as stored, from memory: no second pass
            name = chunk_filename(
                run.generation, job.shard, job.seq, run.compression, content=checksum.partition(":")[2]
            )
            storage.write_content_named(name, parts, durable=False)  # step 1: the chunk first
            entry = ChunkEntry(
                filename=name,
                chunk_size=len(job.items),
                chunk_bytes=raw_size,
                dim=job.dim,
                checksum=checksum,
            )
        prev = None if job.seq == 0 else epoch if job.prev_epoch == SAME_EPOCH else job.prev_epoch
        records.append(
            CommitRecord(
                job.shard,
                job.seq,
                entry,
                stored,
                job.first_input,
                job.next_input,
                job.skip_outputs,
                job.done,
                job.failed,
                run.run_id,
                epoch,
                prev,
            )
        )
    return records


def seal_round(
    storage: Storage,
    batch: list[PendingChunk],
    records: list[CommitRecord],
    run: RoundSettings,
    log: RecordLog | None = None,
) -> list[str]:
    """Steps 2-4 of :func:`commit_round` for chunks :func:`write_chunks` wrote (their items
    may be gone: only the batch's claims are read); ``log``: the writer's record log, where
    storage appends (module ``record_log``). Returns, per record, the key holding it (none
    without checkpoints)."""
    if not records:
        return []
    storage.barrier()
    crash_point("after_chunk")
    if run.use_checkpoint:
        if run.lease_key is not None and run.lease_owner is not None:
            check_still_held(storage, run.lease_key, run.lease_owner)
        for key, owner in dict.fromkeys(job.claim for job in batch if job.claim is not None):
            check_still_held(storage, key, owner)  # each shard's claim (protocol 5)
        return write_records(storage, records, log)  # the commit point
    return []

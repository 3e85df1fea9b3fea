"""One shard's output in a worker: samples encoded (the first sample of the run fixes the
format) and cut into chunks, handed to the committer thread as they fill.

A stop before the shard's end (Ctrl-C, SIGTERM, fn failing) does not commit the chunk in
progress, partly filled: that would cut the shard's later chunks elsewhere than a run that
never stopped, and so change the dataset's bytes and digest (issue 35). Its items are kept as
the shard's *pending tail* instead, in the progress snapshot (protocol 3b), which the resumed
shard takes up into its open chunk: every chunk is then cut where an uninterrupted run cuts it,
and no input whose output is in the tail is given to fn again."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate

from ..format import ItemEncoder, PackedItems, TokenEncoder, items_nbytes
from ..protocol.claim import claim_format, read_format
from ..protocol.commit import PendingChunk
from ..protocol.progress import MAX_SNAPSHOT_BYTES, BufferState, ProgressSnapshot, SlotState
from ..protocol.segments import Segment, cut_segments
from ..storage import Storage
from .committer import ChunkCommitter
from .tasks import ShardTask, WorkerConfig

__all__ = ["TAIL_LIMIT_BYTES", "FormatGate", "ShardWriter"]

# The most a pending tail may hold: a snapshot is refused past MAX_SNAPSHOT_BYTES (the room
# left is for its header). A larger chunk in progress (chunk_bytes of a GiB) is committed
# partly filled on a stop, as before: its work kept, its shard's later chunks cut elsewhere.
TAIL_LIMIT_BYTES = MAX_SNAPSHOT_BYTES - 64 * 1024 * 1024
# Items added since the last segment stay inline in the snapshot up to this many bytes (each
# snapshot rewrites at most this much, with no file per few items); past it they become a new
# segment, written once (protocol.segments).
INLINE_BUFFER_BYTES = 1024 * 1024


class FormatGate:
    """Encodes samples; the first sample anywhere in the run fixes the format (format.json)."""

    def __init__(self, storage: Storage, run_id: str, tokens: bool = False):
        self.storage = storage
        self.run_id = run_id
        self.encoder_class = TokenEncoder if tokens else ItemEncoder
        self.encoder: ItemEncoder | TokenEncoder | None = None

    def encode(self, sample, input_index: int) -> bytes:
        if self.encoder is None:
            known = read_format(self.storage, self.run_id)
            if known is None:
                probe = self.encoder_class()
                data = probe.encode(sample, input_index)
                known = claim_format(
                    self.storage, self.run_id, list(probe.data_format or []), probe.data_spec, input_index
                )
                if known["data_format"] == probe.data_format and known["data_spec"] == probe.data_spec:
                    self.encoder = probe
                    self.encoder.format_input_index = known["input_index"]
                    return data
            self.encoder = self.encoder_class(known["data_format"], known["data_spec"])
            self.encoder.format_input_index = known["input_index"]
        return self.encoder.encode(sample, input_index)


class ShardWriter:
    """Buffers one shard's encoded items and cuts them into chunks.

    ``position`` is where the shard would resume if everything added so far were committed:
    (next input, outputs of it already taken). It is what each commit record stores.
    """

    def __init__(
        self,
        task: ShardTask,
        cfg: WorkerConfig,
        committer: ChunkCommitter,
        token_itemsize: Callable[[], int | None] | None = None,
    ):
        self.task, self.cfg, self.committer = task, cfg, committer
        self.token_itemsize = token_itemsize  # token datasets: bytes per token, known once encoded
        # the chunk in progress: one bytes per item, or blocks of items of one size (add_block)
        self.items: list[bytes] | PackedItems = []
        self.items_bytes = 0
        self.seq = task.next_seq
        self.position = (task.next_input, task.skip_outputs)
        self.committed = self.position
        self.first_input = task.next_input
        self.failed: list[list[int]] = []  # [run-wide id, outputs committed] skipped since the last commit
        self.prev_epoch = task.prev_epoch  # the next record follows this epoch's (see protocol: fencing)
        self.epoch = task.claim.epoch if task.claim is not None else cfg.round.epoch
        self.claim = (task.claim.key, task.claim.owner) if task.claim is not None else None
        self.segments: list[Segment] = []  # the first items as segments (protocol.segments)

    def _as_list(self) -> list[bytes]:
        """The chunk in progress as one bytes per item (what everything but add_block takes)."""
        if type(self.items) is PackedItems:
            self.items = self.items.tolist()
        return self.items  # type: ignore[return-value]

    def add(self, data: bytes, input_index: int, after: tuple[int, int]) -> None:
        items = self.items
        if type(items) is PackedItems and len(data) != items.itemsize:
            self._as_list()  # (an item of the blocks' size joins them: a generator's samples)
        if self.items and self.cfg.chunk_bytes and self.items_bytes + len(data) > self.cfg.chunk_bytes:
            self.commit()  # the chunk ends before this item, at the current position
        if not self.items:
            self.first_input = input_index
        if isinstance(self.items, PackedItems):
            self.items.add(data)
        else:
            self.items.append(data)  # (commit() starts a new list)
        self.items_bytes += len(data)
        self.position = after
        if self.cfg.chunk_size and len(self.items) >= self.cfg.chunk_size:
            self.commit()

    def add_run(self, run: list[bytes], first_input: int) -> None:
        """``run[k]`` is the one sample of input ``first_input + k``: the same chunks as
        :meth:`add` called item by item, with the sizes summed at C speed."""
        chunk_bytes, chunk_size = self.cfg.chunk_bytes, self.cfg.chunk_size
        if not run:
            return
        items = self._as_list()
        total = sum(map(len, run))
        if (not chunk_bytes or self.items_bytes + total <= chunk_bytes) and (
            not chunk_size or len(self.items) + len(run) <= chunk_size
        ):
            # The whole run fits in the current chunk (most runs: a chunk holds many): no
            # table of cumulative sizes, half the per-item cost of the cut below (issue 36).
            if not self.items:
                self.first_input = first_input
            items.extend(run)
            self.items_bytes += total
            self.position = (first_input + len(run), 0)
            if chunk_size and len(self.items) >= chunk_size:
                self.commit()
            return
        ends = list(accumulate(map(len, run)))  # bytes of run[:k+1]
        k, n = 0, len(run)
        while k < n:
            before = ends[k - 1] if k else 0
            stop = n
            if chunk_bytes:  # the items that fit in the current chunk (one always fits an empty one)
                stop = bisect_right(ends, chunk_bytes - self.items_bytes + before, k, n)
                if stop == k:
                    if self.items:
                        self.commit()
                        continue
                    stop = k + 1
            if chunk_size:
                stop = min(stop, k + chunk_size - len(self.items))
            if not self.items:
                self.first_input = first_input + k
            items = self._as_list()  # a commit above made a new list
            items.extend(run[k:stop])
            self.items_bytes += ends[stop - 1] - before
            self.position = (first_input + stop, 0)
            k = stop
            if (chunk_size and len(self.items) >= chunk_size) or (k < n and chunk_bytes):
                self.commit()  # full by count, or the next item does not fit

    def add_block(self, block: bytes, itemsize: int, first_input: int) -> None:
        """``block`` holds one item of ``itemsize`` bytes for each input from ``first_input``
        on: the same chunks as :meth:`add_run` of those items, kept as blocks of items with
        no object per item (format/packed.py; issue 36)."""
        count = len(block) // itemsize
        if count * itemsize != len(block):
            raise ValueError(f"a block of {len(block)} bytes is not a whole number of {itemsize}-byte items")
        items = self.items
        if type(items) is not PackedItems or items.itemsize != itemsize:
            if any(len(item) != itemsize for item in items):  # a tail of other items: item by item
                self.add_run([block[k : k + itemsize] for k in range(0, len(block), itemsize)], first_input)
                return
            packed = PackedItems(itemsize)
            packed.add(b"".join(items))
            self.items = packed
        chunk_bytes, chunk_size = self.cfg.chunk_bytes, self.cfg.chunk_size
        k = 0
        while k < count:
            items = self.items
            if type(items) is not PackedItems:  # commit() left an empty list
                items = self.items = PackedItems(itemsize)
            held = items.count
            take = count - k
            if chunk_bytes:  # the items that fit in the current chunk (one always fits an empty one)
                take = min(take, max(0, chunk_bytes - self.items_bytes) // itemsize)
                if take == 0:
                    if held:
                        self.commit()
                        continue
                    take = 1
            if chunk_size:
                if held >= chunk_size:
                    self.commit()
                    continue
                take = min(take, chunk_size - held)
            if not held:
                self.first_input = first_input + k
            items.add(block if take == count else block[k * itemsize : (k + take) * itemsize])
            self.items_bytes += take * itemsize
            k += take
            self.position = (first_input + k, 0)
            if (chunk_size and items.count >= chunk_size) or (k < count and chunk_bytes):
                self.commit()  # full by count, or the next item does not fit

    def commit(self, done: bool = False) -> None:
        if not self.items and not done and not self.failed:
            return
        next_input, skip = self.position
        dim = None
        if self.cfg.tokens and self.items and self.token_itemsize is not None:
            dim = self.items_bytes // (self.token_itemsize() or 1)
        self.committer.submit(
            PendingChunk(
                self.task.shard,
                self.seq,
                self.items,
                self.first_input,
                next_input,
                skip,
                done,
                tuple(tuple(pair) for pair in self.failed),
                prev_epoch=self.prev_epoch,
                dim=dim,
                epoch=self.epoch,
                claim=self.claim,
            )
        )
        self.prev_epoch = self.epoch
        self.seq += 1
        self.committed = self.position
        self.items, self.items_bytes, self.failed = [], 0, []
        self.segments = []

    def past_the_records(self) -> bool:
        """Whether anything was added (items, skipped inputs, inputs done) since the last commit."""
        return bool(self.items or self.failed) or self.position != self.committed

    def snapshot(self, slots: list[SlotState] | None = None) -> ProgressSnapshot:
        """Everything past the shard's last record (protocol.progress): the chunk in progress,
        where the shard resumes after it, and ``slots`` (inputs in flight past it). The items
        added since the last snapshot become new segments once they pass INLINE_BUFFER_BYTES:
        a large buffer is saved without rewriting it, and without cutting the chunk."""
        items = self._as_list()
        covered = sum(s.count for s in self.segments)
        if sum(map(len, items[covered:])) > INLINE_BUFFER_BYTES:
            self.segments.extend(cut_segments(items[covered:]))
        return ProgressSnapshot(
            run_id=self.cfg.round.run_id,
            shard=self.task.shard,
            seq=self.seq,
            tip_epoch=self.prev_epoch,
            committed=self.committed,
            epoch=self.epoch,
            buffer=BufferState(
                self.first_input, self.position, [list(p) for p in self.failed], list(items), list(self.segments)
            ),
            slots=slots or [],
        )

    def take_up(self, buffer: BufferState) -> None:
        """Reopen the chunk in progress a stopped writer left in its snapshot (its pending tail)."""
        self.items = list(buffer.items)
        self.items_bytes = sum(map(len, self.items))
        self.first_input = buffer.first_input
        self.position = buffer.position
        self.failed = [list(p) for p in buffer.failed]
        self.segments = []  # another writer's (epoch's) segments: this one writes its own

    def keeps_tails(self) -> bool:
        """Whether a stop keeps the chunk in progress as a pending tail (see the module): only
        with records to extend (use_checkpoint) and a tail a snapshot can hold."""
        return self.cfg.round.use_checkpoint and self.items_bytes <= TAIL_LIMIT_BYTES

    def stop(self) -> None:
        """The worker stops before the shard's end: keep what was added since the last record.
        As a pending tail when :meth:`keeps_tails` (written by the committer after the chunks
        submitted before it, so it extends their records), else committed as a chunk."""
        if not self.keeps_tails():
            self.commit()
        elif self.past_the_records():
            self.committer.save_progress(self.snapshot())

    def mark(self) -> tuple[int, int, tuple[int, int]]:
        return self.seq, len(self.items), self.position

    def rollback(self, mark: tuple[int, int, tuple[int, int]]) -> None:
        """Forget what an input added since ``mark`` (fn failed on it, or is retried)."""
        seq, length, position = mark
        items = self.items
        if seq == self.seq:
            if isinstance(items, PackedItems):
                items.truncate(length)  # (not one by one: fn failing often on a large chunk)
            else:
                del items[length:]
            self.position = position
            while self.segments and sum(s.count for s in self.segments) > length:
                self.segments.pop()  # it holds items forgotten now: its items are cut again
        else:  # a chunk was committed inside this input: keep that, drop the rest
            items.clear()
            self.position = self.committed
        self.items_bytes = items_nbytes(items)

"""One shard's output in a worker: samples encoded (the first sample of the run fixes the
format) and cut into chunks, handed to the committer thread as they fill."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate

from ..format import ItemEncoder, TokenEncoder
from ..protocol.claim import claim_format, read_format
from ..protocol.commit import PendingChunk
from ..storage import Storage
from .committer import ChunkCommitter
from .tasks import ShardTask, WorkerConfig

__all__ = ["FormatGate", "ShardWriter"]


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
        self.items: list[bytes] = []
        self.items_bytes = 0
        self.seq = task.next_seq
        self.position = (task.next_input, task.skip_outputs)
        self.committed = self.position
        self.first_input = task.next_input
        self.failed: list[list[int]] = []  # [run-wide id, outputs committed] skipped since the last commit
        self.prev_epoch = task.prev_epoch  # the next record follows this epoch's (see protocol: fencing)
        self.epoch = task.claim.epoch if task.claim is not None else cfg.round.epoch
        self.claim = (task.claim.key, task.claim.owner) if task.claim is not None else None

    def add(self, data: bytes, input_index: int, after: tuple[int, int]) -> None:
        if self.items and self.cfg.chunk_bytes and self.items_bytes + len(data) > self.cfg.chunk_bytes:
            self.commit()  # the chunk ends before this item, at the current position
        if not self.items:
            self.first_input = input_index
        self.items.append(data)
        self.items_bytes += len(data)
        self.position = after
        if self.cfg.chunk_size and len(self.items) >= self.cfg.chunk_size:
            self.commit()

    def add_run(self, run: list[bytes], first_input: int) -> None:
        """``run[k]`` is the one sample of input ``first_input + k``: the same chunks as
        :meth:`add` called item by item, with the sizes summed at C speed."""
        chunk_bytes, chunk_size = self.cfg.chunk_bytes, self.cfg.chunk_size
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
            self.items.extend(run[k:stop])
            self.items_bytes += ends[stop - 1] - before
            self.position = (first_input + stop, 0)
            k = stop
            if (chunk_size and len(self.items) >= chunk_size) or (k < n and chunk_bytes):
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

    def mark(self) -> tuple[int, int, tuple[int, int]]:
        return self.seq, len(self.items), self.position

    def rollback(self, mark: tuple[int, int, tuple[int, int]]) -> None:
        """Forget what an input added since ``mark`` (fn failed on it, or is retried)."""
        seq, length, position = mark
        if seq == self.seq:
            del self.items[length:]
            self.position = position
        else:  # a chunk was committed inside this input: keep that, drop the rest
            self.items.clear()
            self.position = self.committed
        self.items_bytes = sum(len(x) for x in self.items)

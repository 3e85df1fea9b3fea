"""A ShardWriter with a recorder in place of its committer thread, for unit tests of how it
cuts chunks (test_shard_writer.py, test_packed_items.py)."""

from __future__ import annotations

from shardwright.engine.shard_writer import ShardWriter
from shardwright.engine.tasks import ShardTask, WorkerConfig
from shardwright.protocol.commit import PendingChunk, RoundSettings

__all__ = ["LIMITS", "Recorder", "summary", "writer_for"]


class Recorder:
    """Stands in for the committer thread: keeps what the writer submits."""

    def __init__(self) -> None:
        self.chunks: list[PendingChunk] = []

    def submit(self, job: PendingChunk) -> None:
        self.chunks.append(job)


def writer_for(chunk_bytes: int | None, chunk_size: int | None, start: int = 5) -> tuple[ShardWriter, Recorder]:
    cfg = WorkerConfig(
        output_dir="memory://unused",
        storage_options=None,
        round=RoundSettings("run", 0, None, True),
        chunk_size=chunk_size,
        chunk_bytes=chunk_bytes,
        on_error="raise",
        max_retries=0,
        node_rank=0,
    )
    task = ShardTask(shard=3, start=start, end=10_000, next_input=start, skip_outputs=0, next_seq=0, inputs=[])
    recorder = Recorder()
    return ShardWriter(task, cfg, recorder), recorder  # type: ignore[arg-type]


def summary(chunks: list[PendingChunk]) -> list[tuple]:
    return [(c.seq, list(c.items), c.first_input, c.next_input, c.skip_outputs, c.done) for c in chunks]


LIMITS = [(10, None), (25, None), (1, None), (None, 1), (None, 3), (None, 7), (40, 4), (64, 100), (None, None)]

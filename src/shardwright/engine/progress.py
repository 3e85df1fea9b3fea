"""Main-process bookkeeping of what workers report: the progress bar and the commit counts."""

from __future__ import annotations

import sys
from typing import Any

from .. import telemetry
from ..protocol.records import ShardProgress
from .messages import Committed, Progress


def tqdm_class() -> Any:
    """The notebook widget bar where it can draw, the text bar elsewhere (tqdm.auto warns on
    every run in a notebook without ipywidgets)."""
    if "ipykernel" in sys.modules:
        try:
            import ipywidgets  # noqa: F401
            from tqdm.auto import tqdm

            return tqdm
        except ImportError:
            pass
    from tqdm import tqdm

    return tqdm


class Tracker:
    """Counts what this call committed, keeps each shard's progress current, draws the bar."""

    def __init__(self, progress: dict[int, ShardProgress], verbose: bool):
        self.progress = progress
        self.verbose = verbose
        self.items = self.chunks = self.bytes = 0
        self.bar: Any = None

    @property
    def inputs_total(self) -> int:
        return sum(p.end - p.start for p in self.progress.values())

    def inputs_done(self) -> int:
        return sum(p.inputs_done for p in self.progress.values())

    def open_bar(self) -> None:
        if not self.verbose:
            return
        self.bar = tqdm_class()(
            total=self.inputs_total,
            initial=self.inputs_done(),
            unit="input",
            desc="optimize",
            mininterval=0.5,
            maxinterval=1.0,
            smoothing=0.1,
            dynamic_ncols=True,
        )

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def on_idle(self) -> None:
        if self.bar is not None:
            self.bar.refresh()

    def on_message(self, message: object) -> None:
        if isinstance(message, Progress):
            telemetry.get().inputs_done(message.inputs)
            if self.bar is not None:
                self.bar.update(message.inputs)
        elif isinstance(message, Committed):
            record = message.record
            self.progress[record.shard].add(record, message.file_key)
            if record.failed:
                telemetry.get().failed(len(record.failed))
            if record.chunk is not None:
                self.items += record.chunk.chunk_size
                self.chunks += 1
                self.bytes += record.stored_bytes
                counters = telemetry.get()
                counters.items(record.chunk.chunk_size)
                counters.bytes_written(record.stored_bytes)

"""What a worker is given: the run's settings every worker shares, and one shard's task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..format import TOKENS_LOADER
from ..protocol.claims import ClaimTicket
from ..protocol.commit import RoundSettings
from ..protocol.manifest import Manifest
from .failed_dir import usable_failed_dir
from .io_options import InflightOptions
from .options import OptimizeOptions

__all__ = ["LeaseTicket", "ShardTask", "WorkerConfig"]


class LeaseTicket(Protocol):
    """What workers need of the node's lease (protocol.lease.Lease): its epoch and identity."""

    epoch: int
    key: str
    owner: str


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker of a run needs; derived from the options and the run's manifest."""

    output_dir: str
    storage_options: dict | None
    round: RoundSettings
    chunk_size: int | None
    chunk_bytes: int | None
    on_error: str  # "raise" or "skip"
    max_retries: int
    node_rank: int
    timeout: float | None = None  # seconds per input (SIGALRM in the worker), None: no limit
    tokens: bool = False  # item_loader=TokensLoader(): raw token items, chunk entries with dim
    failed_dir: str | None = None  # where failure records are copied too (failed_dir=), best effort
    retry_run: bool = False  # a run redoing inputs that failed before: a success is "resolved"
    inflight: InflightOptions = InflightOptions()  # concurrency, durable_every, stop_grace, retries, fn's kind
    # inputs in flight: the most a worker holds while it takes more shards (its even share of
    # the node's inputs), so that one worker does not hold them all while another idles
    fair_share: int | None = None

    @classmethod
    def for_run(
        cls,
        output_url: str,
        options: OptimizeOptions,
        manifest: Manifest,
        node_rank: int,
        lease: LeaseTicket | None = None,
    ) -> WorkerConfig:
        """``lease``: a run-wide lease every record write checks (None: each shard's claim,
        carried by its ShardTask, is the lease its writes are fenced by)."""
        settings = manifest.settings
        return cls(
            output_dir=output_url,
            storage_options=options.storage_options,
            round=RoundSettings(
                run_id=manifest.run_id,
                generation=manifest.generation,
                compression=settings.compression,
                use_checkpoint=manifest.use_checkpoint,
                epoch=lease.epoch if lease is not None else 0,
                lease_key=lease.key if lease is not None else None,
                lease_owner=lease.owner if lease is not None else None,
            ),
            chunk_size=settings.chunk_size,
            chunk_bytes=settings.chunk_bytes,
            on_error=options.on_error,
            max_retries=options.max_retries,
            node_rank=node_rank,
            timeout=options.timeout,
            tokens=settings.item_loader == TOKENS_LOADER,
            failed_dir=usable_failed_dir(options.engines.failed_dir, options.storage_options),
            retry_run=manifest.mode == "retry",
            inflight=options.inflight,
            fair_share=-(-manifest.num_inputs // max(1, options.num_workers * (options.num_nodes or 1))),
        )


@dataclass(frozen=True)
class ShardTask:
    shard: int
    start: int
    end: int
    next_input: int
    skip_outputs: int
    next_seq: int
    inputs: Sequence  # the input values from next_input to end (a lazy slice of a source)
    ids: Sequence | None = None  # run-wide input ids of those values when they are not next_input.. (a retry)
    base_skips: list | None = None  # a retry: outputs of each input committed by the run that failed it
    prev_epoch: int | None = None  # epoch of the shard's last committed record (its chain's tip)
    claim: ClaimTicket | None = None  # the shard's claim (protocol 5): its epoch names what we write
    # a new run's first (and only) node: no record or progress snapshot of it can exist yet,
    # so the worker does not look for one (a listing per shard on an object store)
    fresh: bool = False

    def input_id(self, position: int) -> int:
        return self.ids[position - self.next_input] if self.ids is not None else position

    def first_skip(self, position: int) -> int:
        """Outputs of this input already committed, which fn's rerun must not add again."""
        resumed = self.skip_outputs if position == self.next_input else 0
        base = self.base_skips[position - self.next_input] if self.base_skips is not None else 0
        return max(resumed, base)

"""StreamingDataLoader: a torch DataLoader that knows where it is in an epoch, so training can
resume exactly there — in another process, with other num_workers or another world size."""

from __future__ import annotations

import functools
import logging
from typing import Any, cast

from torch.utils.data import DataLoader

from .. import telemetry
from ..errors import UsageError, require_bool
from .collate import litdata_collate
from .dataset import StreamingDataset
from .litdata_state import is_litdata_loader_state, litdata_resume
from .members import TaggedBatch, collate_tagged
from .metrics import timed_batches
from .receipts import EpochReport, ReceiptLedger, check_digest, check_receipt, report_of, state_receipt
from .resume import Resumable
from .state import STATE_VERSION, ResumeStateError

__all__ = ["StreamingDataLoader", "worker_resume"]

log = logging.getLogger("shardwright")


class StreamingDataLoader(DataLoader):
    """A ``torch.utils.data.DataLoader`` over a :class:`StreamingDataset` (or a
    :class:`CombinedStreamingDataset`) with exact mid-epoch resume.

    Each ``iter(loader)`` is one epoch: the first uses the dataset's epoch (see
    ``set_epoch``), each later one the next epoch. :meth:`state_dict` says where the loader
    is; a new loader given it through :meth:`load_state_dict` goes on with the items nobody
    has read yet — jumping there, not replaying — also with other ``num_workers``, another
    world size or another ``batch_size`` (the rest of the epoch is then cut anew).

    Args:
        dataset: a StreamingDataset (map-style ones are iterated the streaming way here) or a
            CombinedStreamingDataset.
        batch_size: items per batch; workers split a rank's share at whole batches, so only a
            rank's last batch can be partial.
        num_workers: DataLoader worker processes per rank.
        shuffle: None keeps the dataset's; True/False overrides it for this loader (litdata's
            meaning: the dataset's chunk-aware shuffle, with its seed), the dataset object itself
            is left as it is.
        drop_last: None keeps the dataset's; True/False overrides the dataset's drop_last for
            this loader (ranks equal) and also drops each worker's partial last batch, so
            only whole batches are read, as with litdata.
        collate_fn: default :func:`litdata_collate` (graphs batched with PyG, the rest with
            torch's default_collate), as litdata's loader.
        require_resume: True: iterating raises unless :meth:`load_state_dict` was called
            first (a training run that must resume, never silently start at sample 0).
        **kwargs: any other DataLoader argument (pin_memory, persistent_workers,
            multiprocessing_context, prefetch_factor, ...); ``sampler`` and ``batch_sampler``
            are refused: the dataset orders itself.

    Raises:
        TypeError: dataset is not a StreamingDataset / CombinedStreamingDataset (any
            :class:`~shardwright.reader.resume.Resumable`).
        UsageError: sampler or batch_sampler was given, or batch_size is not an int >= 1;
            iterating with ``require_resume=True`` before :meth:`load_state_dict`.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        num_workers: int = 0,
        *,
        shuffle: bool | None = None,
        drop_last: bool | None = None,
        collate_fn: Any = None,
        require_resume: bool = False,
        **kwargs: Any,
    ):
        if not isinstance(dataset, Resumable):
            raise TypeError(
                f"StreamingDataLoader reads a StreamingDataset or CombinedStreamingDataset, got "
                f"{type(dataset).__name__}; use torch.utils.data.DataLoader for other datasets"
            )
        profiler = [
            k for k in ("profile_batches", "profile_cprofile", "profile_dir", "profile_skip_batches") if k in kwargs
        ]
        if profiler:
            raise UsageError(
                f"StreamingDataLoader({'=, '.join(profiler)}=) is refused: litdata's loader profiler is not offered; wrap "
                "the loop in torch.profiler.profile() or cProfile instead"
            )
        for refused in ("sampler", "batch_sampler"):
            if kwargs.get(refused) is not None:
                raise UsageError(
                    f"StreamingDataLoader does not take {refused}=: pass shuffle=True (and seed=) to "
                    "the StreamingDataset or the loader, which shuffle chunk-aware and per epoch"
                )
            kwargs.pop(refused, None)
        shuffle = require_bool("shuffle", shuffle, optional=True)  # None: keep the dataset's
        drop_last = require_bool("drop_last", drop_last, optional=True)
        self._require_resume = require_bool("require_resume", require_resume)
        self._resumed_note: str | None = None  # logged after the first batch of a restored loader
        if type(batch_size) is not int or batch_size < 1:
            raise UsageError(f"batch_size must be an int >= 1, got {batch_size!r}")
        # shuffle=/drop_last= override the dataset's for this loader only (litdata's meaning).
        view: Resumable = dataset.loader_view(shuffle=shuffle, drop_last=drop_last)
        view.configure_loader(batch_size, bool(drop_last))
        kwargs["collate_fn"] = collate_fn if collate_fn is not None else litdata_collate
        # a mix of members other than StreamingDatasets is saved in litdata's loader format:
        # each batch brings back how many items its worker had taken of each member
        self._saves_members = bool(getattr(view, "saves_members", False))
        if self._saves_members:
            kwargs["collate_fn"] = functools.partial(collate_tagged, kwargs["collate_fn"])
        self._member_counts: dict[int, list[int]] = {}
        self._member_cycles: dict[int, list[int]] = {}  # a zip's cycles by worker
        self._latest_worker = 0
        self._member_resumed = False
        self._view = view
        self._started = False
        self._finished = False
        self._batches = 0
        self._pending: dict | None = None  # a position to resume from at the next iteration
        self._pending_epoch = 0  # its epoch
        self._receipts = ReceiptLedger()  # what the last receipt summed: the next adds only what was read since
        self._epoch_start: Any = None  # where the running iteration started (view.epoch_start)
        # cast: a Resumable is an IterableDataset (torch types the argument as its Dataset class)
        super().__init__(
            cast(Any, view), batch_size=batch_size, num_workers=num_workers, drop_last=bool(drop_last), **kwargs
        )

    @property
    def current_epoch(self) -> int:
        """litdata's count: 0 before the first iteration, 1 during (and after) the first epoch,
        2 during the second ... After :meth:`load_state_dict`, the epoch the state resumes."""
        if self._member_resumed:  # a litdata loader state of a mix of other members: its epoch
            return self._view.epoch + 1
        if self._pending is not None:  # a state taken mid-epoch counts that epoch as started
            fresh = self._pending == self._view.fresh_position(self._pending_epoch, self.num_workers)
            return self._pending_epoch + (0 if fresh else 1)
        if not self._started:
            return self._view.epoch
        return self._view.epoch + 1

    def __iter__(self):
        view = self._view
        if self._require_resume and self._pending is None and not self._started:
            raise UsageError(
                "this StreamingDataLoader has require_resume=True but load_state_dict() was never called: it would "
                "start at sample 0. Call loader.load_state_dict(saved_state) before iterating, or pass "
                "require_resume=False for a fresh run"
            )
        if self._pending is not None:
            self._resumed_note = _resumed_line(view, self._pending, self._receipts)
            view.apply_position(self._pending)
            self._pending = None
            old = getattr(self, "_iterator", None)
            if old is not None:  # persistent workers hold copies of the dataset from before the resume
                # torch has no public way to stop an iterator's workers now (only its __del__)
                old._shutdown_workers()  # noqa: SLF001
                self._iterator = None
        elif self._started:
            view.set_epoch(view.epoch + 1)
        view.set_epoch(view.epoch)  # also refreshes rank / world size in this process
        if not self._member_resumed:
            self._member_counts, self._member_cycles = {}, {}
        self._member_resumed = False
        self._started, self._finished, self._batches = True, False, 0
        self._epoch_start = view.epoch_start(view.epoch, self.num_workers)
        iterator: Any = super().__iter__()
        counters = telemetry.get()
        if counters.enabled:
            iterator = timed_batches(iterator, counters, self.num_workers)
        view.clear_resume()  # workers have their copies; this process's iterator already planned
        for batch in iterator:
            if isinstance(batch, TaggedBatch):
                self._member_counts[batch.worker] = batch.counts
                if batch.cycles is not None:
                    self._member_cycles[batch.worker] = batch.cycles
                self._latest_worker, batch = batch.worker, batch.value
            self._batches += 1
            if self._resumed_note is not None:
                log.info("%s", self._resumed_note)
                self._resumed_note = None
            yield batch
        self._finished = True

    def _position(self) -> dict:
        view = self._view
        if not self._started and self._pending is not None:
            return self._pending
        if not self._started or self._finished:
            epoch = view.epoch + (1 if self._finished else 0)
            return view.fresh_position(epoch, self.num_workers)
        return view.position_after(view.epoch, self._epoch_start, self._batches)

    def state_dict(self) -> dict:
        """Where this loader is: a small JSON-serialisable dict for :meth:`load_state_dict`.

        In DDP every rank's state is the same (ranks yield batches in lockstep); saving rank
        0's is enough.
        """
        if self._saves_members:
            return self._members_state()
        position = self._position()
        return {
            "shardwright_loader": STATE_VERSION,
            "dataset": self._view.identity(),
            "position": position,
            "receipt": state_receipt(self._view, position, self._receipts),
        }

    def epoch_report(self) -> EpochReport:
        """Whether the current (or just finished) epoch read every sample exactly once, from
        the receipts of every rank (gathered with torch.distributed when it is initialised:
        then every rank must call it). ``bool(report.exactly_once)`` is what to assert on."""
        view = self._view
        if self._started:
            position = view.position_after(view.epoch, self._epoch_start, self._batches)
        else:
            position = self._position()
        return report_of(view, position, self._receipts)

    def load_state_dict(self, state: dict) -> None:
        """Go on from ``state`` (from :meth:`state_dict`) at the next ``iter(loader)``.

        A litdata 0.2.x ``StreamingDataLoader.state_dict()`` of a StreamingDataset saved with
        ``shuffle=False`` is accepted too: the items litdata had read (by its worker split and
        replay rule) are left out of the rest of its epoch, on any ``num_workers``.

        Raises:
            ResumeStateError: the state is damaged, or belongs to another dataset or to other
                order options (shuffle, seed, window, mixing weights), or is a litdata state
                that cannot be mapped exactly (shuffle=True, token datasets, elastic resumes).
        """
        if self._saves_members:
            self._load_members_state(state)
            return
        if is_litdata_loader_state(state):
            state = self._from_litdata(state["dataset"])
        elif isinstance(state, dict) and "latest_worker_idx" in state and "shardwright_loader" not in state:
            raise ResumeStateError(
                "this litdata loader state is of a CombinedStreamingDataset or ParallelStreamingDataset, whose "
                "mixing and cycling follow litdata's worker split; shardwright resumes litdata states of a "
                "StreamingDataset only: restart the epoch under shardwright"
            )
        if (
            not isinstance(state, dict)
            or type(state.get("shardwright_loader")) is not int
            or state.get("shardwright_loader") != STATE_VERSION
        ):
            raise ResumeStateError(
                "not a StreamingDataLoader state (no 'shardwright_loader': 1); pass what "
                "StreamingDataLoader.state_dict() returned"
            )
        check_digest(state, getattr(self._view, "digest", None))
        mine = self._view.identity()
        if state.get("dataset") != mine:
            raise ResumeStateError(
                f"the state belongs to another dataset or other order options: {state.get('dataset')!r:.300} "
                f"vs this loader's {mine!r:.300}; resume with the same dataset, shuffle, seed and weights"
            )
        position = state.get("position")
        self._pending_epoch = self._view.check_position(position)
        check_receipt(state, self._view, position, self._receipts)
        self._pending = position
        self._started = False

    def _members_state(self) -> dict:
        """litdata's loader state of a mix of other members: each member's own state (given the
        items taken of it by every worker) and the items each worker had taken of each."""
        counts = self._member_counts
        view = cast(Any, self._view)
        total = [sum(c[i] for c in counts.values()) for i in range(len(view.datasets))] if counts else None
        state = {
            "dataset": view.state_dict(self.num_workers, self.batch_size, total),
            "current_epoch": self.current_epoch,
            "latest_worker_idx": self._latest_worker,
            "num_samples_yielded": {w: list(c) for w, c in counts.items()},
        }
        if self._member_cycles:  # a zip's (litdata's key)
            state["num_cycles"] = {w: list(c) for w, c in self._member_cycles.items()}
        return state

    def _load_members_state(self, state: dict) -> None:
        if not isinstance(state, dict) or not {"dataset", "current_epoch", "num_samples_yielded"} <= set(state):
            raise ResumeStateError(
                "a mix of datasets other than StreamingDatasets resumes from what this loader's state_dict() returned "
                "(litdata's keys: dataset, current_epoch, num_samples_yielded); pass that"
            )
        epoch = state["current_epoch"]
        if type(epoch) is not int or epoch < 0:
            raise ResumeStateError(f"current_epoch must be an int >= 0, got {epoch!r:.60}")
        cast(Any, self._view).load_state_dict(state)
        self._view.set_epoch(max(0, epoch - 1))  # litdata counts the running epoch from 1
        self._member_counts = {int(w): list(c) for w, c in state["num_samples_yielded"].items()}
        cycles = state.get("num_cycles")
        self._member_cycles = {int(w): list(c) for w, c in cycles.items()} if isinstance(cycles, dict) else {}
        self._member_resumed = bool(self._member_counts)
        self._started = False

    def _from_litdata(self, litdata_state: dict) -> dict:
        """Our state for a litdata loader state (see :mod:`.litdata_state`)."""
        view = self._view
        if not isinstance(view, StreamingDataset):
            raise ResumeStateError(
                "a litdata StreamingDataset loader state resumes a StreamingDataLoader over a StreamingDataset"
            )
        epoch, point = litdata_resume(litdata_state, view, view.layout(self.num_workers))
        position = {"single": point.to_json()} if point is not None else view.fresh_position(epoch, self.num_workers)
        return {"shardwright_loader": STATE_VERSION, "dataset": view.identity(), "position": position}


def _resumed_line(view: Any, position: dict, ledger: ReceiptLedger) -> str:
    """``resumed epoch E at sample K of N (dataset DIGEST)``: K counts every rank's samples."""
    receipt = state_receipt(view, position, ledger)
    digest = receipt["digest"] or "without a digest"
    if "consumed" not in receipt:
        return f"resumed a combined dataset (dataset {digest})"
    at = receipt["consumed"]["count"]
    return f"resumed epoch {receipt['epoch']} at sample {at} of {receipt['samples']} (dataset {digest})"


def worker_resume(dataset: Any, state: dict) -> None:
    """Deprecated alias of ``dataset.load_state_dict(state)`` (kept for one release)."""
    dataset.load_state_dict(state)

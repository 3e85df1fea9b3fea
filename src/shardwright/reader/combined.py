"""CombinedStreamingDataset: several datasets mixed by weight, deterministically and resumably.

Each dataset is read exactly as it would be alone (its own shuffle, rank and worker split);
each reader stream then interleaves its shares: at step n it draws ``u_n`` from PCG64 seeded
by (seed, epoch, stream) and takes the next item of the dataset that ``u_n`` falls into,
among those not yet exhausted, by weight. So the mix of a stream is a pure function of the
seed, the epoch and the share lengths (:func:`mix_counts`), and a resume needs only how many
items each stream had yielded: the per-dataset positions follow, and each dataset resumes
(on the same layout, or cut anew on another) like a single dataset.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ResumeStateError, UsageError
from .members import (
    MemberMix,
    MemberStates,
    Tagged,
    check_members,
    forward,
    member_lens,
    prepared,
    restore_members,
    share,
    skipped,
)
from .resume import EpochStart, combined_position, fresh_point, parse_combined
from .torch_bases import IterableBase as _IterableBase
from .torch_bases import OverDatasets
from .torch_bases import worker_info as _worker_info

__all__ = ["CombinedStreamingDataset", "MixRule", "mix_choices", "mix_counts", "mix_length"]


def _draws(seed: int, epoch: int, stream: int, generation: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, 3, stream, generation])))


def mix_choices(
    lengths: list[int],
    weights: list[float],
    rng: np.random.Generator,
    block: int = 4096,
    *,
    mix: MixRule | None = None,
) -> Iterator[np.ndarray]:
    """The dataset index of every step, block by block, until every share is used up.

    A dataset leaves the draw when its share is exhausted; the others keep their relative
    weights. Vectorised between exhaustions. With ``mix.stop_at_first`` the stream ends at
    the first exhaustion instead (litdata's ``iterate_over_all=False``); with ``mix.repeat``
    above 1 each draw picks that many steps in a row (litdata's ``batching_method="per_stream"``:
    a batch comes from one dataset, unless that dataset runs out inside it).
    """
    rule = mix or MixRule()
    left = np.asarray(lengths, dtype=np.int64).copy()
    w = np.asarray(weights, dtype=np.float64)
    if rule.stop_at_first and (left <= 0).any():
        return
    while left.sum() > 0:
        active = np.flatnonzero(left > 0)
        cum = np.cumsum(w[active])
        u = rng.random(max(1, block // rule.repeat)) * cum[-1]
        picks = active[np.minimum(np.searchsorted(cum, u, side="right"), len(active) - 1)]
        if rule.repeat > 1:
            picks = np.repeat(picks, rule.repeat)
        # Cut the block where the first active dataset runs out.
        cut = len(picks)
        for d in active:
            hits = np.flatnonzero(picks == d)
            if len(hits) >= left[d]:
                cut = min(cut, int(hits[left[d] - 1]) + 1)
        picks = picks[:cut]
        left -= np.bincount(picks, minlength=len(left))
        yield picks
        if rule.stop_at_first and (left[active] <= 0).any():
            return


def mix_counts(
    lengths: list[int], weights: list[float], rng: np.random.Generator, steps: int, mix: MixRule | None = None
) -> list[int]:
    """Items taken from each dataset in the first ``steps`` steps of :func:`mix_choices`."""
    counts = np.zeros(len(lengths), dtype=np.int64)
    done = 0
    for picks in mix_choices(lengths, weights, rng, mix=mix):
        take = picks[: steps - done]
        counts += np.bincount(take, minlength=len(lengths))
        done += len(take)
        if done >= steps:
            break
    return counts.tolist()


def mix_length(lengths: list[int], weights: list[float], rng: np.random.Generator, mix: MixRule | None = None) -> int:
    """How many steps :func:`mix_choices` takes in all (the shares' sum, unless it stops at the first exhaustion)."""
    rule = mix or MixRule()
    if not rule.stop_at_first:
        return int(sum(lengths))
    return sum(len(picks) for picks in mix_choices(lengths, weights, rng, mix=rule))


BATCHING_METHODS = ("stratified", "per_stream")


@dataclass(frozen=True)
class MixRule:
    """How a mix ends and how many steps one draw picks (see :func:`mix_choices`)."""

    stop_at_first: bool = False
    repeat: int = 1


def _check_weights(weights: Any, count: int, zero_ok: bool = False) -> list[float]:
    """``weights`` as floats: ``count`` positive finite numbers whose sum is finite too (the
    mix draws from their cumulative sum; an infinite sum would pick one dataset forever).
    ``zero_ok`` (members other than StreamingDatasets, as litdata): zeros too, not all of them."""
    given = list(weights)
    if len(given) != count or not all(
        isinstance(w, (int, float, np.number)) and not isinstance(w, bool) for w in given
    ):
        raise UsageError(f"weights must be {count} positive numbers, one per dataset; got {given!r:.200}")
    try:
        floats = [float(w) for w in given]
    except OverflowError:
        floats = [float("inf")]
    if (
        not all(np.isfinite(w) and (w > 0 or (zero_ok and w == 0)) for w in floats)
        or not np.isfinite(sum(floats))
        or sum(floats) <= 0
    ):
        raise UsageError(
            f"weights must be {count} positive finite numbers whose sum is finite (only their ratios "
            f"matter: scale them down); got {given!r:.200}"
        )
    return floats


class CombinedStreamingDataset(MemberStates, OverDatasets, _IterableBase):
    """Several :class:`StreamingDataset` objects read as one stream, mixed by weight.

    Deterministic (the same seed and epoch give the same mix on every machine) and resumable
    with :class:`StreamingDataLoader` (on the same or another layout). The epoch ends when
    every dataset's share is used up: each item of each dataset is read once per epoch; the
    weights set how the datasets are interleaved.

    Args (litdata's, in litdata's order):
        datasets: StreamingDataset objects (each keeps its own shuffle/seed options); or, as
            litdata takes them, any iterable datasets (litdata's dataset protocol) and plain
            iterables such as a range or a list: then each is iterated as it is, the mix is
            drawn as litdata draws it, and the dataset's ``state_dict`` / ``load_state_dict``
            delegate to the members' own (see :mod:`.members`).
        seed: a non-negative int, the same on every rank.
        weights: one positive number per dataset (zeros allowed, not all, with other
            members); default: their lengths (a uniform mix over items).
        iterate_over_all: True (default): the epoch ends when every dataset's share is used
            up; False: it ends as soon as one dataset's share is (litdata's stop-at-first
            mix; the loader has no length then, as in litdata). Both resume exactly.
        batching_method: "stratified" (default: a batch mixes datasets step by step) or
            "per_stream" (each batch comes from one dataset, drawn by weight).

    Raises:
        ArgumentTypeError (a TypeError): an element of datasets cannot be iterated, or an argument of the wrong type (e.g. weights given second, shardwright's old order).
        UsageError (a ValueError): no datasets, or weights of the wrong length or not positive.
    """

    def __init__(
        self,
        datasets: list[Any],
        seed: int = 42,
        weights: list[float] | None = None,
        iterate_over_all: bool = True,
        batching_method: str = "stratified",
    ):
        datasets = list(datasets)
        if not datasets:
            raise UsageError("CombinedStreamingDataset needs at least one dataset")
        ours = check_members(datasets, "CombinedStreamingDataset")
        if isinstance(seed, (list, tuple)):
            raise ArgumentTypeError(
                "CombinedStreamingDataset's second argument is seed (litdata's order: datasets, seed, "
                f"weights); got a sequence {seed!r:.100}: pass it as weights=..."
            )
        if type(seed) is not int or seed < 0:
            raise UsageError(f"seed must be a non-negative int, got {seed!r}")
        if type(iterate_over_all) is not bool:
            raise ArgumentTypeError(f"iterate_over_all must be True or False, got {iterate_over_all!r:.100}")
        if batching_method not in BATCHING_METHODS:
            raise UsageError(f"batching_method must be one of {BATCHING_METHODS}, got {batching_method!r:.100}")
        if weights is None:
            sizes, missing = member_lens(datasets, sizes_of_ours=True)
            if missing is not None:
                raise UsageError(
                    f"dataset {missing} has no len(), so the default weights (the lengths) cannot be "
                    "known: pass weights=[...], one per dataset"
                )
            weights = [float(n) or 1.0 for n in sizes]
        weights = _check_weights(weights, len(datasets), zero_ok=not ours)
        self.datasets = prepared(datasets)
        # members other than StreamingDatasets: read as iterables, resumed by their own state
        self._members = not ours
        self.own_epoch = None if ours else 0
        self._repeats = [1] * len(datasets)  # per_stream: items per draw, per dataset
        self._member_iter: MemberMix | None = None
        # (items_read skips, items given by each worker) of a loaded state, applied at the next iteration
        self._member_resume: tuple[dict[int, int], dict[int, list[int]]] | None = None
        self.saves_members = not ours  # StreamingDataLoader saves it in litdata's loader format
        self._tag = False  # under a StreamingDataLoader: samples carry their worker's counts
        self.weights, self.seed = weights, seed
        self.iterate_over_all, self.batching_method = iterate_over_all, batching_method
        self._mix = MixRule(stop_at_first=not iterate_over_all)
        self._loader_drop_last = False
        self._mix_resume: tuple | None = None  # (epoch, generation) of a resumed epoch

    # --- what StreamingDataLoader uses -----------------------------------------------------

    def identity(self) -> dict:
        if self._members:
            return {"combined_members": [type(d).__name__ for d in self.datasets], "seed": self.seed}
        mine: dict = {"combined": [d.identity() for d in self.datasets], "weights": self.weights, "seed": self.seed}
        if self._mix != MixRule():  # only then: states saved before these options still match
            mine["mix"] = {"iterate_over_all": self.iterate_over_all, "batching_method": self.batching_method}
        return mine

    def __len__(self) -> int:
        if not self.iterate_over_all:
            # litdata's get_len is None here too: where the first share runs out depends on
            # the worker split and the draws, known only once iterated
            raise TypeError("a CombinedStreamingDataset with iterate_over_all=False has no length before iteration")
        if self._members:
            sizes, missing = member_lens(self.datasets)
            if missing is not None:
                raise TypeError(f"dataset {missing} of this CombinedStreamingDataset has no len()")
            return sum(sizes)
        return sum(len(d) for d in self.datasets)

    def __iter__(self) -> Iterator[Any]:
        info = _worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if self._members:
            skips, by_worker = self._member_resume or ({}, {})
            self._member_resume = None  # applied once: the next iteration starts afresh
            replay = by_worker.get(worker)
            # members without load_state_dict skip what this worker gave of them (none if it gave
            # no batch before the state was taken)
            counts = {i: (replay[i] if replay is not None else 0) for i in skips}
            mix = MemberMix(
                [skipped(share(d, worker, workers), counts.get(i, 0)) for i, d in enumerate(self.datasets)],
                self.weights,
                self.seed,
                self._mix.stop_at_first,
                self._repeats if self.batching_method == "per_stream" else None,
                replay,
            )
            self._member_iter = mix
            if self._tag:
                return (Tagged(x, worker, list(mix.yielded)) for x in mix)
            return mix
        epoch = self.epoch
        lengths = []
        for d in self.datasets:
            plan, _stream, skip = d.stream_plan(epoch, workers, worker)
            lengths.append(sum(seg[3] - seg[2] for seg, _ in plan) - skip)
        stream = self.datasets[0].rank * workers + worker
        generation = self.generation(epoch)
        if info is None and self._mix_resume is not None and self._mix_resume[0] == epoch:
            self._mix_resume = None  # applied: the next iteration of this object starts afresh
        iterators = [iter(d) for d in self.datasets]
        return self._interleave(iterators, lengths, _draws(self.seed, epoch, stream, generation))

    def generation(self, epoch: int) -> int:
        """Which mix of ``epoch`` is read: 0, or one more for each resume (a resumed epoch
        mixes what is left afresh, deterministically)."""
        resume = self._mix_resume
        return resume[1] if resume is not None and resume[0] == epoch else 0

    def stream_mix(self, epoch: int, stream: int, generation: int, lengths: list[int], steps: int) -> list[int]:
        """Items taken from each dataset by ``stream`` in its first ``steps`` steps."""
        return mix_counts(lengths, self.weights, _draws(self.seed, epoch, stream, generation), steps, self._mix)

    def stream_length(self, epoch: int, stream: int, generation: int, lengths: list[int]) -> int:
        """How many items ``stream`` yields in all, given each dataset's share ``lengths``."""
        return mix_length(lengths, self.weights, _draws(self.seed, epoch, stream, generation), self._mix)

    # --- Resumable: StreamingDataLoader's save and resume (see resume.py) ------------------

    def set_batch_size(self, batch_size: int | list[int]) -> None:
        """The batch size of each dataset (an int: all the same): with ``per_stream`` a draw
        takes that many items of one dataset (litdata's ``set_batch_size``)."""
        sizes = [batch_size] * len(self.datasets) if isinstance(batch_size, int) else list(batch_size)
        if len(sizes) != len(self.datasets) or not all(type(b) is int and b >= 1 for b in sizes):
            raise UsageError(f"batch_size must be an int >= 1 or one per dataset, got {batch_size!r:.100}")
        if not self._members and len(set(sizes)) > 1:
            raise UsageError(
                "per-dataset batch sizes need datasets other than StreamingDatasets (whose mix is resumed from "
                "whole batches): pass one int"
            )
        self._repeats = sizes
        if self.batching_method == "per_stream":
            self._mix = replace(self._mix, repeat=sizes[0])
        for d, b in zip(self.datasets, sizes):
            forward([d], "set_batch_size", b)

    def load_state_dict(self, state: dict) -> None:
        """Hand each member its part of a :meth:`state_dict` (litdata's dataset-level protocol)."""
        self._require_members("resumed with StreamingDataLoader.load_state_dict()")
        self._member_resume = restore_members(self.datasets, state)

    def loader_view(self, shuffle: bool | None = None, drop_last: bool | None = None) -> CombinedStreamingDataset:
        if self._members:
            return self._member_view(shuffle, drop_last)
        if shuffle is not None:
            raise UsageError(
                "shuffle= overrides a StreamingDataset's; give it to each dataset of a CombinedStreamingDataset"
            )
        return self

    def configure_loader(self, batch_size: int, drop_last: bool) -> None:
        self._loader_drop_last = drop_last
        if self._members:
            self._tag = True
            self.set_batch_size(batch_size)
            forward(self.datasets, "set_drop_last", drop_last)
            return
        if self.batching_method == "per_stream":
            self._mix = replace(self._mix, repeat=batch_size)
        for d in self.datasets:
            d.configure_loader(batch_size, drop_last)

    def epoch_start(self, epoch: int, num_workers: int) -> tuple[list[EpochStart], int]:
        if self._members:
            forward(self.datasets, "set_num_workers", num_workers)
            return [], 0
        return [d.epoch_start(epoch, num_workers) for d in self.datasets], self.generation(epoch)

    def position_after(self, epoch: int, start: tuple[list[EpochStart], int], batches: int) -> dict:
        self._no_loader_state()
        starts, generation = start

        def stream_mix(stream: int, lengths: list[int], steps: int) -> list[int]:
            return self.stream_mix(epoch, stream, generation, lengths, steps)

        def stream_length(stream: int, lengths: list[int]) -> int:
            return self.stream_length(epoch, stream, generation, lengths)

        totals = [d.plan_size for d in self.datasets]
        return combined_position(
            totals, epoch, starts, generation, self._loader_drop_last, batches, stream_mix, stream_length
        )

    def _no_loader_state(self) -> None:
        if self._members:
            raise ResumeStateError(
                "epoch_report() and shardwright's compact state cover a CombinedStreamingDataset of StreamingDatasets "
                "only; a mix of other members is saved by StreamingDataLoader.state_dict() in litdata's format"
            )

    def fresh_position(self, epoch: int, num_workers: int) -> dict:
        self._no_loader_state()
        return {"combined": [fresh_point(epoch, d.layout(num_workers)) for d in self.datasets], "generation": 0}

    def check_position(self, position: object) -> int:
        self._no_loader_state()
        points, _generation = parse_combined(position, [d.plan_size for d in self.datasets])
        return points[0].epoch

    def apply_position(self, position: dict) -> None:
        points, generation = parse_combined(position, [d.plan_size for d in self.datasets])
        for d, point in zip(self.datasets, points):
            d.resume_at(point)
        self._mix_resume = (points[0].epoch, generation + 1)
        self.set_epoch(points[0].epoch)

    def clear_resume(self) -> None:
        if self._members:
            self._member_resume = None
            return
        for d in self.datasets:
            d.clear_resume()
        self._mix_resume = None

    def _interleave(
        self, iterators: list[Iterator[Any]], lengths: list[int], rng: np.random.Generator
    ) -> Iterator[Any]:
        for picks in mix_choices(lengths, self.weights, rng, mix=self._mix):
            for d in picks.tolist():
                yield next(iterators[d])

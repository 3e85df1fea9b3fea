"""litdata's ``subsample``: a deterministic selection of whole-chunk regions.

litdata's rule, kept so a subsampled epoch holds the same items in both libraries: the chunks
(each the region ``[0, chunk_size)``), permuted with ``numpy.random.RandomState([seed])`` when
shuffling, are taken in order until ``int(total * fraction)`` items are reached (the last region
cut short). A fraction above 1 takes the whole dataset ``int(fraction)`` times (each pass
permuted again when shuffling) and then the remaining fraction. The selection depends only on
the index, the fraction, ``shuffle`` and ``seed``: a resumed run selects the same items.
"""

from __future__ import annotations

import bisect
import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError

__all__ = ["RegionSelection", "Subsample", "check_fraction", "split_regions"]


def check_fraction(subsample: object) -> float:
    if type(subsample) is int:
        subsample = float(subsample)
    if type(subsample) is not float or not math.isfinite(subsample) or subsample <= 0:
        raise ValueError(f"subsample must be a float > 0 (0.1 = 10% of the items), got {subsample!r}")
    return subsample


@dataclass(frozen=True)
class Subsample:
    """The selected regions ``(chunk, start, end)`` in epoch-independent order."""

    regions: tuple[tuple[int, int, int], ...]
    starts: tuple[int, ...]  # selected index of each region's first item
    bases: tuple[int, ...]  # dataset index of each region's first item

    @classmethod
    def of(cls, chunk_sizes: list[int], fraction: float, shuffle: bool, seed: int) -> Subsample:
        order = list(range(len(chunk_sizes)))
        sampler = np.random.RandomState([seed]) if shuffle else None
        regions: list[tuple[int, int, int]] = []
        left = fraction
        while left >= 1.0:
            if sampler is not None:
                order = [order[i] for i in sampler.permutation(len(order)).tolist()]
            regions += [(k, 0, chunk_sizes[k]) for k in order]
            left -= 1.0
        if left > 0:
            if sampler is not None:
                order = [order[i] for i in sampler.permutation(len(order)).tolist()]
            wanted = int(sum(chunk_sizes) * left)
            for k in order:
                if wanted <= 0:
                    break
                take = min(chunk_sizes[k], wanted)
                regions.append((k, 0, take))
                wanted -= take
        return cls.from_regions(regions, chunk_sizes)

    @classmethod
    def from_regions(cls, regions: list[tuple[int, int, int]], chunk_sizes: list[int]) -> Subsample:
        """The selection of ``regions`` ``(chunk, start, end)``, read in this order."""
        kept = tuple((int(k), int(a), int(b)) for k, a, b in regions if b > a)
        chunk_starts = np.concatenate([[0], np.cumsum(chunk_sizes)]).tolist() if chunk_sizes else [0]
        starts = np.concatenate([[0], np.cumsum([end - start for _, start, end in kept])])[:-1].tolist()
        return cls(kept, tuple(int(x) for x in starts), tuple(int(chunk_starts[k]) + start for k, start, _ in kept))

    @property
    def group_sizes(self) -> list[int]:
        return [end - start for _, start, end in self.regions]

    def base(self, i: int) -> int:
        """The dataset index of selected item ``i``."""
        r = bisect.bisect_right(self.starts, i) - 1
        return self.bases[r] + i - self.starts[r]

    def chunks_of(self, groups: list[int]) -> list[int]:
        return [self.regions[g][0] for g in groups]


def split_regions(regions: list[tuple[int, int, int]], counts: list[int]) -> list[list[tuple[int, int, int]]]:
    """Consecutive runs of ``counts[i]`` items from ``regions`` (a region is cut where a run ends)."""
    left = list(regions)
    runs = []
    for count in counts:
        run: list[tuple[int, int, int]] = []
        while count > 0 and left:
            k, start, end = left.pop(0)
            take = min(count, end - start)
            run.append((k, start, start + take))
            if start + take < end:
                left.insert(0, (k, start + take, end))
            count -= take
        runs.append(run)
    return runs


class RegionSelection:
    """StreamingDataset's region methods (litdata's region of interest): which items it reads,
    and copies that read only some of them (``train_test_split``)."""

    # Set by StreamingDataset.__init__:
    _subsample: Subsample | None
    _source: Any
    _tokens: Any
    _fingerprint: dict

    @property
    def regions(self) -> list[tuple[int, int, int]]:
        """The items read, as ``(chunk, start, end)`` regions in order."""
        if self._subsample is not None:
            return list(self._subsample.regions)
        return [(k, 0, entry.chunk_size) for k, entry in enumerate(self._source.chunks)]

    def with_regions(self, regions: list[tuple[int, int, int]]) -> Any:
        """A copy of this dataset that reads only ``regions`` (see :attr:`regions`), in that order."""
        if self._tokens is not None:
            raise UsageError("a token dataset (item_loader=TokensLoader) cannot be cut into regions")
        sizes = [entry.chunk_size for entry in self._source.chunks]
        for k, start, end in regions:
            if not (0 <= k < len(sizes) and 0 <= start <= end <= sizes[k]):
                raise UsageError(f"region {(k, start, end)} is not inside chunk {k} of this dataset")
        selection = Subsample.from_regions(list(regions), sizes)
        length = sum(selection.group_sizes)
        clone = copy.copy(self)
        clone.__dict__.update(
            _subsample=selection,
            _group_sizes=selection.group_sizes,
            _length=length,
            _fingerprint={**self._fingerprint, "items": length, "regions": [list(r) for r in regions]},
            _resume=None,
            _progress=None,
        )
        clone.__dict__.update(self._fresh_epoch_state())
        return clone

    def _fresh_epoch_state(self) -> dict[str, Any]:
        raise NotImplementedError

"""litdata's ``train_test_split``: disjoint datasets cut from one by item ranges."""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .dataset import StreamingDataset
from .subsample import split_regions

__all__ = ["train_test_split"]


def train_test_split(
    streaming_dataset: StreamingDataset, splits: list[float], seed: int = 42, shuffle: bool = True
) -> list[StreamingDataset]:
    """Datasets holding ``splits`` fractions of ``streaming_dataset``'s items, disjoint.

    litdata's rule, so both libraries cut the same items: the dataset's chunk regions
    (permuted with ``numpy.random.RandomState([seed])`` when ``shuffle``) are cut into
    consecutive runs of ``int(len * fraction)`` items. Deterministic: the same call gives
    the same splits in every process.
    """
    if not isinstance(splits, (list, tuple)) or not all(type(f) is float for f in splits):
        raise UsageError(f"splits must be a list of floats such as [0.8, 0.2], got {splits!r}")
    if not all(0 <= f <= 1 for f in splits) or sum(splits) > 1 + 1e-9:
        raise UsageError(f"splits must be fractions in [0, 1] that sum to at most 1, got {splits!r}")
    regions = streaming_dataset.regions
    if shuffle:
        order = np.random.RandomState([seed]).permutation(len(regions)).tolist()
        regions = [regions[i] for i in order]
    total = sum(end - start for _, start, end in regions)
    runs = split_regions(regions, [int(total * f) for f in splits])
    return [streaming_dataset.with_regions(run) for run in runs]

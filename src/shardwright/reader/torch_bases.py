"""The base classes of the reader's datasets and the DataLoader worker a process is: torch's
when it is installed, plain objects (and "not a worker") when it is not. Chosen once, when
this module is imported; the one home of that choice for every dataset class."""

from __future__ import annotations

from typing import Any

try:
    from torch.utils.data import Dataset as DatasetBase
    from torch.utils.data import IterableDataset as IterableBase
    from torch.utils.data import get_worker_info as worker_info
except ImportError:  # torch is optional: plain objects then
    DatasetBase = object  # type: ignore[assignment,misc]
    IterableBase = object  # type: ignore[assignment,misc]

    def worker_info() -> Any:
        return None


__all__ = ["DatasetBase", "IterableBase", "worker_info"]


class OverDatasets:
    """The epoch and layout of a dataset made of several (``self.datasets``), read in step:
    the first one's, set on all of them."""

    datasets: list

    @property
    def epoch(self) -> int:
        return self.datasets[0].epoch

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch`` for every dataset from the next iteration on (every rank the same number)."""
        for d in self.datasets:
            d.set_epoch(epoch)

    def layout(self, num_workers: int):
        return self.datasets[0].layout(num_workers)

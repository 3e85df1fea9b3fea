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
    # an epoch count of its own when a member is not a StreamingDataset (a range has none)
    own_epoch: int | None = None

    @property
    def epoch(self) -> int:
        return self.datasets[0].epoch if self.own_epoch is None else self.own_epoch

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch`` for every dataset from the next iteration on (every rank the same
        number); members without ``set_epoch`` (litdata's protocol makes it optional) are skipped."""
        if self.own_epoch is not None:
            self.own_epoch = epoch
        for d in self.datasets:
            setter = getattr(d, "set_epoch", None)
            if callable(setter):
                setter(epoch)

    def layout(self, num_workers: int):
        return self.datasets[0].layout(num_workers)

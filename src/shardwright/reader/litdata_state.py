"""litdata 0.2.x resume states, read by what they mean.

litdata's loader state is ``{"dataset": {...}, "current_epoch", "num_samples_yielded",
"latest_worker_idx"}``; its ``"dataset"`` part (what ``litdata.StreamingDataset.state_dict(
num_samples_yielded, num_workers, batch_size)`` returns) says how many samples each rank has
yielded, on which (world_size, num_workers, batch_size) grid. litdata's worker split and replay
rule then say which items were read:

* without shuffle, litdata gives each worker a contiguous run of items (``_associate_chunks_and_
  intervals_to_workers``: whole batches per worker, the remainder to one worker of the last rank);
* the loader asked its workers in turn from worker 0, one batch each (``_replay_sampling``), so a
  worker has read the first ``indexes[w]`` items of its run.

The items nobody read become the base of a shardwright resume point: the rest of the epoch, on
any layout. With ``shuffle=True`` litdata's order (its chunk permutation per rank and item
permutation per chunk, over its own worker split) is not ours, and which items a worker had read
depends on it; such states are refused rather than guessed.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import ResumeStateError
from .partition import MAX_BATCH, MAX_WORKERS, MAX_WORLD_SIZE, Layout
from .state import ResumePoint

__all__ = [
    "dataset_state", "is_litdata_loader_state", "is_litdata_state", "litdata_resume", "litdata_worker_runs",
    "read_ranges",
]  # fmt: skip

_MAX_READERS = 1 << 20  # ranks x workers of one state: a count each is allocated

_SHUFFLE_REFUSED = (
    "this litdata state was saved with shuffle=True: litdata's shuffled order (its chunk permutation and "
    "per-chunk item permutations over its own worker split) is not shardwright's, so which items were read "
    "cannot be known exactly; resume litdata states saved with shuffle=False, or start the epoch afresh"
)


def is_litdata_state(state: object) -> bool:
    """A litdata dataset-level state (``StreamingDataset.state_dict(n, workers, batch_size)``)."""
    return isinstance(state, dict) and "input_dir_path" in state and "num_samples_yielded" in state


def is_litdata_loader_state(state: object) -> bool:
    """A litdata ``StreamingDataLoader.state_dict()`` (of a StreamingDataset)."""
    return isinstance(state, dict) and "current_epoch" in state and is_litdata_state(state.get("dataset"))


def litdata_worker_runs(num_items: int, world_size: int, num_workers: int, batch_size: int, drop_last: bool) -> list:
    """Items each litdata worker (global, rank-major) reads in an unshuffled epoch, as counts:
    litdata 0.2.x's rule (whole batches per worker, the remainder to one worker of the last rank)."""
    max_batches = num_items // batch_size
    counts: list[int] = []
    for rank in range(world_size):
        per_rank = max_batches // world_size
        base, rem = divmod(per_rank, num_workers)
        arr = [(base + (1 if i < rem else 0)) * batch_size for i in range(num_workers)]
        if rank == world_size - 1:
            left = num_items - (sum(counts) + sum(arr))
            if not drop_last and left > 0:
                arr[rem % num_workers] += left
        counts.extend(arr)
    return counts


def _replay(num_samples_yielded: int, batch_size: int, num_workers: int) -> list[int]:
    """litdata's ``_replay_sampling``: items taken from each worker, one batch per worker in turn."""
    rounds = num_samples_yielded // (num_workers * batch_size)
    taken = [rounds * batch_size] * num_workers
    left = num_samples_yielded - rounds * num_workers * batch_size
    worker = 0
    while left >= batch_size:
        taken[worker] += batch_size
        worker = (worker + 1) % num_workers
        left -= batch_size
    taken[worker] += left
    return taken


def read_ranges(state: dict, num_items: int) -> list[tuple[int, int]]:
    """The item ranges ``[lo, hi)`` litdata had read when it saved ``state`` (unshuffled)."""
    world = _int(state, "world_size", 1, MAX_WORLD_SIZE)
    workers = _int(state, "num_workers", 1, MAX_WORKERS)
    batch = _int(state, "batch_size", 1, MAX_BATCH)
    if world * workers > _MAX_READERS:  # one count per reader is allocated below
        raise ResumeStateError(f"litdata state names {world:,} ranks of {workers:,} workers: more than any run has")
    yielded = _int(state, "num_samples_yielded", 0)
    counts = litdata_worker_runs(num_items, world, workers, batch, _flag(state, "drop_last"))
    out, start = [], 0
    for rank in range(world):
        for w, taken in enumerate(_replay(yielded, batch, workers)):
            count = counts[rank * workers + w]
            if min(taken, count) > 0:
                out.append((start, start + min(taken, count)))
            start += count
    return out


def _int(state: dict, key: str, least: int, most: int = 1 << 40) -> int:
    value = state.get(key)
    if type(value) is not int or not least <= value <= most:
        raise ResumeStateError(f"litdata state field {key!r} is {value!r:.40}, not an int from {least} to {most:,}")
    return value


def _flag(state: dict, key: str) -> bool:
    """A boolean field (missing: False); a str "false" is truthy, so never read as a flag."""
    value = state.get(key, False)
    if type(value) is not bool and value is not None:
        raise ResumeStateError(f"litdata state field {key!r} is {value!r:.40}, not true or false")
    return bool(value)


def _check_same_dataset(state: dict, dataset: Any) -> int:
    """The dataset's item count, once the state is known to be of it (chunk names and sizes)."""
    names = [e.filename for e in dataset.chunks]
    sizes = [e.chunk_size for e in dataset.chunks]
    files, roi = state.get("subsampled_files"), state.get("region_of_interest")
    if files is not None and not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
        raise ResumeStateError(f"litdata state field 'subsampled_files' is {files!r:.40}, not a list of file names")
    if roi is not None and not (
        # litdata keeps (start, end) tuples in memory; JSON makes them lists: both are its states
        isinstance(roi, list) and all(isinstance(r, (list, tuple)) and all(type(v) is int for v in r) for r in roi)
    ):
        raise ResumeStateError(f"litdata state field 'region_of_interest' is {roi!r:.40}, not a list of [start, end]")
    if files is not None and list(files) != names:
        raise ResumeStateError(
            f"this litdata state lists other chunk files ({len(files)} from {state.get('input_dir_path')!r:.100}) "
            f"than {dataset.output_dir!r:.100} ({len(names)}); resume with the dataset it was saved from"
        )
    if roi is not None and [list(r) for r in roi] != [[0, n] for n in sizes]:
        raise ResumeStateError(
            "this litdata state reads part of each chunk (litdata's subsample); resume it with a litdata "
            "reader, shardwright resumes litdata states of whole datasets"
        )
    return sum(sizes)


def litdata_resume(state: dict, dataset: Any, layout: Layout | None) -> tuple[int, ResumePoint | None]:
    """(epoch, resume point) of a litdata dataset-level state on ``dataset`` read with
    ``layout`` (None: one stream; another layout cuts the rest anew); the point is None when
    the epoch starts afresh. Raises ResumeStateError, one line."""
    version = state.get("state_version", 2)
    if type(version) is not int or version != 2:
        # every field is read as litdata's version 2 lays it out: another version's (or a value
        # edited by hand) was read that way without a word (trust round 7)
        raise ResumeStateError(
            f"litdata state field 'state_version' is {version!r:.40}; shardwright reads litdata's version 2 "
            "states only: restart the epoch, or resume it with the litdata that saved it"
        )
    if _flag(state, "shuffle"):
        raise ResumeStateError(_SHUFFLE_REFUSED)
    if dataset.shuffle:
        raise ResumeStateError(
            "this litdata state was saved with shuffle=False; resume it with shuffle=False (as litdata requires)"
        )
    if state.get("resume_mode") == "elastic" or state.get("sample_in_epoch", 0) != _int(
        state, "num_samples_yielded", 0
    ) * _int(state, "world_size", 1):
        raise ResumeStateError(
            "this litdata state comes from a run litdata itself resumed on another grid (elastic resume); "
            "shardwright reads litdata states of runs that started their epoch afresh"
        )
    if state.get("item_loader") is not None or dataset.item_loader is not None:
        raise ResumeStateError(
            "litdata states of token datasets (TokensLoader) cannot be mapped: litdata cuts blocks inside chunks "
            "and shardwright across them, so their blocks differ; restart the epoch"
        )
    if dataset.plan_size != _check_same_dataset(state, dataset):
        raise ResumeStateError("this litdata state is of the whole dataset; read it without subsample")
    num_items = dataset.plan_size
    epoch = max(0, _int(state, "current_epoch", 0) - 1)  # litdata counts epochs from 1
    read = read_ranges(state, num_items)
    if not read:
        return epoch, None
    unread, pos = [], 0
    for lo, hi in read:
        if pos < lo:
            unread.append((pos, lo, 0, lo - pos))
        pos = hi
    if pos < num_items:
        unread.append((pos, num_items, 0, num_items - pos))
    if not unread:  # the epoch was read whole: go on with the next
        return epoch + 1, None
    layout = layout if layout is not None else dataset.layout(1)
    return epoch, ResumePoint(epoch, tuple(unread), layout, (0,) * layout.streams)


def dataset_state(dataset: Any, num_samples_yielded: int, num_workers: int, batch_size: int) -> dict:
    """litdata's ``StreamingDataset.state_dict(num_samples_yielded, num_workers, batch_size)``
    shape for a shardwright dataset read by litdata's worker split (what litdata's loader saves)."""
    for name, value, least in (("num_samples_yielded", num_samples_yielded, 0), ("num_workers", num_workers, 0),
                               ("batch_size", batch_size, 1)):  # fmt: skip
        if type(value) is not int or value < least:
            raise ResumeStateError(f"state_dict: {name} must be an int >= {least}, got {value!r}")
    world = dataset.layout(1).world_size
    remote = "://" in str(dataset.output_dir)
    return {
        "num_samples_yielded": num_samples_yielded,
        "num_workers": num_workers or 1,
        "batch_size": batch_size,
        "current_epoch": dataset.epoch + 1,
        "input_dir_path": dataset.cache_dir if remote else os.fspath(dataset.output_dir),
        "input_dir_url": str(dataset.output_dir) if remote else None,
        "cache_dir_path": dataset.cache_dir,
        "item_loader": None,
        "drop_last": bool(dataset.drop_last),
        "seed": dataset.seed,
        "world_size": world,
        "shuffle": bool(dataset.shuffle),
        "subsampled_files": [e.filename for e in dataset.chunks],
        "region_of_interest": [[0, e.chunk_size] for e in dataset.chunks],
        "state_version": 2,
        "sample_in_epoch": num_samples_yielded * world,
    }

"""Reading finished datasets (ours or litdata's), locally or from S3, for inspection and for
training.

Modules, by job:

* ``dataset``: :class:`StreamingDataset` (random access, and the epoch iterator);
* ``order``: the epoch order (pure): chunk order, then items mixed across a window of chunks;
* ``partition``: who reads what (pure): one contiguous share per rank, whole batches per worker;
* ``plan``: segments of an epoch, what is left after a partial read (pure);
* ``state``: resume points, the JSON a loader saves, rank / world size discovery;
* ``loader``: :class:`StreamingDataLoader` (a DataLoader with ``state_dict``);
* ``combined``: :class:`CombinedStreamingDataset` (weighted mixing);
* ``parallel``: :class:`ParallelStreamingDataset` (datasets zipped sample by sample);
* ``raw``: :class:`StreamingRawDataset` (raw files read in place);
* ``tokens``: :class:`TokensLoader` (token streams as fixed-length blocks);
* ``source``: index.json and chunk files, validated, in a per-process LRU;
* ``cache``: the local cache of remote chunks (atomic, shared, bounded, owner-only);
* ``prefetch``: per-process state and the prefetcher that downloads from the epoch plan;
* ``checks``: chunk validation and "not finished yet" messages.

Remote chunk cache: ``<cache root>/<hash of url, endpoint and index updated_at>/<chunk files>``;
the root is ``cache_dir``, else ``$SHARDWRIGHT_CACHE_DIR``, else ``~/.cache/shardwright``. It is

* **atomic**: a chunk is downloaded to a temp file and renamed into place, so a crash
  mid-download never leaves a partial chunk;
* **shared**: processes (DataLoader workers, jobs on one machine) share one cache; a
  per-chunk lock makes one of them download a chunk while the others wait;
* **bounded**: whole chunk files are evicted, least recently used first, so that the root
  holds at most ``max_cache_bytes`` (plus what readers have pinned open and the downloads in
  flight). A chunk being read holds a shared ``flock`` and is never evicted;
* **validated**: sizes are checked against index.json; a bad cached file is fetched once more;
* **private**: directories are created 0700; a symlinked, foreign or world-writable cache
  directory is refused, and eviction never follows a link.
"""

from __future__ import annotations

from typing import Any

from .cache import CACHE_DIR_ENV, CACHE_MARKER, DEFAULT_MAX_CACHE_BYTES, ChunkCache, try_evict
from .dataset import IterableStreamingDataset, StreamingDataset
from .state import ResumeStateError
from .tokens import TokensLoader

__all__ = [
    "CACHE_DIR_ENV", "DEFAULT_MAX_CACHE_BYTES", "CombinedStreamingDataset", "IterableStreamingDataset",
    "ParallelStreamingDataset", "ResumeStateError", "StreamingRawDataset", "StreamingDataLoader", "StreamingDataset", "TokensLoader", "litdata_collate",
    "train_test_split",
]  # fmt: skip

# Names the existing tests reach for.
_CACHE_MARKER = CACHE_MARKER
_ChunkCache = ChunkCache
_try_evict = try_evict


def __getattr__(name: str) -> Any:
    # The loader needs torch.utils.data.DataLoader: imported when first asked for.
    if name == "StreamingDataLoader":
        from .loader import StreamingDataLoader

        return StreamingDataLoader
    if name == "train_test_split":
        from .splits import train_test_split

        return train_test_split
    if name == "litdata_collate":
        from .collate import litdata_collate

        return litdata_collate
    if name == "CombinedStreamingDataset":
        from .combined import CombinedStreamingDataset

        return CombinedStreamingDataset
    if name == "ParallelStreamingDataset":
        from .parallel import ParallelStreamingDataset

        return ParallelStreamingDataset
    if name == "StreamingRawDataset":
        from .raw import StreamingRawDataset

        return StreamingRawDataset
    raise AttributeError(f"module 'shardwright.reader' has no attribute {name!r}")

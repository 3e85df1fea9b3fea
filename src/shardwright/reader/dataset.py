"""StreamingDataset: random access to a finished dataset, and the epoch iterator training
uses (shuffle, ranks, workers, resume). See the package docstring for the whole picture."""

from __future__ import annotations

import bisect
import dataclasses
import multiprocessing
import operator
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

from ..errors import UnsupportedFormatError, UsageError, require_bool
from ..format import TOKENS_LOADER, TokensLoader, decode_plan, item_decoder
from ..secrets import without_secrets
from . import litdata_state, resume
from .epoch import read_windows, shared_epoch_counter, warn_if_empty, windows
from .itemfile import keep_freed_item_memory
from .items import item_reader
from .options import ReaderOptions, subclass_transform
from .order import EpochSequence, OrderSpec, mixes_items
from .parquet import parquet_source
from .partition import Layout
from .plan import StreamPlan, drop_front
from .resume import EpochStart
from .source import MIN_CACHED_CHUNKS, ChunkSource
from .state import ResumePoint, distributed_env, fingerprint, order_json, plan_for_stream
from .subsample import RegionSelection, Subsample
from .tokens import TokenLayout
from .torch_bases import DatasetBase as _DatasetBase
from .torch_bases import IterableBase as _IterableBase
from .torch_bases import worker_info as _worker_info

__all__ = ["IterableStreamingDataset", "StreamingDataset", "as_iterable"]


def _wants_iterable(kwargs: dict) -> bool:
    choice = require_bool("iterable", kwargs.get("iterable"), optional=True)
    if choice is not None:
        return choice
    return bool(require_bool("shuffle", kwargs.get("shuffle", False))) or distributed_env()[1] > 1


class StreamingDataset(RegionSelection, _DatasetBase):
    """A dataset written by shardwright (or litdata) in a local directory or on S3.

    ``len(ds)``, ``ds[i]`` (negative indices too) and ``ds[a:b:c]`` (a list) read any item;
    ``iter(ds)`` yields this reader's share of an epoch in its epoch order (see below).

    Two kinds of object come out of this constructor. Without ``shuffle`` and outside a
    distributed run it is a map-style ``torch.utils.data.Dataset``: a plain ``DataLoader``
    (with samplers, ``shuffle=True``, ``DistributedSampler`` ...) reads it by index. With
    ``shuffle=True``, when ``world_size > 1`` (torch.distributed initialised, or the RANK /
    WORLD_SIZE environment variables), or with ``iterable=True``, it is an
    :class:`IterableStreamingDataset` (also a ``StreamingDataset``): it orders and splits
    every epoch itself — chunk-aware shuffle, one contiguous share per rank, split again per
    DataLoader worker — and ``DataLoader`` / :class:`StreamingDataLoader` iterate it.

    Args:
        input_dir: the dataset: a local directory, a ``file://`` URL, ``s3://bucket/prefix``,
            ``gs://bucket/prefix`` or ``az://container/prefix`` (docs/clouds.md); litdata's name
            (``output_dir=`` is accepted too).
        shuffle: shuffle each epoch: chunks in a random order, then the items of a window of
            ``shuffle_window`` chunks mixed together (per worker). The order depends only on
            ``seed`` and the epoch (:meth:`set_epoch`).
        seed: a non-negative int, the same on every rank.
        drop_last: leave out the last ``len % world_size`` items of an epoch so every rank
            yields the same number of batches (DDP hangs otherwise). Default: True when
            ``world_size > 1``, else False.
        pad: instead of dropping, repeat a few items from the start of the epoch so ranks are
            equal (every item is read; at most ``world_size - 1`` are read twice).
        shuffle_window: chunks whose items are mixed together; a reader keeps that many
            chunks open at once.
        item_loader: None for ordinary items, or :class:`TokensLoader` ``(block_size=B)`` to
            read a token dataset as blocks of B tokens.
        allow_pickle: unpickle leaves stored as pickle without restriction. Unpickling can run
            code chosen by whoever wrote the dataset, so by default pickle leaves are read as
            plain data only (None, numbers, strings, bytes, lists, tuples, dicts, sets) and one
            that refers to a class or function raises UnsupportedFormatError. Pass True only
            for datasets whose origin you trust.
        storage_options: the backend's options (remote only): boto3's for s3://, the SDKs' for gs://, az://.
        cache_dir: where remote chunks are cached (default ``$SHARDWRIGHT_CACHE_DIR``, else
            ``~/.cache/shardwright``); it must be yours and not writable by others.
        max_cache_bytes: bound of the whole cache root: an int or a size such as ``"2GB"``
            (default 10 GB).
        max_cache_size, subsample, transform, max_pre_download, batch_decode: litdata's
            arguments, see :class:`~shardwright.reader.options.ReaderOptions`.
        prefetch: remote only: True (``4`` chunks ahead), False, or how many chunks the
            reader downloads ahead of use, from its epoch plan when iterating.
        iterable: force the map-style (False) or iterable (True) kind; None chooses as above.
        check_checksums: check each chunk against the checksum index.json records for it, once:
            remote chunks when downloaded, local ones on their first load in each process
            (never per item). A mismatch raises CorruptStateError naming the chunk. False
            skips it (``shardwright verify`` still checks everything).

    Raises:
        DatasetNotFoundError, OutputIsAFileError: nothing readable at ``output_dir`` (subclasses of
            FileNotFoundError and NotADirectoryError).
        IncompleteDatasetError: the optimize run writing it has not finished.
        CorruptStateError: index.json is damaged, nested absurdly deep, or names chunks that
            cannot be the dataset's (NUL bytes, paths outside it); later, a chunk file that is
            damaged, truncated or a symbolic link.
        UnsupportedFormatError: a litdata-only feature, a token dataset read without
            TokensLoader (or the reverse); when read, a pickle leaf that needs
            ``allow_pickle=True``.
        StorageError: the cache directory is a symlink, another user's or world-writable.
        UsageError (a ValueError): an option is out of range.
    """

    def __new__(cls, *args: Any, **kwargs: Any):
        if cls is StreamingDataset and (args or kwargs) and _wants_iterable(kwargs):
            cls = IterableStreamingDataset
        return object.__new__(cls)

    def __init__(
        self,
        input_dir: str | os.PathLike | None = None,
        *,
        shuffle: bool = False,
        seed: int = 42,
        drop_last: bool | None = None,
        pad: bool = False,
        shuffle_window: int = 4,
        item_loader: Any = None,
        allow_pickle: bool = False,
        storage_options: dict | None = None,
        cache_dir: str | os.PathLike | None = None,
        max_cache_bytes: int | str | None = None,
        prefetch: bool | int = True,
        iterable: bool | None = None,
        max_cache_size: int | float | str | None = None,
        subsample: float = 1.0,
        transform: Callable[[Any], Any] | list[Callable[[Any], Any]] | None = None,
        max_pre_download: int | None = None,
        batch_decode: Any = "auto",
        output_dir: str | os.PathLike | None = None,
        check_checksums: bool = True,
        **litdata_only: Any,
    ):
        opts = ReaderOptions.validate(
            input_dir=input_dir,
            output_dir=output_dir,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            pad=pad,
            shuffle_window=shuffle_window,
            item_loader=item_loader,
            allow_pickle=allow_pickle,
            storage_options=storage_options,
            cache_dir=cache_dir,
            max_cache_bytes=max_cache_bytes,
            prefetch=prefetch,
            iterable=iterable,
            max_cache_size=max_cache_size,
            subsample=subsample,
            transform=transform,
            max_pre_download=max_pre_download,
            batch_decode=batch_decode,
            check_checksums=check_checksums,
            litdata_only=litdata_only,
        )
        self.check_checksums = opts.check_checksums
        self._transforms = opts.transforms or subclass_transform(self)
        self.batch_decode = opts.batch_decode
        self.order_spec = OrderSpec("chunk_window" if opts.shuffle else "none", opts.seed, opts.shuffle_window)
        self.shuffle, self.seed, self.pad, self.drop_last = opts.shuffle, opts.seed, opts.pad, opts.drop_last
        self.allow_pickle = opts.allow_pickle
        self.item_loader = opts.item_loader
        self.storage_options = opts.storage_options
        self.prefetch = opts.prefetch_depth > 0
        try:
            self._open(opts)
        except BaseException as exc:
            clean = without_secrets(exc, self.storage_options)
            if clean is exc:
                raise
            raise clean from None

    def _open(self, opts: ReaderOptions) -> None:
        seed, fraction = self.seed, opts.subsample
        item_loader = self.item_loader if isinstance(self.item_loader, TokensLoader) else None
        limit, depth = opts.cache_limit, opts.prefetch_depth
        keep = max(MIN_CACHED_CHUNKS, opts.shuffle_window + 2)
        self._source = parquet_source(opts, keep) or ChunkSource(
            opts.location,
            self.storage_options,
            opts.cache_dir,
            limit,
            depth,
            keep_chunks=keep,
            check_checksums=self.check_checksums,
        )
        self.output_dir = self._source.output_dir
        config, chunks = self._source.config, self._source.chunks
        self._check_loader(config.item_loader)
        self._starts: list[int] = []
        total = 0
        for entry in chunks:
            self._starts.append(total)
            total += entry.chunk_size
        self._num_items = total
        self._tokens: TokenLayout | None = None
        if item_loader is not None:
            if item_loader.block_size is None:
                raise UsageError("reading a token dataset needs a block size: item_loader=TokensLoader(block_size=...)")
            self._tokens = TokenLayout(chunks, config.data_format, item_loader.block_size, self._source.index_source)
            self._group_sizes = self._tokens.group_sizes
            self._length = self._tokens.num_blocks
            tokens = sum(entry.dim or 0 for entry in chunks)
            if tokens and not self._length:
                warnings.warn(
                    f"{self._source.index_source}: the dataset holds {tokens:,} tokens, fewer than one block of "
                    f"block_size={item_loader.block_size:,}: it reads as 0 blocks; pass a smaller block_size",
                    stacklevel=3,
                )
        else:
            self._group_sizes = [entry.chunk_size for entry in chunks]
            self._length = total
        self._subsample: Subsample | None = None
        if fraction != 1.0:
            if self._tokens is not None:
                raise UsageError("subsample= is not supported with item_loader=TokensLoader: it selects whole items")
            self._subsample = Subsample.of([entry.chunk_size for entry in chunks], fraction, self.shuffle, seed)
            self._group_sizes = self._subsample.group_sizes
            self._length = sum(self._group_sizes)
        if self._tokens is None:
            if total and config.data_spec is not None:
                # Builds the decode plan now, so an unreadable leaf format fails at open time.
                decode_plan(tuple(config.data_format), config.data_spec, self.allow_pickle)
        if depth and self._source.cache is not None and chunks:
            # Prefetched files count against the cache bound: keep them to half of it.
            biggest = max(entry.chunk_bytes for entry in chunks) or 1
            self._source.prefetch_depth = max(1, min(depth, limit // (2 * biggest)))
        self._rank, self._world = distributed_env()
        self._epoch = 0
        self._epoch_shared = shared_epoch_counter()
        self._batch_size = 1  # set by StreamingDataLoader: workers split at whole batches
        self._loader_drop_last = False
        self._resume: ResumePoint | None = None
        self._progress: dict | None = None  # this process's current stream (StatefulDataLoader)
        self._fingerprint = fingerprint(self._length, chunks)
        if self._subsample is not None:
            self._fingerprint["subsample"] = [fraction, self.shuffle, seed]
        self._decode: Callable[[Any], Any] | None = None

    # --- checks at open --------------------------------------------------------------------

    def _check_loader(self, written_with: str) -> None:
        where = self._source.index_source
        if written_with == TOKENS_LOADER and self.item_loader is None:
            raise UnsupportedFormatError(
                f"{where}: this is a token dataset (written with TokensLoader); read it with "
                "StreamingDataset(..., item_loader=shardwright.TokensLoader(block_size=...))"
            )
        if written_with not in ("PyTreeLoader", TOKENS_LOADER):
            raise UnsupportedFormatError(
                f"{where}: item_loader is {written_with!r}; shardwright reads PyTreeLoader and TokensLoader "
                "datasets, and parquet folders with item_loader=ParquetLoader(). Read it with litdata.StreamingDataset"
            )
        if written_with != TOKENS_LOADER and isinstance(self.item_loader, TokensLoader):
            raise UnsupportedFormatError(
                f"{where}: item_loader=TokensLoader(...) was given but the dataset holds ordinary items "
                f"(written with {written_with}); drop item_loader"
            )

    # --- public API ------------------------------------------------------------------------

    @property
    def chunks(self) -> list:
        return list(self._source.chunks)

    @property
    def config(self):
        return self._source.config

    @property
    def cache_dir(self) -> str | None:
        """Where this dataset's chunks are cached (remote datasets), else None."""
        cache = self._source.cache
        return cache.directory if cache is not None else None

    @property
    def _storage(self):
        """The Storage of a remote dataset (None for a local one)."""
        return self._source.storage

    @property
    def epoch(self) -> int:
        shared = self._epoch_shared
        return int(shared.value) if shared is not None else self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order from the next iteration on (every rank must pass the
        same number). DataLoader workers see it too, persistent ones included.

        Raises:
            UsageError (a ValueError): ``epoch`` is not a non-negative int.
        """
        epoch = operator.index(epoch)  # TypeError for floats, strings, ...
        if epoch < 0:
            raise UsageError(f"epoch must be a non-negative int, got {epoch!r}")
        self._epoch = int(epoch)
        if self._epoch_shared is not None:
            self._epoch_shared.value = int(epoch)
        if _worker_info() is None:
            self._rank, self._world = distributed_env()

    def __len__(self) -> int:
        return self._length

    def _fresh_epoch_state(self) -> dict[str, Any]:
        return {"_epoch_shared": shared_epoch_counter()}  # a copy counts its own epochs

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if isinstance(index, str):
            # litdata looks a str up in the keys/ sidecar optimize(key_fn=) writes; we write none
            raise KeyError(
                f"dataset[{index!r:.60}]: look-up by key needs litdata's keys/ sidecar (optimize(key_fn=)), which "
                "shardwright does not write: store the key as a field of each sample and index by position"
            )
        i = operator.index(index)  # TypeError for floats, strings, ...
        if i < 0:
            i += self._length
        if not 0 <= i < self._length:
            raise IndexError(f"index {index} is out of range for a dataset of {self._length} items")
        try:
            return self._get(i)
        except BaseException as exc:
            clean = without_secrets(exc, self.storage_options)
            if clean is exc:
                raise
            raise clean from None

    def __iter__(self) -> Iterator[Any]:
        return self._epoch_iterator()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.output_dir!r}, items={self._length}, chunks={len(self._source.chunks)})"

    # --- reading items ---------------------------------------------------------------------

    def _get(self, i: int, hint: bool = True) -> Any:
        tokens = self._tokens
        if tokens is not None:
            parts = [
                tokens.tokens(self._source.chunk(k, sequential_hint=hint), self._source.chunks[k], first, n)
                for k, first, n in tokens.pieces(i)
            ]
            return tokens.assemble(parts)
        if self._subsample is not None:
            i = self._subsample.base(i)
        k = bisect.bisect_right(self._starts, i) - 1
        view = self._source.item_view(k, i - self._starts[k], sequential_hint=hint)
        item = self._decoder()(view)
        for step in self._transforms:
            item = step(item)
        return item

    def _decoder(self, owned: bool = False):
        if owned:  # items read into buffers of their own (reader.itemfile); format.decode keeps it
            config = self._source.config
            assert config.data_spec is not None
            return item_decoder(config.data_format, config.data_spec, allow_pickle=self.allow_pickle, owned=True)
        decode = self._decode
        if decode is None:  # built per process: closures do not pickle
            config = self._source.config
            assert config.data_spec is not None  # a dataset with items has a spec
            decode = self._decode = item_decoder(config.data_format, config.data_spec, allow_pickle=self.allow_pickle)
        return decode

    def _chunks_of_groups(self, groups: list[int]) -> list[int]:
        if self._subsample is not None:
            return self._subsample.chunks_of(groups)
        if self._tokens is None:
            return groups
        return [k for g in groups for k in self._tokens.chunks_of_block_range(g)]

    # --- epochs ----------------------------------------------------------------------------

    def layout(self, num_workers: int) -> Layout:
        """The layout this rank reads with ``num_workers`` DataLoader workers (0: main process)."""
        drop = self.drop_last if self.drop_last is not None else (self._world > 1 and not self.pad)
        return Layout(self._world, max(1, num_workers), self._batch_size, bool(drop), self.pad)

    def _resume_for(self, epoch: int) -> ResumePoint | None:
        resume = self._resume
        return resume if resume is not None and resume.epoch == epoch else None

    def stream_plan(self, epoch: int, num_workers: int, worker: int) -> tuple[StreamPlan, int, int]:
        """(plan, stream number, items skipped) of this rank's DataLoader worker ``worker`` in ``epoch``."""
        layout = self.layout(num_workers)
        plans, stream, skip = plan_for_stream(
            sum(self._group_sizes), self._resume_for(epoch), layout, self._rank, worker
        )
        return plans[stream], stream, skip

    def _epoch_iterator(self) -> Iterator[Any]:
        info = _worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is None:
            self._rank, self._world = distributed_env()
        elif self._length and self._tokens is None:
            keep_freed_item_memory()  # a loader worker: its batches' buffers are reused
        epoch = self.epoch
        plan, stream, skip = self.stream_plan(epoch, workers, worker)
        warn_if_empty(self.output_dir, self.layout(workers), self.plan_size, worker)
        if info is None and self._resume is not None and self._resume.epoch == epoch:
            self._resume = None  # applied: the next iteration of this object starts afresh
        seq = EpochSequence(self._group_sizes, self.order_spec, epoch)
        progress = {"epoch": epoch, "stream": stream, "streams": self._world * workers, "yielded": skip}
        self._progress = progress
        return self._yield_plan(seq, drop_front(plan, skip), progress)

    def _yield_plan(self, seq: EpochSequence, plan: StreamPlan, progress: dict) -> Iterator[Any]:
        remote = self._source.cache is not None
        source = self._source
        prefetch = (lambda groups: source.prefetch(self._chunks_of_groups(groups))) if remote else None
        return read_windows(windows(seq, plan, remote), self._items_of_ids, progress, prefetch, self.storage_options)

    def _items_of_ids(self) -> Callable[[Any], Iterator[Any]]:
        if self._tokens is not None or not self._length:
            get = self._get
            return lambda ids: (get(i, False) for i in ids.tolist())
        return self._item_reader()

    def _item_reader(self) -> Callable[[Any], Iterator[Any]]:
        """``read_items(ids)`` for iteration (see :func:`item_reader`)."""
        return item_reader(
            self._source,
            self._starts,
            self._decoder(),
            self._transforms,
            base=self._subsample.base if self._subsample is not None else None,
            in_order=not mixes_items(self.order_spec),
            decode_owned=self._decoder(owned=True),
        )

    @property
    def plan_size(self) -> int:
        """Units an epoch's plan orders: items (token datasets: blocks)."""
        return sum(self._group_sizes)

    @property
    def rank(self) -> int:
        """This process's rank (as of the last ``set_epoch`` or iteration)."""
        return self._rank

    @property
    def digest(self) -> str | None:
        """The dataset digest index.json records (``shardwright verify`` recomputes it); None
        for a dataset written before digests."""
        return self._source.digest

    def epoch_sequence(self, epoch: int) -> EpochSequence:
        """The epoch's sequence S (order.py), for receipts (reader/receipts.py)."""
        return EpochSequence(self._group_sizes, self.order_spec, epoch)

    def identity(self) -> dict:
        """What a resume state must match: the dataset (items, chunks, digest) and the order options."""
        return {"dataset": self._fingerprint, "order": order_json(self.order_spec)}

    # --- Resumable: StreamingDataLoader's save and resume (see resume.py) ------------------

    def loader_view(self, shuffle: bool | None = None, drop_last: bool | None = None) -> IterableStreamingDataset:
        if shuffle is None and drop_last is None:
            return as_iterable(self)
        view = as_iterable(shallow_copy(self, own_epoch=True))  # a loader's override is its own
        if shuffle is not None:
            view.shuffle = shuffle
            view.order_spec = dataclasses.replace(view.order_spec, shuffle="chunk_window" if shuffle else "none")
        if drop_last is not None:
            view.drop_last = drop_last
            view.pad = view.pad and not drop_last
        return view

    def configure_loader(self, batch_size: int, drop_last: bool) -> None:
        self._batch_size = batch_size
        self._loader_drop_last = drop_last

    def epoch_start(self, epoch: int, num_workers: int) -> EpochStart:
        return resume.epoch_start(self.plan_size, self._resume_for(epoch), self.layout(num_workers))

    def position_after(self, epoch: int, start: EpochStart, batches: int) -> dict:
        return resume.single_position(self.plan_size, epoch, start, self._loader_drop_last, batches)

    def fresh_position(self, epoch: int, num_workers: int) -> dict:
        return {"single": resume.fresh_point(epoch, self.layout(num_workers))}

    def check_position(self, position: object) -> int:
        return resume.parse_single(position, self.plan_size).epoch

    def apply_position(self, position: dict) -> None:
        point = resume.parse_single(position, self.plan_size)
        self.resume_at(point)
        self.set_epoch(point.epoch)

    def resume_at(self, point: ResumePoint | None) -> None:
        """Start the next iteration of ``point.epoch`` at ``point`` (None: from the start)."""
        self._resume = point

    def clear_resume(self) -> None:
        self._resume = None

    # --- StatefulDataLoader protocol (per worker) -------------------------------------------

    def state_dict(self, num_samples_yielded: int | None = None, num_workers: int = 0, batch_size: int = 1) -> dict:
        """This process's position in its stream (torchdata's StatefulDataLoader calls it in each
        worker), JSON; given litdata's (num_samples_yielded, num_workers, batch_size): litdata's."""
        if num_samples_yielded is not None:
            return litdata_state.dataset_state(self, num_samples_yielded, num_workers, batch_size)
        progress = self._progress or {"epoch": self.epoch, "stream": None, "streams": None, "yielded": 0}
        order = [self.order_spec.shuffle, self.seed, self.order_spec.window]
        return {"dataset": self._fingerprint, "order": order, **progress}

    def load_state_dict(self, state: dict) -> None:
        """Resume this process's stream where :meth:`state_dict` left it (same layout only; for
        another layout use :class:`StreamingDataLoader`), or a litdata state (see litdata_state).
        ResumeStateError if the state is damaged or belongs to another dataset or options."""
        identity = {"dataset": self._fingerprint, "order": [self.order_spec.shuffle, self.seed, self.order_spec.window]}
        if litdata_state.is_litdata_state(state):
            epoch, point = litdata_state.litdata_resume(state, self, None)
        else:
            epoch, point = resume.worker_resume_point(state, identity, self.layout, self.plan_size)
        self.set_epoch(epoch)
        if point is not None:
            self.resume_at(point)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        shared = state.get("_epoch_shared")
        if shared is not None and multiprocessing.context.get_spawning_popen() is None:
            # Shared memory travels only to processes being started (DataLoader workers);
            # an ordinary pickle carries the epoch number.
            state["_epoch_shared"] = None
            state["_epoch"] = int(shared.value)
        state["_progress"] = None
        state["_decode"] = None
        return state


class IterableStreamingDataset(StreamingDataset, _IterableBase):
    """A :class:`StreamingDataset` that a DataLoader iterates (it orders and splits epochs
    itself). ``len()`` is this rank's share of an epoch; ``ds[i]`` still reads any item."""

    def __len__(self) -> int:
        layout = self.layout(1)
        total = sum(self._group_sizes)
        from .partition import rank_range

        start, end = rank_range(total, layout, self._rank)
        return end - start


def as_iterable(dataset: StreamingDataset) -> IterableStreamingDataset:
    """``dataset`` as an IterableStreamingDataset: itself, or (map-style) a shallow copy that
    shares its chunk source and its epoch counter."""
    if isinstance(dataset, IterableStreamingDataset):
        return dataset
    view = shallow_copy(dataset)
    view.__class__ = IterableStreamingDataset
    return cast(IterableStreamingDataset, view)


def shallow_copy(dataset: StreamingDataset, own_epoch: bool = False) -> StreamingDataset:
    """A copy sharing ``dataset``'s chunk source; not ``copy.copy``, whose pickle protocol
    (``__getstate__``) drops the shared epoch counter, so that persistent DataLoader workers
    would read every epoch in the first one's order. ``own_epoch``: a counter of its own,
    starting at the dataset's epoch."""
    view = object.__new__(type(dataset))
    view.__dict__.update(dataset.__dict__)
    if own_epoch and view._epoch_shared is not None:
        view._epoch_shared = shared_epoch_counter()
        if view._epoch_shared is not None:
            view._epoch_shared.value = dataset.epoch
    return view

"""``optimize()``: the public entry point. Decides fresh/resume/append/overwrite, runs this
node's shards on worker processes, and publishes index.json when every shard is done."""

from __future__ import annotations

import logging
import os
import pickle
import sys
import time
import uuid
from dataclasses import dataclass, field

from . import checkpoint
from .checkpoint import INDEX_KEY, CommitRecord, Lease, Manifest, ShardProgress
from .errors import (
    ConcurrentRunError,
    CorruptStateError,
    DatasetExistsError,
    FnError,
    OutputDirError,
    RunMismatchError,
    ShardwrightError,
    WorkerDiedError,
)
from .format import ChunkEntry, IndexConfig, parse_index, parse_size
from .planning import (
    InputsFingerprint,
    NodeIdentity,
    short_repr,
    check_inputs,
    check_settings_match,
    default_num_shards,
    node_identity,
    shards_of_node,
)
from .storage import Storage, open_storage
from .token_format import TOKENS_LOADER, is_tokens_loader
from .workers import PoolOutcome, ShardTask, WorkerConfig, WorkerPool, _signal_name

log = logging.getLogger("shardwright")

DEFAULT_CHUNK_BYTES = "64MB"


@dataclass
class OptimizeResult:
    output_dir: str
    items: int  # samples written by this call (this node)
    chunks: int  # chunks written by this call
    bytes: int  # bytes of chunk files written by this call (as stored)
    seconds: float
    resumed: bool  # continued an interrupted run
    published: bool  # index.json written (False: other nodes' shards still pending)
    inputs: int = 0  # inputs of the whole run
    failed: int = 0  # inputs that failed and were skipped (on_error="skip")
    pending_shards: list = field(default_factory=list)

    def __str__(self) -> str:
        if self.published:
            state = "published"
        elif self.pending_shards:
            state = f"waiting for {len(self.pending_shards)} shard(s) of other nodes"
        else:
            state = "being published by another node that finished at the same moment"
        failed = (f"; {self.failed:,} input(s) failed and were skipped (records under "
                  f"{self.output_dir}/.shardwright/failed/; rerun the same call to retry them)") if self.failed else ""
        return (f"{self.items:,} items in {self.chunks:,} chunks ({self.bytes / 1e6:,.1f} MB) in {self.seconds:.1f} s"
                f"{' (resumed)' if self.resumed else ''}; dataset {state}: {self.output_dir}{failed}")


@dataclass(frozen=True)
class _Settings:
    chunk_size: int | None
    chunk_bytes: int | None
    compression: str | None
    num_shards: int
    item_loader: str = "PyTreeLoader"

    def to_json(self) -> dict:
        settings = {"chunk_size": self.chunk_size, "chunk_bytes": self.chunk_bytes,
                    "compression": self.compression, "num_shards": self.num_shards}
        if self.item_loader != "PyTreeLoader":  # only then: runs recorded before the key existed still match
            settings["item_loader"] = self.item_loader
        return settings


def _fn_name(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _validate(fn, mode, compression, chunk_size, chunk_bytes, on_error, max_retries) -> int | None:
    if not callable(fn):
        raise ShardwrightError(f"fn must be callable; got {type(fn).__name__}")
    if mode not in (None, "overwrite", "append"):
        raise ShardwrightError(f"mode must be None, 'overwrite' or 'append'; got {mode!r}")
    if compression not in (None, "zstd"):
        raise ShardwrightError(f"compression must be None or 'zstd'; got {compression!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ShardwrightError(f"chunk_size must be a positive int (items per chunk); got {chunk_size!r}")
    if on_error not in ("raise", "skip"):
        raise ShardwrightError(f"on_error must be 'raise' or 'skip'; got {on_error!r}")
    if not isinstance(max_retries, int) or max_retries < 0:
        raise ShardwrightError(f"max_retries must be an int >= 0; got {max_retries!r}")
    if chunk_size is None and chunk_bytes is None:
        chunk_bytes = DEFAULT_CHUNK_BYTES
    if chunk_bytes is None:
        return None
    try:
        size = parse_size(chunk_bytes)
    except (ValueError, TypeError) as exc:
        raise ShardwrightError(f"chunk_bytes={chunk_bytes!r} is not a size: {exc}; pass bytes (int) or e.g. '64MB'") from None
    if size < 1:
        raise ShardwrightError(f"chunk_bytes must be at least 1 byte; got {chunk_bytes!r}")
    return size


def _read_index(storage: Storage) -> tuple[list[ChunkEntry], IndexConfig] | None:
    try:
        data = storage.read_bytes(INDEX_KEY)
    except FileNotFoundError:
        return None
    return parse_index(data, f"{storage.url}/{INDEX_KEY}")


def _foreign_files(storage: Storage) -> list[str]:
    return [k for k in storage.list("") if "/" not in k and (k.endswith(".bin") or k.endswith("index.json"))]


class _Run:
    """One optimize() call: decides what the run is, then drives it."""

    def __init__(self, fn, inputs, output_dir, storage_options, settings: _Settings, mode, use_checkpoint,
                 node: NodeIdentity, verbose: bool):
        self.fn, self.inputs, self.settings, self.mode = fn, inputs, settings, mode
        self.use_checkpoint, self.node, self.verbose = use_checkpoint, node, verbose
        self.storage = open_storage(output_dir, storage_options, create=True)
        self.storage.check()  # wrong credentials, a missing bucket or a dead endpoint: fail now, clearly
        self.output_dir = self.storage.url
        self.fingerprint = InputsFingerprint.of(inputs)
        self.resumed = False

    # -- deciding fresh / resume / append / overwrite ------------------------------------------

    def _new_manifest(self, generation: int, mode: str, base: tuple | None, input_ids: list | None,
                      input_skips: list | None) -> Manifest:
        count = len(input_ids) if input_ids is not None else len(self.inputs)
        return Manifest(
            run_id=uuid.uuid4().hex, generation=generation, mode=mode, num_inputs=count,
            num_shards=max(1, min(self.settings.num_shards, count)), inputs=self.fingerprint.to_json(),
            input_ids=input_ids, input_skips=input_skips,
            settings=self.settings.to_json(), use_checkpoint=self.use_checkpoint,
            base_chunks=[c.to_json() for c in base[0]] if base else [],
            base_config=base[1].to_json() if base else None,
            fn_name=_fn_name(self.fn), created_at=time.time(),
        )

    def _mismatch(self, manifest: Manifest) -> str | None:
        recorded = InputsFingerprint.from_json(manifest.inputs)
        return recorded.first_difference(self.fingerprint)

    def _check_same_run(self, manifest: Manifest) -> None:
        difference = self._mismatch(manifest)
        if difference:
            raise RunMismatchError(
                f"inputs changed since the interrupted run in {self.output_dir}: {difference}; "
                "pass the same inputs to resume, or mode='overwrite' to start over"
            )
        check_settings_match(manifest.settings, self.settings.to_json())
        if manifest.fn_name != _fn_name(self.fn):
            log.warning("fn changed since the interrupted run (%s, now %s); resuming with the new fn",
                        manifest.fn_name, _fn_name(self.fn))

    def open(self) -> Manifest | None:
        """Returns the manifest to run, or None when the same call already finished."""
        if self.mode == "overwrite":
            return self._open_overwrite()
        storage = self.storage
        manifest = checkpoint.read_manifest(storage)
        index = _read_index(storage)
        if manifest is not None and index is not None and checkpoint.is_published(index[0], manifest):
            # a crash during publishing: index.json is out, the cleanup was not finished
            checkpoint.finish_published(storage, manifest, index[0])
            manifest = None
        if manifest is not None:
            if not manifest.use_checkpoint or not self.use_checkpoint:
                # a run without checkpoints can't be resumed: start that run over
                self._discard(manifest)
                base = (
                    [ChunkEntry.from_json(c) for c in manifest.base_chunks],
                    IndexConfig.from_json(manifest.base_config),
                ) if manifest.base_config else None
                return self._create(manifest.generation, manifest.mode, base, manifest.input_ids, manifest.input_skips)
            self._check_same_run(manifest)
            return self._resume(manifest)
        if index is not None:
            previous = checkpoint.read_run_record(storage)
            if previous and previous.get("inputs") == self.fingerprint.to_json() \
                    and previous.get("settings") == self.settings.to_json() \
                    and previous.get("fn_name") == _fn_name(self.fn):
                # The same call already finished (perhaps killed just after publishing):
                # rerunning it must not fail, and an append must not add the inputs twice.
                # Inputs that failed in it (on_error="skip") are retried, their outputs appended.
                failed = previous.get("failed_inputs") or []
                if failed:
                    log.warning("retrying %d input(s) that failed in the previous run of this call", len(failed))
                    return self._create(self._next_generation(index[0]), "retry", index,
                                        [pair[0] for pair in failed], [pair[1] for pair in failed])
                log.info("%s already holds the output of this same call; nothing to do", self.output_dir)
                self.resumed = True
                return None
            if self.mode == "append":
                return self._create(self._next_generation(index[0]), "append", index)
            raise DatasetExistsError(
                f"{self.output_dir} already holds a finished dataset ({sum(c.chunk_size for c in index[0]):,} items); "
                "pass mode='append' to add to it or mode='overwrite' to replace it"
            )
        foreign = _foreign_files(storage)
        if foreign:
            raise OutputDirError(
                f"{self.output_dir} holds {foreign[0]} (and {len(foreign) - 1} more) but no index.json and no "
                "shardwright run: a partial output of another tool? Pass mode='overwrite' to replace it"
            )
        return self._create(0, "create", None)

    def _open_overwrite(self) -> Manifest:
        """Wipe and start over, except to resume an interrupted overwrite of this same call
        (a requeued array task must not wipe its peers' work). Corrupt state is wiped too:
        that is the fix our errors suggest."""
        storage = self.storage
        try:
            manifest = checkpoint.read_manifest(storage)
            if manifest is not None and manifest.mode == "overwrite" and manifest.use_checkpoint \
                    and self.use_checkpoint and not self._mismatch(manifest) \
                    and manifest.settings == self.settings.to_json():
                checkpoint.load_progress(storage, manifest.shard_bounds(), manifest.run_id)  # readable, or wiped
                log.info("resuming the interrupted overwrite of %s", self.output_dir)
                return self._resume(manifest)
        except CorruptStateError as exc:
            log.warning("mode='overwrite': discarding unreadable run state (%s)", exc)
        checkpoint.wipe(storage)
        return self._create(0, "overwrite", None)

    def _discard(self, manifest: Manifest) -> None:
        storage = self.storage
        for key in storage.list("chunk-"):
            if "/" not in key and checkpoint.chunk_generation(key) == manifest.generation:
                storage.delete(key)
        storage.delete_prefix(checkpoint.SHARDS_PREFIX)
        storage.delete(checkpoint.FORMAT_KEY)
        storage.delete(checkpoint.MANIFEST_KEY)  # last, as in every cleanup

    @staticmethod
    def _next_generation(chunks: list[ChunkEntry]) -> int:
        return 1 + max(((checkpoint.chunk_generation(c.filename) or 0) for c in chunks), default=0)

    def _create(self, generation: int, mode: str, base, input_ids: list | None = None,
                input_skips: list | None = None) -> Manifest:
        wanted = self._new_manifest(generation, mode, base, input_ids, input_skips)
        manifest = checkpoint.create_manifest(self.storage, wanted)
        if manifest.run_id != wanted.run_id:  # another node created it first
            self._check_same_run(manifest)
            self.resumed = True
        if manifest.base_config and manifest.base_config.get("data_format"):
            # appended samples must match the existing dataset's format (idempotent across nodes)
            config = manifest.base_config
            checkpoint.claim_format(self.storage, manifest.run_id, config["data_format"], config["data_spec"], -1)
        return manifest

    def _resume(self, manifest: Manifest) -> Manifest:
        self.resumed = True
        return manifest



def optimize(
    fn,
    inputs,
    output_dir,
    *,
    chunk_size: int | None = None,
    chunk_bytes: int | str | None = None,
    compression: str | None = None,
    num_workers: int | None = None,
    mode: str | None = None,
    use_checkpoint: bool = True,
    start_method: str | None = None,
    storage_options: dict | None = None,
    verbose: bool = True,
    num_nodes: int | None = None,
    node_rank: int | None = None,
    num_shards: int | None = None,
    on_error: str = "raise",
    max_retries: int = 0,
    item_loader=None,
) -> OptimizeResult:
    """Apply ``fn`` to every input and write the outputs as a litdata-format dataset, exactly once.

    Rerunning the same call after any interruption continues where it stopped. See README.md.
    ``item_loader=shardwright.TokensLoader()``: fn returns 1-D token arrays, written as one
    token stream (litdata's TokensLoader layout; read it with ``StreamingDataset(out,
    item_loader=TokensLoader(block_size=B))``).
    """
    if item_loader is not None and not is_tokens_loader(item_loader):
        raise ShardwrightError(f"item_loader must be None or shardwright.TokensLoader(); got {item_loader!r}")
    started = time.monotonic()
    chunk_bytes_int = _validate(fn, mode, compression, chunk_size, chunk_bytes, on_error, max_retries)
    inputs = check_inputs(inputs)
    node = node_identity(num_nodes, node_rank)
    if node.is_multi_node and not use_checkpoint:
        raise ShardwrightError("multi-node runs need use_checkpoint=True: nodes learn each other's progress from it")
    start_method = start_method or ("fork" if sys.platform == "linux" else "spawn")
    if start_method != "fork":
        _check_picklable(fn, start_method)
    shards = num_shards if num_shards is not None else default_num_shards(len(inputs))
    if not isinstance(shards, int) or shards < 1:
        raise ShardwrightError(f"num_shards must be a positive int; got {num_shards!r}")
    settings = _Settings(chunk_size, chunk_bytes_int, compression, min(shards, max(1, len(inputs))),
                         TOKENS_LOADER if item_loader is not None else "PyTreeLoader")
    run = _Run(fn, inputs, output_dir, storage_options, settings, mode, use_checkpoint, node, verbose)

    lease = Lease(run.storage, f"node-{node.rank}", f"node {node.rank}'s share" if node.is_multi_node else "the run",
                  extra={"node_rank": node.rank, "num_nodes": node.count})
    lease.acquire(run.output_dir)
    try:
        _check_peers_agree(run, lease, node)
        manifest = run.open()
        if manifest is None:
            return OptimizeResult(run.output_dir, 0, 0, 0, time.monotonic() - started, True, True, len(inputs))
        return _drive(run, manifest, lease, fn, num_workers, start_method, storage_options,
                      on_error, max_retries, started)
    finally:
        lease.release()


def _check_peers_agree(run: _Run, lease: Lease, node: NodeIdentity) -> None:
    """Live nodes with another num_nodes would own overlapping shards: refuse, never race."""
    for name, holder in checkpoint.live_leases(run.storage):
        if holder.get("owner") != lease.owner and holder.get("num_nodes", node.count) != node.count:
            raise ConcurrentRunError(
                f"node {holder.get('node_rank')} of {holder.get('num_nodes')} (host {holder.get('host')}, "
                f"pid {holder.get('pid')}) is running on {run.output_dir}, and this call is node {node.rank} of "
                f"{node.count}: every node of a run must use the same number of nodes ({node.source}). "
                "Wait for it to finish, or stop it and rerun with the same count"
            )


def _check_picklable(fn, start_method: str) -> None:
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise ShardwrightError(
            f"fn {_fn_name(fn)} cannot be pickled, which start_method={start_method!r} needs ({exc}). "
            "Define fn at the top level of an importable .py file (not in a notebook, not a lambda or closure), "
            "or use start_method='fork' (the default on Linux)"
        ) from None


def _drive(run: _Run, manifest: Manifest, lease: Lease, fn, num_workers, start_method, storage_options,
           on_error, max_retries, started) -> OptimizeResult:
    storage, node = run.storage, run.node
    all_bounds = manifest.shard_bounds()
    mine = {s: all_bounds[s] for s in shards_of_node(manifest.num_shards, node.rank, node.count)}
    progress = checkpoint.load_progress(storage, mine, manifest.run_id, repair=True) \
        if manifest.use_checkpoint and run.resumed else \
        {s: ShardProgress(s, *b) for s, b in mine.items()}
    pending = [p for p in progress.values() if not p.done]
    cfg = WorkerConfig(
        output_dir=run.output_dir, storage_options=storage_options, generation=manifest.generation,
        chunk_size=manifest.settings["chunk_size"], chunk_bytes=manifest.settings["chunk_bytes"],
        compression=manifest.settings["compression"], use_checkpoint=manifest.use_checkpoint,
        on_error=on_error, max_retries=max_retries, node_rank=node.rank, run_id=manifest.run_id,
        tokens=manifest.settings.get("item_loader") == TOKENS_LOADER,
    )
    tracker = _Tracker(run, progress)
    if pending:
        ids = manifest.input_ids
        tasks = [
            ShardTask(p.shard, p.start, p.end, p.next_input, p.skip_outputs, p.next_seq,
                      [run.inputs[i] for i in ids[p.next_input:p.end]] if ids else list(run.inputs[p.next_input:p.end]),
                      ids[p.next_input:p.end] if ids else None,
                      manifest.input_skips[p.next_input:p.end] if manifest.input_skips else None)
            for p in pending
        ]
        workers = max(1, min(num_workers or os.cpu_count() or 1, len(tasks)))
        tracker.open_bar(sum(p.end - p.start for p in progress.values()), sum(p.inputs_done for p in progress.values()))
        try:
            def on_idle():
                tracker.on_idle()
                return lease.lost  # set by the heartbeat when another run (a requeue) took our lease

            outcome = WorkerPool(fn, cfg, workers, start_method).run(tasks, tracker.on_message, on_idle)
        finally:
            tracker.close_bar()
        _raise_for_outcome(outcome, run, tracker, lease)
    failed = sum(len(p.failed) for p in progress.values())
    if lease.lost:
        raise ShardwrightError(f"stopped: {lease.lost}")
    published, missing = checkpoint.publish_if_complete(run.storage, manifest, progress)
    result = OptimizeResult(
        output_dir=run.output_dir, items=tracker.items, chunks=tracker.chunks, bytes=tracker.bytes,
        seconds=time.monotonic() - started, resumed=run.resumed, published=published,
        inputs=manifest.num_inputs, failed=failed, pending_shards=missing,
    )
    if run.verbose:
        print(f"shardwright: {result}", file=sys.stderr)
    return result


def _tqdm_class():
    """The notebook widget bar where it can draw, the text bar elsewhere (tqdm.auto warns on
    every run in a notebook without ipywidgets)."""
    if "ipykernel" in sys.modules:
        try:
            import ipywidgets  # noqa: F401
            from tqdm.auto import tqdm

            return tqdm
        except ImportError:
            pass
    from tqdm import tqdm

    return tqdm


class _Tracker:
    """Main-process bookkeeping of what workers report: the bar, commits, failures."""

    def __init__(self, run: _Run, progress: dict[int, ShardProgress]):
        self.run, self.progress = run, progress
        self.items = self.chunks = self.bytes = 0
        self.bar = None

    def open_bar(self, total: int, initial: int) -> None:
        if not self.run.verbose:
            return
        tqdm = _tqdm_class()

        self.bar = tqdm(total=total, initial=initial, unit="input", desc="optimize", mininterval=0.5,
                        maxinterval=1.0, smoothing=0.1, dynamic_ncols=True)

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def on_idle(self) -> None:
        if self.bar is not None:
            self.bar.refresh()

    def on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "progress":
            if self.bar is not None:
                self.bar.update(message[2])
        elif kind == "commit":
            record = CommitRecord.from_json(message[2], "a worker's message")
            self.progress[record.shard].add(record)
            if record.chunk is not None:
                self.items += record.chunk.chunk_size
                self.chunks += 1
                self.bytes += record.stored_bytes

    def inputs_done(self) -> int:
        return sum(p.inputs_done for p in self.progress.values())


def _raise_for_outcome(outcome: PoolOutcome, run: _Run, tracker: _Tracker, lease: Lease) -> None:
    total = sum(p.end - p.start for p in tracker.progress.values())
    if outcome.error is not None:
        _, wid, kind, message, index, _, tb, pickled = outcome.error
        original = pickle.loads(pickled) if pickled else None
        if kind == "fn":
            value = short_repr(run.inputs[index]) if 0 <= index < len(run.inputs) else "?"
            error = FnError(
                f"fn raised on input {index:,} ({value}) in worker {wid}: {message}. Committed work is kept: "
                f"fix fn or the input and rerun the same call to resume.\n--- worker traceback ---\n{tb}",
                input_index=index, input_repr=value, worker_traceback=tb,
            )
            raise error from original
        if isinstance(original, ShardwrightError):
            raise original
        raise ShardwrightError(f"worker {wid} failed: {message}\n--- worker traceback ---\n{tb}") from original
    if outcome.dead_worker is not None:
        wid, pid, exitcode, index = outcome.dead_worker
        where = f"input {index:,} ({short_repr(run.inputs[index])})" if 0 <= index < len(run.inputs) else "start-up"
        raise WorkerDiedError(
            f"worker {wid} (pid {pid}) {_signal_name(exitcode)} while processing {where}; the other workers were "
            f"stopped and committed work is kept ({tracker.inputs_done():,} of {total:,} inputs done). "
            "Fix the cause (memory? a crash in fn?) and rerun the same call to resume"
        )
    if outcome.interrupted_by is not None:
        line = (f"Interrupted: {tracker.inputs_done():,} of {total:,} inputs done. "
                "Rerun the same call to resume.")
        print(line, file=sys.stderr, flush=True)
        lease.release()
        if "ipykernel" in sys.modules or hasattr(sys, "ps1"):
            raise KeyboardInterrupt(line)
        raise SystemExit(128 + outcome.interrupted_by)

"""``optimize()``: validate the call, decide what to do with the output (protocol.decide),
run this node's shards on the worker pool, and publish index.json when every shard is done."""

from __future__ import annotations

import logging
import os
import pickle
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import (
    ConcurrentRunError,
    CorruptStateError,
    IncompleteRunError,
    LeaseLostError,
    RunMismatchError,
    UsageError,
)
from ..format import ChunkEntry, IndexConfig
from ..process import host_identity
from ..protocol.claim import claim_format
from ..protocol.decide import PlanKind, Request, RunPlan, check_same_run, decide
from ..protocol.fingerprint import InputFiles, value_types
from ..protocol.fn_identity import describe_changes
from ..protocol.hints import start_over_hint
from ..protocol.layout import INDEX_KEY, lease_key
from ..protocol.lease import Lease, LeaseHolder, lease_owner, live_leases
from ..protocol.links import check_no_links
from ..protocol.manifest import Manifest, create_manifest
from ..protocol.observe import observe
from ..protocol.publish import discard_run_state, finish_published, publish_if_complete, wipe
from ..protocol.run_record import read_run_record
from ..protocol.shards import clamp_num_shards, shards_of_node
from ..sources import Source
from ..storage import Storage, open_storage
from .attempts import AttemptLog
from .executors import LOCAL, ExecutorCall, get_executor
from .guards import check_main_guard, check_not_bootstrapping, redacting
from .identity import fn_identity
from .inputs import (
    backfill_identities,
    check_source_unchanged,
    fingerprint,
    identities,
    input_files_json,
    load_source_state,
    prefix_fingerprint,
    record_identities,
    save_source_state,
)
from .options import OptimizeOptions, fn_name, litdata_args
from .planning import KUBERNETES, NodeIdentity, check_inputs, check_output_dir, node_identity
from .result import OptimizeResult, empty_run_note
from .share import run_share

log = logging.getLogger("shardwright")


@redacting
def optimize(
    fn: Callable,
    inputs: Sequence,
    output_dir: str | os.PathLike[str],
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
    timeout: float | None = None,
    item_loader: object = None,
    allow_fn_config_change: bool = False,
    allow_repeated_append: bool = False,
    executor: str = "local",
    ray_remote_args: dict | None = None,
    failed_dir: str | os.PathLike[str] | None = None,
    shared_output: bool = False,
    # litdata's names (docs/litdata-compat.md): carried out, or refused with the reason
    batch_size: int | None = None,
    fast_dev_run: bool | int = False,
    keep_data_ordered: bool | None = None,
    reorder_files: bool = True,
    compression_level: str | None = None,
    input_dir: str | None = None,
    align_chunking: bool = False,
    **litdata_only: Any,
) -> OptimizeResult:
    """Apply ``fn`` to every input and write the outputs as a litdata-format dataset, exactly once.

    Rerunning the same call after any interruption (Ctrl-C, SIGTERM, SIGKILL, a dead worker,
    a power cut) continues where it stopped; a resume may use another ``num_workers``.

    Args:
        fn: called once per input in a worker process. It returns one sample (any pytree of
            ints, floats, str, bytes, numpy arrays and tensors), None (no sample), or a
            generator of samples. With ``start_method="spawn"`` it must be picklable.
        inputs: a sequence that can be sliced (list, tuple, range; a collections.deque is
            refused: pass list(d)) of picklable values; its order is the dataset's order.
            Inputs that are paths to files are checked for changes when a run resumes. Or a
            source (``shardwright.sources``: parquet, jsonl, files, hf): lazy, identified by
            its metadata, read by the workers (docs/sources.md).
        output_dir: a local directory, ``"s3://bucket/prefix"``, ``"gs://bucket/prefix"`` or
            ``"az://container/prefix"`` (docs/clouds.md).
        chunk_size: items per chunk. Give this or ``chunk_bytes``.
        chunk_bytes: bytes per chunk, an int or a string such as ``"64MB"`` (default
            ``"64MB"`` when neither is given).
        compression: None or ``"zstd"``.
        num_workers: worker processes (default: the number of CPUs).
        mode: None to start, resume, or do nothing when this same call already finished;
            ``"append"`` to add to an existing dataset; ``"overwrite"`` to replace it;
            ``"incremental"`` to add only the inputs whose identity is not in the dataset
            yet (a no-op when none is new; docs/sources.md).
        use_checkpoint: False keeps no resume state (a killed run starts over).
        start_method: ``"fork"`` (default on Linux), ``"spawn"`` or ``"forkserver"``.
        storage_options: boto3 client arguments for S3 (``endpoint_url``,
            ``aws_access_key_id``, ...). Never stored or printed.
        verbose: show a progress bar and print the result line.
        num_nodes: number of machines sharing this run (default: from litdata's
            ``DATA_OPTIMIZER_*`` variables or Slurm, else 1). Give with ``node_rank``.
        node_rank: this machine's rank in ``0 .. num_nodes-1``.
        num_shards: how many contiguous input ranges the run is cut into; fixed for the
            life of the run. Default: 4 per worker of the whole run (``num_workers`` x
            ``num_nodes``), at most ``len(inputs)``: each shard ends in a partly filled
            chunk, so fewer shards mean fewer small chunks, and 4 per worker keep the
            workers balanced when inputs take uneven time. A resume keeps the count the
            interrupted run recorded, whatever ``num_workers`` it uses.
        on_error: ``"raise"`` stops at the first input whose fn raises (FnError);
            ``"skip"`` records the failure under ``.shardwright/failed/`` and goes on.
        max_retries: extra attempts of a failing input before it counts as failed.
        timeout: seconds fn may spend on one input (a generator: on all its outputs); a
            stuck input fails like an exception in fn (a TimeoutError naming the input:
            FnError, or a failure record with ``on_error="skip"``). A SIGALRM in the worker
            interrupts Python code and sleeps; native code that never returns to Python
            (a C loop holding the GIL) is not interrupted, and fn must not use SIGALRM itself.
        item_loader: None, or ``shardwright.TokensLoader()``: fn returns 1-D token arrays
            (numpy or torch), written as one token stream in litdata's TokensLoader layout;
            read it with ``StreamingDataset(out, item_loader=TokensLoader(block_size=B))``.
        allow_fn_config_change: resume an interrupted run although fn's configuration (a
            ``functools.partial``'s arguments, closure values, instance attributes, globals it
            uses; see README "Identity of a call") changed since it started, mixing outputs of
            both configurations in one dataset. Refused by default, naming what changed; a
            change of fn's code alone is always allowed (fix and resume), with a warning.
        allow_repeated_append: ``mode="append"`` of inputs that an earlier run of this
            dataset (the original run or an append) already added: refused by default, since
            each would be in the dataset twice.
        executor: ``"local"`` (default, even when ``RAY_ADDRESS`` is set): this machine, or
            this node of a Slurm or Kubernetes run. ``"ray"``: spread the shards over a Ray
            cluster's nodes (connects the way ``ray.init()`` does; see docs/ray.md).
        ray_remote_args: with ``executor="ray"``, Ray's options of each task (``num_cpus``,
            ``num_gpus``, ``resources``, ``max_retries``, ...); each task runs
            ``num_workers`` worker processes.
        failed_dir: a local path or bucket URL (default ``$SHARDWRIGHT_FAILED_DIR``) that
            collects one JSON record per failed input of this and other runs (run, node,
            task, attempt), and a "resolved" record when a retry succeeds; best effort.
        shared_output: a local ``output_dir`` that every node sees (NFS, Lustre): a
            multi-node Ray or Kubernetes run refuses a local path without it.
        batch_size: litdata's: fn receives lists of ``batch_size`` consecutive inputs.
        fast_dev_run: litdata's: True processes the first 10 inputs (after batching), an int
            that many; the output is a real, small dataset.
        keep_data_ordered, reorder_files: accepted (litdata's names); the dataset always keeps
            the inputs' order. ``align_chunking=True`` needs ``chunk_size`` (as litdata): the
            chunk layout never depends on num_workers here; ``num_shards=1`` gives a single
            worker's boundaries.
        compression_level: None or ``"chunk"`` (whole-file zstd); litdata's in-file levels
            are refused. ``input_dir``: a local directory (validated); fn gets the inputs as given.
        Other litdata arguments are refused with the reason (Lightning-platform ones such as
            ``machine``, ``num_downloaders``, ``optimize_dns``; ``weights``, ``key_fn``, ...).

    Returns:
        An :class:`OptimizeResult`: what this call (this node) wrote and whether the index
        is published.

    Raises:
        UsageError: a bad argument (also a ValueError; ArgumentTypeError also a TypeError).
        InputsError: inputs is not a sequence, or an input cannot be pickled.
        OutputDirError: output_dir cannot be used.
        DatasetExistsError: a finished dataset of another call is there and mode is None; or
            an append of inputs an earlier run already added; or the same call with a changed fn.
        RunMismatchError: the interrupted run had other inputs, settings or fn configuration.
        ConcurrentRunError: another live run is writing the same output.
        IncompleteRunError: a single-node run finished its shards but could not publish
            index.json (another process holds the publish lease, or the storage does not list
            what was written); the message says what to do. Never returned as a success.
        FnError: fn raised on an input (its index, repr and traceback are attached).
        WorkerDiedError: a worker process died (OOM killer, segfault, os._exit).
        StorageError: the storage failed (credentials, bucket, network, disk full).
        CorruptStateError: the run's state was damaged or edited by hand.
        SystemExit: Ctrl-C or SIGTERM (exit code 130/143) after committing what is done;
            KeyboardInterrupt in a notebook.
    """
    started = time.monotonic()
    check_not_bootstrapping()
    check_output_dir(output_dir)
    options = OptimizeOptions.validate(
        fn,
        chunk_size=chunk_size,
        chunk_bytes=chunk_bytes,
        compression=compression,
        num_workers=num_workers,
        mode=mode,
        use_checkpoint=use_checkpoint,
        start_method=start_method,
        storage_options=storage_options,
        verbose=verbose,
        num_nodes=num_nodes,
        node_rank=node_rank,
        num_shards=num_shards,
        on_error=on_error,
        max_retries=max_retries,
        timeout=timeout,
        item_loader=item_loader,
        allow_fn_config_change=allow_fn_config_change,
        allow_repeated_append=allow_repeated_append,
        output_dir=os.fspath(output_dir) if isinstance(output_dir, os.PathLike) else output_dir,
        executor=executor,
        ray_remote_args=ray_remote_args,
        failed_dir=failed_dir,
        shared_output=shared_output,
    )
    extra = litdata_args(
        batch_size=batch_size,
        fast_dev_run=fast_dev_run,
        keep_data_ordered=keep_data_ordered,
        reorder_files=reorder_files,
        compression_level=compression_level,
        input_dir=input_dir,
        align_chunking=align_chunking,
        chunk_size=chunk_size,
        others=litdata_only,
    )
    inputs = extra.apply(check_inputs(inputs))
    if options.engines.executor != LOCAL:
        runner = get_executor(options.engines.executor)  # an unknown name fails before anything is written
        return runner.run(ExecutorCall(fn, inputs, os.fspath(output_dir), options, started))
    node = node_identity(options.num_nodes, options.node_rank)
    if node.is_multi_node and not options.use_checkpoint:
        raise UsageError("multi-node runs need use_checkpoint=True: nodes learn each other's progress from it")
    if options.start_method != "fork":
        check_main_guard(fn, options.start_method)
        _check_picklable(fn, options.start_method)
    if node.is_multi_node:
        log.info("this call is node %d of %d (from %s)", node.rank, node.count, node.origin)
    is_source = isinstance(inputs, Source)
    request = None if is_source else make_request(fn, inputs, options, node.count)
    storage = open_output(output_dir, options)
    if node.is_multi_node and node.source == KUBERNETES:
        check_shared_output(storage, options, f"{node.count} pods of a Kubernetes Indexed Job")
    if is_source:
        load_source_state(storage, inputs)  # a JSONL line index an earlier attempt kept
        request = make_request(fn, inputs, options, node.count)  # the source's metadata: read once, here
    assert request is not None

    lease = Lease(
        storage,
        f"node-{node.rank}",
        f"node {node.rank}'s share" if node.is_multi_node else "the run",
        extra={"node_rank": node.rank, "num_nodes": node.count},
    )
    lease.acquire(storage.url)
    attempt = AttemptLog(storage, node, options.mode, options.storage_options)
    store_answered = True
    try:
        _check_peers_agree(storage, lease, node)
        notes: list[str] = []
        opened = open_call(storage, request, inputs, notes)
        if opened is None:
            attempt.close("noop")
            result = OptimizeResult(
                output_dir=storage.url,
                items=0,
                chunks=0,
                bytes=0,
                seconds=time.monotonic() - started,
                resumed=True,
                published=True,
                inputs=len(inputs),
                note="; ".join(notes),
            )
            if options.verbose and notes:
                print(f"shardwright: {result}", file=sys.stderr)
            return result
        manifest, resumed = opened
        result = _drive(storage, manifest, resumed, fn, inputs, options, node, lease, started, attempt)
        result.note = "; ".join(notes)
        attempt.close("published" if result.published else "waiting")
        return result
    except BaseException as exc:  # recorded in the run's history, then raised unchanged
        if not isinstance(exc, ConcurrentRunError):  # another run owns the output: not ours to write
            store_answered = attempt.close_for(exc) is not None
        raise
    finally:
        lease.release(ask_storage=store_answered)  # no history written (an outage): let it expire


def make_request(fn: Callable, inputs: Sequence, options: OptimizeOptions, num_nodes: int = 1) -> Request:
    """What this call asks of the output (compared with what is there by ``decide``); a
    source's state must be loaded first (``load_source_state``)."""
    incremental, identity = options.mode == "incremental", fn_identity(fn)
    if identity.skipped:
        log.warning(
            "fn %s refers to state that cannot be compared by value, so a change there cannot be detected "
            "on resume or rerun: %s",
            identity.name,
            describe_changes(list(identity.skipped)),
        )
    types = value_types(inputs)  # the values' types looked at once, for the three functions below
    return Request(
        mode=options.mode,
        inputs=fingerprint(inputs, types),
        settings=options.output_settings(len(inputs), num_nodes),
        explicit_num_shards=options.num_shards is not None,
        fn_name=identity.name,
        use_checkpoint=options.use_checkpoint,
        fn_code=identity.code,
        input_files=input_files_json(inputs, types),
        identities=identities(inputs, types) if incremental else None,
        prefix_fingerprint=prefix_fingerprint(inputs) if incremental else None,
        fn_identity=identity,
        allow_fn_config_change=options.allow_fn_config_change,
        allow_repeated_append=options.allow_repeated_append,
    )


def open_output(output_dir: str | os.PathLike[str], options: OptimizeOptions) -> Storage:
    storage = open_storage(output_dir, options.storage_options, create=True)
    storage.check()  # wrong credentials, a missing bucket or a dead endpoint: fail now, clearly
    check_no_links(storage)  # before the first write: never follow a link out of the output
    return storage


def check_shared_output(storage: Storage, options: OptimizeOptions, nodes: str) -> None:
    """A local output_dir on several machines is a dataset split over their disks: refused
    unless the user says every node sees the same directory."""
    if storage.url.startswith("memory://"):
        raise UsageError(f"output_dir {storage.url} lives in one process; {nodes} cannot share it")
    if storage.local_path(INDEX_KEY) is not None and not options.engines.shared_output:
        raise UsageError(
            f"output_dir {storage.url} is a local path, and {nodes} would each write their own disk's copy; "
            "write to a bucket URL (s3://...), or pass shared_output=True if every node mounts this same "
            "directory (NFS, Lustre)"
        )


def open_call(storage: Storage, request: Request, inputs: Sequence, notes: list[str]) -> tuple[Manifest, bool] | None:
    """:func:`open_run` with the checks and bookkeeping around it that every driver does
    (the local engine, an executor's driver): a changed source file is named first, the
    inputs' identities and a source's state are recorded, a resume checks input files."""
    check_source_unchanged(storage, inputs)  # names the file, before decide's general mismatch
    opened = open_run(storage, request, notes)
    if opened is None:
        return None
    manifest, resumed = opened
    record_identities(storage, manifest, inputs, created=not resumed, table=request.identities)
    save_source_state(storage, inputs)
    if resumed:
        _check_input_files(manifest, inputs, storage.url)
    return manifest, resumed


def open_run(storage: Storage, request: Request, notes: list[str] | None = None) -> tuple[Manifest, bool] | None:
    """Carry out :func:`decide`'s plan: returns (the manifest to run, whether it is a resume),
    or None when the same call already finished (or, incremental, nothing is new). What the
    user should know of the plan (inputs skipped, left) is logged and added to ``notes``."""
    while True:
        seen = observe(storage, read_records=request.mode == "overwrite", read_identities=request.mode == "incremental")
        plan = decide(seen, request)
        if plan.kind is not PlanKind.FINISH_PUBLISH:
            break
        # a crash during publishing: index.json is out, the cleanup was not finished
        assert plan.manifest is not None and seen.index_chunks is not None
        finish_published(storage, plan.manifest, list(seen.index_chunks), request.fn())
    if plan.note:
        log.warning("%s", plan.note)
        if notes is not None:
            notes.append(plan.note)
    if plan.kind is PlanKind.NOOP:
        log.info("%s already holds the output of this same call; nothing to do", storage.url)
        return None
    if plan.kind is PlanKind.RESUME:
        assert plan.manifest is not None
        if plan.fn_changed_from:
            log.warning(
                "fn changed since the interrupted run (%s, now %s); resuming with the new fn",
                plan.fn_changed_from,
                request.fn_name,
            )
        if plan.manifest.mode == "overwrite":
            log.info("resuming the interrupted overwrite of %s", storage.url)
        return plan.manifest, True
    if plan.kind is PlanKind.RESTART:  # a run without checkpoints can't be resumed: start it over
        assert plan.manifest is not None
        discard_run_state(storage, plan.manifest.generation)
    elif plan.kind is PlanKind.OVERWRITE:
        wipe(storage)
    elif plan.backfill is not None:  # the dataset's one run, recorded with this call's identities
        backfill_identities(storage, plan.backfill, request)
    elif plan.kind is PlanKind.RETRY:
        log.warning("retrying %d input(s) that failed in the previous run of this call", len(plan.input_ids or ()))
    return _create(storage, request, plan)


def _create(storage: Storage, request: Request, plan: RunPlan) -> tuple[Manifest, bool]:
    base_chunks: tuple[ChunkEntry, ...] = plan.base[0] if plan.base else ()
    base_config: IndexConfig | None = plan.base[1] if plan.base else None
    count = len(plan.input_ids) if plan.input_ids is not None else request.inputs.count
    if plan.input_ranges is not None:
        count = sum(b - a for a, b in plan.input_ranges)
    wanted = Manifest(
        run_id=uuid.uuid4().hex,
        generation=plan.generation,
        mode=plan.manifest_mode,
        num_inputs=count,
        num_shards=clamp_num_shards(request.settings.num_shards, count),
        inputs=request.inputs.to_json(),
        input_ids=list(plan.input_ids) if plan.input_ids is not None else None,
        input_skips=list(plan.input_skips) if plan.input_skips is not None else None,
        settings=request.settings,
        use_checkpoint=request.use_checkpoint,
        base_chunks=[c.to_json() for c in base_chunks],
        base_config=base_config.to_json() if base_config else None,
        fn_name=request.fn_name,
        created_at=time.time(),
        fn_code=request.fn_code,
        input_files=request.input_files,
        fn_identity=request.fn().to_json(),
        input_ranges=[list(r) for r in plan.input_ranges] if plan.input_ranges is not None else None,
        range_skips=[list(p) for p in plan.range_skips] if plan.range_skips else None,
    )
    manifest = create_manifest(storage, wanted)
    resumed = False
    if manifest.run_id != wanted.run_id:  # another node created it first
        check_same_run(manifest, request, storage.url)
        resumed = True
    if manifest.base_config and manifest.base_config.get("data_format"):  # appended samples: the same format
        config = manifest.base_config
        claim_format(storage, manifest.run_id, config["data_format"], config["data_spec"], -1)
    return manifest, resumed


def _check_peers_agree(storage: Storage, lease: Lease, node: NodeIdentity) -> None:
    """Live nodes with another num_nodes would own overlapping shards: refuse, never race."""
    for _name, holder in live_leases(storage):
        if holder.owner != lease.owner and holder.num_nodes is not None and holder.num_nodes != node.count:
            raise ConcurrentRunError(
                f"node {holder.node_rank} of {holder.num_nodes} (host {holder.host}, "
                f"pid {holder.pid}) is running on {storage.url}, and this call is node {node.rank} of "
                f"{node.count}: every node of a run must use the same number of nodes ({node.origin}). "
                "Wait for it to finish, or stop it and rerun with the same count"
            )


def _check_input_files(manifest: Manifest, inputs: Sequence, url: str) -> None:
    """A resume refuses inputs whose files changed since the run started (size or mtime):
    half the dataset would come from the old content."""
    recorded = InputFiles.from_json(manifest.input_files) if manifest.input_files else None
    if recorded is None or (manifest.input_files or {}).get("host") != host_identity():
        return  # stats are only comparable on the host that recorded them
    changed = recorded.first_changed(inputs, manifest.created_at)
    if changed:
        raise RunMismatchError(
            f"{changed}; the interrupted run in {url} already wrote outputs from the old content. "
            f"Restore the file to resume, {start_over_hint(manifest.mode, url)}"
        )


def _warn_if_empty(storage: Storage, manifest: Manifest, fn: Callable) -> None:
    """A run of N > 0 inputs that added no item is almost always a fn that forgot ``return``."""
    try:
        last = read_run_record(storage)
    except CorruptStateError:
        return
    if last and last.run_id == manifest.run_id and manifest.num_inputs and last.items_added == 0:
        log.warning("%s", empty_run_note(fn_name(fn), manifest.num_inputs, len(last.failed_inputs), storage.url))


def _check_picklable(fn: Callable, start_method: str) -> None:
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise UsageError(
            f"fn {fn_name(fn)} cannot be pickled, which start_method={start_method!r} needs ({exc}). "
            "Define fn at the top level of an importable .py file (not in a notebook, not a lambda or closure), "
            "or use start_method='fork' (the default on Linux)"
        ) from None


def _drive(
    storage: Storage,
    manifest: Manifest,
    resumed: bool,
    fn: Callable,
    inputs: Sequence,
    options: OptimizeOptions,
    node: NodeIdentity,
    lease: Lease,
    started: float,
    attempt: AttemptLog,
) -> OptimizeResult:
    def on_idle(current: list[int]) -> str | None:
        lease.extra["current_inputs"] = current  # published by the next heartbeat (shardwright status)
        return lease.lost  # set by the heartbeat when another run (a requeue) took our lease

    share = run_share(
        storage,
        manifest,
        fn,
        inputs,
        options,
        node.rank,
        shards_of_node(manifest.num_shards, node.rank, node.count),
        claim_extra={"node_rank": node.rank, "num_nodes": node.count, "node_lease": lease.owner},
        judge=lambda holder: superseded_node(holder, node.rank, lease_owner(storage, lease.key)),
        standing=lambda: None if lease_owner(storage, lease.key) == lease.owner else f"{lease.what} was taken over",
        attempt=attempt,
        on_idle=on_idle,
        verbose=options.verbose,
        fresh=not resumed and not node.is_multi_node,
    )
    tracker, progress = share.tracker, share.progress
    if lease.lost:
        raise LeaseLostError(f"stopped: {lease.lost}")
    lease.confirm()  # a run paused past its TTL must learn it before it publishes
    published, missing = publish_if_complete(storage, manifest, progress, fn_identity(fn))
    if published:
        _warn_if_empty(storage, manifest, fn)
    result = OptimizeResult(
        output_dir=storage.url,
        items=tracker.items,
        chunks=tracker.chunks,
        bytes=tracker.bytes,
        seconds=time.monotonic() - started,
        resumed=resumed,
        published=published,
        inputs=manifest.num_inputs,
        failed=sum(len(p.failed) for p in progress.values()),
        pending_shards=missing,
    )
    if not published and not node.is_multi_node:
        # One node runs every shard: nobody else will publish. Returning would look like
        # success with no dataset (e.g. records listed under another key than written).
        raise IncompleteRunError(_unpublished_message(storage, missing), missing_shards=missing)
    if missing and node.variables:
        # a leftover export makes a single-node run one node of several: say where it came from
        log.warning(
            "this call is node %d of %d (from %s): %d shard(s) wait for the other node(s), which must run "
            "the same call. For a single-node run, unset those variables",
            node.rank,
            node.count,
            node.origin,
            len(missing),
        )
    if options.verbose:
        print(f"shardwright: {result}", file=sys.stderr)
    return result


def superseded_node(holder: LeaseHolder, rank: int, owner: str | None) -> str | None:
    """A claim taken under node ``rank``'s lease by an earlier holder of that lease, whose
    owner is now ``owner`` (read from storage: the lease was taken over from a paused or cut
    off run): stale, since the node lease says who runs the rank's share; that holder's
    writes are fenced by the claim's epoch. A run that itself lost the lease sees the new
    holder's claims as current."""
    if holder.node_rank == rank and holder.node_lease is not None and owner is not None and holder.node_lease != owner:
        return f"it was taken under node {rank}'s lease, which another run holds now"
    return None


def _unpublished_message(storage: Storage, missing: list[int]) -> str:
    """Why a single-node run that ran every shard could not publish, and what to do."""
    if missing:
        shown = ", ".join(str(s) for s in missing[:10]) + (", ..." if len(missing) > 10 else "")
        return (
            f"the run finished its inputs but {storage.url} still lacks the records of {len(missing)} shard(s) "
            f"({shown}), so index.json was not published: the storage does not list what was written. "
            f"Rerun the same call to redo them, or run `shardwright status {storage.url}`"
        )
    holders = [h.describe(lease_key(n), storage.url) for n, h in live_leases(storage, "publish")]
    who = f" (held by {holders[0]})" if holders else ""
    return (
        f"the run finished every shard but could not publish {storage.url}/index.json: another process holds "
        f"the publish lease{who}. Rerun the same call once it is gone, or run `shardwright merge {storage.url}`"
    )

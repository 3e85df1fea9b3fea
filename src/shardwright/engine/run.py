"""``optimize()``: validate the call and hand it to the driver (``engine/driver.py``), which
opens the output, has the executor (local, or one ``cluster`` registers) run the shards, and
publishes index.json when every shard is done."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from .driver import drive
from .executors import LOCAL, ExecutorCall, get_executor
from .guards import check_not_bootstrapping, redacting
from .local import LocalExecutor
from .options import OptimizeOptions, litdata_args
from .planning import check_inputs, check_output_dir
from .result import OptimizeResult


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
    concurrency: int = 1,
    durable_every: float = 2.0,
    stop_grace: float = 20.0,
    retries: Any = None,
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
        storage_options: the backend's options: boto3 client arguments for s3:// (``endpoint_url``,
            ...), the SDKs' names for gs:// and az:// (docs/clouds.md). Never stored or printed.
        verbose: show a progress bar and print the result line.
        num_nodes: number of machines sharing this run (default: from litdata's
            ``DATA_OPTIMIZER_*`` variables or Slurm, else 1). Give with ``node_rank``.
        node_rank: this machine's rank in ``0 .. num_nodes-1``.
        num_shards: how many contiguous input ranges the run is cut into; fixed for the
            life of the run. Default: 4 per worker of the whole run (``num_workers`` x
            ``num_nodes``), at most ``len(inputs)``: each shard ends in a partly filled
            chunk, so fewer shards mean fewer small chunks, and 4 per worker keep the
            workers balanced when inputs take uneven time (``concurrency`` per worker when
            it is larger: the last inputs spread over the workers). A resume keeps the count the
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
        concurrency: inputs in flight per worker process (default 1): an ``async def`` fn or
            async generator is awaited on one asyncio loop per worker, a plain fn runs in that
            many threads (it must then be thread-safe). Outputs keep the input order.
        durable_every: seconds between progress snapshots (default 2): what a SIGKILL may cost
            beyond the calls in flight. ``stop_grace``: seconds inputs in flight get after
            Ctrl-C or SIGTERM to reach their next ``ResumePoint`` (default 20).
        retries: how transient failures of an input in flight are retried (a
            ``RetryPolicy``, a dict of its fields, an int of max_retries, or None for its
            defaults: backoff with jitter, honouring Retry-After). See docs/sdg.md.
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
        concurrency=concurrency,
        durable_every=durable_every,
        stop_grace=stop_grace,
        retries=retries,
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
    checked = check_inputs(inputs, extra.apply)
    name = options.engines.executor
    # an unknown executor's name fails here, before anything is written
    runner = LocalExecutor() if name == LOCAL else get_executor(name)
    return drive(ExecutorCall(fn, checked, os.fspath(output_dir), options, started), runner)

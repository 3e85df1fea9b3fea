"""optimize()'s arguments, validated once into a frozen object that is passed down.

Every check runs before anything is created or written, and each mistake is one line that
names the argument, what was given, and what to pass instead.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentTypeError, UsageError, require_bool
from ..format import TOKENS_LOADER, is_tokens_loader, parse_size
from ..protocol.manifest import OutputSettings
from ..protocol.shards import MAX_NUM_SHARDS, clamp_num_shards, default_num_shards
from ..sources import Source
from ..storage.options import check_storage_option_names
from .io_options import (
    DEFAULT_DURABLE_EVERY,
    DEFAULT_STOP_GRACE,
    MAX_CONCURRENCY,
    MAX_DURABLE_EVERY,
    MAX_STOP_GRACE,
    InflightOptions,
)

DEFAULT_CHUNK_BYTES = "64MB"
MODES = (None, "overwrite", "append", "incremental")  # "incremental": see the sources block below
COMPRESSIONS = (None, "zstd")
ON_ERROR = ("raise", "skip")
START_METHODS = ("fork", "spawn", "forkserver")


def fn_name(fn: Callable) -> str:
    """How a run records its fn: module and qualified name."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _code_digest(code: types.CodeType, into: Any, depth: int = 0) -> None:
    into.update(code.co_code)
    into.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and depth < 20:
            _code_digest(const, into, depth + 1)  # nested functions, lambdas, comprehensions
        else:
            into.update(repr(const).encode(errors="replace")[:10_000])


def fn_code(fn: Callable) -> str:
    """A digest of fn's code (bytecode, constants, names used), best effort: a changed body
    (a forgotten ``return`` fixed) or another lambda gives another digest; "" when fn has
    no Python code (a builtin, a C extension). functools.partial: its func and arguments."""
    target = fn
    extra = b""
    if isinstance(fn, functools.partial):
        target = fn.func
        extra = repr((fn.args, sorted(fn.keywords.items()))).encode(errors="replace")[:10_000]
    code = (
        getattr(target, "__code__", None) or getattr(type(target).__call__, "__code__", None)
        if not isinstance(target, type)
        else None
    )
    if not isinstance(code, types.CodeType):
        return ""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(getattr(target, "__qualname__", "").encode())
    digest.update(extra)
    _code_digest(code, digest)
    return digest.hexdigest()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_int(name: str, value: object, minimum: int, hint: str = "") -> int:
    if not _is_int(value):
        raise ArgumentTypeError(f"{name} must be an int{hint}; got {value!r} ({type(value).__name__})")
    assert isinstance(value, int)
    if value < minimum:
        raise UsageError(f"{name} must be at least {minimum}{hint}; got {value!r}")
    return value


def _optional_int(name: str, value: object) -> int | None:
    if value is not None and not _is_int(value):
        raise ArgumentTypeError(f"{name} must be an int or None; got {value!r} ({type(value).__name__})")
    return value  # type: ignore[return-value]  # checked just above


def _require_bool(name: str, value: object) -> bool:
    return bool(require_bool(name, value))


def _require_mode(mode: object) -> Any:
    if mode not in MODES or (mode is not None and not isinstance(mode, str)):
        # litdata's words first, so code matching litdata's message still matches
        raise UsageError(
            f"The provided `mode` should be either `append` or `overwrite` (or `incremental`, or None); got {mode!r}"
        )
    return mode


def _require_choice(name: str, value: object, choices: tuple) -> Any:
    if value not in choices or (value is not None and not isinstance(value, str)):
        listed = ", ".join(repr(c) for c in choices)
        raise UsageError(f"{name} must be one of {listed}; got {value!r}")
    return value


def _require_timeout(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"timeout must be a number of seconds or None; got {value!r} ({type(value).__name__})")
    if not 0 < value < 10**7:
        raise UsageError(f"timeout must be a positive number of seconds (per input); got {value!r}")
    return float(value)


MAX_JOB_WORKERS = 256  # the most worker processes one job of the jobs service may ask for
MAX_JOB_RETRIES = 100
MAX_TIMEOUT = 10**7  # seconds


@dataclass(frozen=True)
class OptionSpec:
    """One optimize() keyword argument that callers outside Python may set (the jobs API and CLI)."""

    name: str
    kind: str  # "int" | "float" | "bool" | "choice" | "size" (an int of bytes or a string like "64MB")
    #           | "retries" (an int, max_retries, or a JSON object of RetryPolicy's JSON fields)
    help: str
    default: object = None  # None: optimize()'s own default applies
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()


#: The one list of optimize() options a job of the service (and ``shardwright jobs submit``) may
#: set; the API model ``JobOptions`` and the CLI's flags are generated from it. Adding an option
#: to optimize() for jobs is adding one row here (OptimizeOptions.validate still checks it).
JOB_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("chunk_size", "int", "items per chunk", minimum=1),
    OptionSpec("chunk_bytes", "size", f"bytes per chunk, an int or e.g. '64MB' (default {DEFAULT_CHUNK_BYTES})"),
    OptionSpec("compression", "choice", "compress chunks", choices=tuple(c for c in COMPRESSIONS if c)),
    OptionSpec("num_workers", "int", "worker processes (default: the CPUs)", minimum=1, maximum=MAX_JOB_WORKERS),
    OptionSpec("mode", "choice", "what to do with an existing dataset", choices=tuple(m for m in MODES if m)),
    OptionSpec("num_shards", "int", "logical shards of the run", minimum=1, maximum=MAX_NUM_SHARDS),
    OptionSpec("on_error", "choice", "when fn raises: stop, or skip the input", default="raise", choices=ON_ERROR),
    OptionSpec("max_retries", "int", "per-input retries of fn inside one attempt", 0, 0, MAX_JOB_RETRIES),
    OptionSpec("start_method", "choice", "how worker processes start", choices=START_METHODS),
    OptionSpec("timeout", "float", "seconds fn may spend on one input", minimum=0.001, maximum=MAX_TIMEOUT),
    # --- I/O-bound fns (issue 32) ---------------------------------------------------------
    OptionSpec(
        "concurrency", "int", "inputs in flight per worker process (default 1)", minimum=1, maximum=MAX_CONCURRENCY
    ),
    OptionSpec(
        "durable_every",
        "float",
        f"seconds between progress saves of inputs in flight (default {DEFAULT_DURABLE_EVERY:g})",
        minimum=0.05,
        maximum=MAX_DURABLE_EVERY,
    ),
    OptionSpec(
        "stop_grace",
        "float",
        f"seconds inputs in flight get to reach a ResumePoint on SIGINT/SIGTERM (default {DEFAULT_STOP_GRACE:g})",
        minimum=0.0,
        maximum=MAX_STOP_GRACE,
    ),
    OptionSpec(
        "retries",
        "retries",
        "per-call retries of transient failures: max_retries as an int, or an object of max_retries, base_delay, "
        "max_delay, max_retry_after",
    ),
    # --- trust (issue 14): explicit consent to what is refused by default -----------------
    OptionSpec(
        "allow_fn_config_change",
        "bool",
        "resume although fn's configuration (partial/closure/instance values) changed: mixes both in one dataset",
    ),
    OptionSpec(
        "allow_repeated_append",
        "bool",
        "mode=append of inputs an earlier run of the dataset already added (each is then there twice)",
    ),
)


@dataclass(frozen=True)
class OptimizeOptions:
    """Everything about an optimize() call except fn, inputs and output_dir, validated."""

    chunk_size: int | None
    chunk_bytes: int | None
    compression: str | None
    num_workers: int  # resolved: os.cpu_count() when not given
    mode: str | None
    use_checkpoint: bool
    start_method: str
    storage_options: dict | None
    verbose: bool
    num_nodes: int | None
    node_rank: int | None
    num_shards: int | None  # None: default_num_shards(len(inputs)), whatever the workers
    on_error: str
    max_retries: int
    timeout: float | None = None  # seconds fn may spend on one input; None: no limit
    item_loader: str = "PyTreeLoader"  # "TokensLoader": fn returns 1-D token arrays
    # --- trust (issue 14): explicit consent to what is refused by default -----------------
    allow_fn_config_change: bool = False  # resume although fn's configuration changed (mixes two)
    allow_repeated_append: bool = False  # append inputs an earlier run already added (duplicates)
    # --- engines (issue 18): executor, ray_remote_args, failed_dir, shared_output (block at the end)
    engines: EngineOptions = field(default_factory=lambda: EngineOptions())  # the block at the end
    inflight: InflightOptions = field(default_factory=InflightOptions)  # issue 32: I/O-bound fns (io_options)

    @classmethod
    def validate(
        cls,
        fn: object,
        *,
        chunk_size: object = None,
        chunk_bytes: object = None,
        compression: object = None,
        num_workers: object = None,
        mode: object = None,
        use_checkpoint: object = True,
        start_method: object = None,
        storage_options: object = None,
        verbose: object = True,
        num_nodes: object = None,
        node_rank: object = None,
        num_shards: object = None,
        on_error: object = "raise",
        max_retries: object = 0,
        timeout: object = None,
        item_loader: object = None,
        allow_fn_config_change: object = False,
        allow_repeated_append: object = False,
        output_dir: object = None,
        executor: object = "local",
        ray_remote_args: object = None,
        failed_dir: object = None,
        shared_output: object = False,
        concurrency: object = 1,
        durable_every: object = DEFAULT_DURABLE_EVERY,
        stop_grace: object = DEFAULT_STOP_GRACE,
        retries: object = None,
    ) -> OptimizeOptions:
        if not callable(fn):
            raise ArgumentTypeError(f"fn must be callable (a function of one input); got {type(fn).__name__}")
        if chunk_size is not None:
            chunk_size = _require_int("chunk_size", chunk_size, 1, " (items per chunk)")
        if chunk_size is None and chunk_bytes is None:
            chunk_bytes = DEFAULT_CHUNK_BYTES
        chunk_bytes_int = None
        if chunk_bytes is not None:
            if isinstance(chunk_bytes, bool):
                raise ArgumentTypeError(
                    f"chunk_bytes must be a size in bytes (int) or e.g. '64MB'; got {chunk_bytes!r}"
                )
            try:
                chunk_bytes_int = parse_size(chunk_bytes)  # type: ignore[arg-type]
            except (ValueError, TypeError) as exc:
                raise UsageError(
                    f"chunk_bytes={chunk_bytes!r} is not a size: {exc}; pass bytes (int) or e.g. '64MB'"
                ) from None
            if chunk_bytes_int < 1:
                raise UsageError(f"chunk_bytes must be at least 1 byte; got {chunk_bytes!r}")
        if num_workers is None:
            workers = os.cpu_count() or 1
        else:
            workers = _require_int("num_workers", num_workers, 1, " (worker processes)")
        if num_shards is not None:
            num_shards = _require_int("num_shards", num_shards, 1)
            if num_shards > MAX_NUM_SHARDS:
                raise UsageError(f"num_shards must be at most {MAX_NUM_SHARDS:,}; got {num_shards!r}")
        nodes = _optional_int("num_nodes", num_nodes)
        rank = _optional_int("node_rank", node_rank)
        if storage_options is not None and not isinstance(storage_options, dict):
            raise ArgumentTypeError(
                f"storage_options must be a dict (the storage client's options, see docs/clouds.md) or None; got {type(storage_options).__name__}"
            )
        if storage_options:
            check_storage_option_names(storage_options, output_dir)
        if item_loader is not None and not is_tokens_loader(item_loader):
            raise UsageError(f"item_loader must be None or shardwright.TokensLoader(); got {item_loader!r}")
        method = start_method if start_method is not None else ("fork" if sys.platform == "linux" else "spawn")
        checked_timeout = _require_timeout(timeout)
        return cls(
            chunk_size=chunk_size,
            chunk_bytes=chunk_bytes_int,
            compression=_require_choice("compression", compression, COMPRESSIONS),
            num_workers=workers,
            mode=_require_mode(mode),
            use_checkpoint=_require_bool("use_checkpoint", use_checkpoint),
            start_method=_require_choice("start_method", method, START_METHODS),
            storage_options=storage_options,
            verbose=_require_bool("verbose", verbose),
            num_nodes=nodes,
            node_rank=rank,
            num_shards=num_shards,
            on_error=_require_choice("on_error", on_error, ON_ERROR),
            max_retries=_require_int("max_retries", max_retries, 0),
            timeout=checked_timeout,
            item_loader=TOKENS_LOADER if item_loader is not None else "PyTreeLoader",
            allow_fn_config_change=_require_bool("allow_fn_config_change", allow_fn_config_change),
            allow_repeated_append=_require_bool("allow_repeated_append", allow_repeated_append),
            engines=EngineOptions.validate(
                executor, ray_remote_args, failed_dir, shared_output, num_workers is not None
            ),
            inflight=InflightOptions.validate(fn, concurrency, durable_every, stop_grace, checked_timeout, retries),
        )

    def output_settings(self, num_inputs: int) -> OutputSettings:
        """The settings a new run of ``num_inputs`` inputs would record. Without an explicit
        ``num_shards`` the count comes from the inputs alone (``default_num_shards``: never from
        ``num_workers`` or ``num_nodes``, so the chunks are the same whatever the parallelism);
        an existing run keeps the count its manifest recorded (``Request.explicit_num_shards``)."""
        shards = self.num_shards if self.num_shards is not None else default_num_shards(num_inputs)
        return OutputSettings(
            self.chunk_size, self.chunk_bytes, self.compression, clamp_num_shards(shards, num_inputs), self.item_loader
        )


# --- sources (issue 17): mode="incremental" ------------------------------------------------
# mode="incremental" processes only the inputs whose identity (protocol.identity) is not in
# the dataset yet and appends their outputs; it is validated with the other modes above
# (MODES) and needs no option of its own.


# --- litdata's optimize() arguments (issue 15: litdata parity) ---------------------------------
# Each of litdata 0.2.76's optimize() arguments that shardwright's own do not cover is either
# carried out with litdata's meaning here, or refused with one line saying why and what to use.
# docs/litdata-compat.md lists them all.

#: litdata's fast_dev_run=True: the first 10 inputs (litdata's _DEFAULT_FAST_DEV_RUN_ITEMS).
FAST_DEV_RUN_INPUTS = 10

_LIGHTNING_ONLY = ("machine", "optimize_dns", "broadcast_paths")
#: litdata's I/O threads per worker: accepted as tuning that shardwright needs no knob for.
_IO_THREADS = ("num_downloaders", "num_uploaders")
_REFUSED_LITDATA_ARGS: dict[str, str] = {
    "weights": "it balances litdata's static split of inputs among workers; shardwright's workers take "
    "contiguous shards as they free up, so there is nothing to weigh: drop it (raise num_shards for finer balancing)",
    "key_fn": "it writes litdata's keys/ sidecar for dataset[key] lookups, which shardwright's reader does not "
    "offer: store the key as a field of each sample instead",
    "encryption": "shardwright writes no encrypted chunks: encrypt the storage (S3 SSE, an encrypted disk)",
    "queue": "a multiprocessing queue cannot be resumed exactly once: pass the inputs as a sequence",
    "reader": "litdata's input readers (parquet ...) are not used: read the input inside fn",
    "compression_batch_size": "it sizes litdata's in-file zstd frames, which shardwright does not write "
    "(compression_level='chunk' only): drop it",
}


@dataclass(frozen=True)
class LitdataArgs:
    """litdata's optimize() arguments that shardwright carries out, validated."""

    batch_size: int | None = None
    fast_dev_run: int | None = None  # number of inputs kept

    def apply(self, inputs: Any) -> Any:
        """litdata's order: inputs grouped into batches (fn receives a list), then cut to the first few."""
        if self.batch_size is not None and isinstance(inputs, Source):
            raise UsageError(
                "batch_size= groups a list of inputs; a source's rows are read lazily by the workers: "
                "drop batch_size (or pass a list of inputs)"
            )
        if self.batch_size is not None:
            inputs = [list(inputs[pos : pos + self.batch_size]) for pos in range(0, len(inputs), self.batch_size)]
        if self.fast_dev_run is not None:
            inputs = inputs[: self.fast_dev_run]
        return inputs


def litdata_args(
    *,
    batch_size: object = None,
    fast_dev_run: object = False,
    keep_data_ordered: object = None,
    reorder_files: object = True,
    compression_level: object = None,
    input_dir: object = None,
    align_chunking: object = False,
    chunk_size: object = None,
    others: dict[str, Any],
) -> LitdataArgs:
    """Validate litdata's arguments; ``others`` are the remaining keyword arguments given."""
    for name in others:
        if name in _IO_THREADS:
            _require_int(name, others[name], 1, " (litdata's I/O threads per worker)")
            warnings.warn(
                f"optimize({name}={others[name]}) changes nothing here: litdata's {name} are threads that move "
                "files between a worker and the storage; shardwright's workers read inputs inside fn and upload "
                "each chunk as it is sealed, so no thread count is needed (num_workers sets the parallelism)",
                stacklevel=3,
            )
            continue
        if name in _LIGHTNING_ONLY:
            raise UsageError(
                f"optimize({name}=...) is refused: it configures Lightning AI's platform (remote machines, "
                "downloaders, DNS), which shardwright does not run on; drop it (num_workers and num_nodes/Slurm "
                "set the parallelism here)"
            )
        if name in _REFUSED_LITDATA_ARGS:
            raise UsageError(f"optimize({name}=...) is refused: {_REFUSED_LITDATA_ARGS[name]}")
        raise ArgumentTypeError(f"optimize() got an unexpected keyword argument {name!r}")
    batch = None if batch_size is None else _require_int("batch_size", batch_size, 1, " (inputs per fn call)")
    if batch == 1:
        batch = None  # litdata groups only batch_size > 1
    if type(fast_dev_run) is bool:
        keep = FAST_DEV_RUN_INPUTS if fast_dev_run else None
    else:
        keep = _require_int("fast_dev_run", fast_dev_run, 1, " (True or a number of inputs)")
    for name, value in (("keep_data_ordered", keep_data_ordered), ("reorder_files", reorder_files)):
        if value is not None and type(value) is not bool:
            raise ArgumentTypeError(f"{name} must be True or False; got {value!r}")
        # Either way the dataset keeps the inputs' order: shards are contiguous and committed in order.
    _require_bool("align_chunking", align_chunking)
    if align_chunking and chunk_size is None:
        raise UsageError(
            "align_chunking=True: `chunk_size` needs to be defined (as in litdata): chunks of that many items"
        )
    if align_chunking and keep_data_ordered is False:
        # our order is kept either way, but litdata refuses the pair: a script that runs here must run there
        raise UsageError("align_chunking requires keep_data_ordered=True (as in litdata): drop keep_data_ordered=False")
    if compression_level not in (None, "chunk"):
        raise UsageError(
            f"compression_level={compression_level!r} is refused: it writes litdata 0.2.76's zstd frames inside "
            ".bin files, which earlier litdata versions cannot read; shardwright compresses whole chunk files "
            "(compression='zstd', compression_level='chunk' or None), which every version reads"
        )
    if input_dir is not None:
        if not isinstance(input_dir, (str, os.PathLike)) or "://" in os.fspath(input_dir):
            raise UsageError(
                f"input_dir={input_dir!r} is refused: litdata downloads remote input files before fn; with "
                "shardwright read remote files inside fn (or give local paths)"
            )
        if not os.path.isdir(input_dir):
            raise UsageError(f"input_dir={os.fspath(input_dir)!r} is not a directory")
    return LitdataArgs(batch_size=batch, fast_dev_run=keep)


# --- engines (issue 18): where the shards run, and where failure copies go ------------------
# One block so that the executors' options are found together. The executor names are the
# engine's registry's (engine/executors.py); their code lives in cluster/.

FAILED_DIR_VAR = "SHARDWRIGHT_FAILED_DIR"


@dataclass(frozen=True)
class EngineOptions:
    """``executor``, ``ray_remote_args``, ``failed_dir`` and ``shared_output``, validated."""

    executor: str = "local"  # "local" (this machine, or this node of a Slurm/Kubernetes run) or "ray"
    ray_remote_args: dict | None = None  # Ray's .options() of each task: num_cpus, num_gpus, resources, ...
    failed_dir: str | None = None  # a local path or bucket URL collecting failure records of many runs
    shared_output: bool = False  # a local output_dir every node sees (NFS, Lustre): allowed multi-node
    num_workers_given: bool = False  # an executor picks its own default when num_workers was not given

    @classmethod
    def validate(
        cls, executor: object, ray_remote_args: object, failed_dir: object, shared_output: object, workers_given: bool
    ) -> EngineOptions:
        if not isinstance(executor, str):
            raise ArgumentTypeError(
                f"executor must be a name such as 'local' or 'ray'; got {executor!r} ({type(executor).__name__})"
            )
        if ray_remote_args is not None:
            if not isinstance(ray_remote_args, dict) or not all(isinstance(k, str) for k in ray_remote_args):
                raise ArgumentTypeError(
                    "ray_remote_args must be a dict of Ray task options (num_cpus, num_gpus, resources, ...); "
                    f"got {type(ray_remote_args).__name__}"
                )
            if executor != "ray":
                raise UsageError(
                    f"ray_remote_args is only used with executor='ray'; this call has executor={executor!r}"
                )
        if failed_dir is None:
            failed_dir = os.environ.get(FAILED_DIR_VAR) or None
        if isinstance(failed_dir, os.PathLike):
            failed_dir = os.fspath(failed_dir)
        if failed_dir is not None and (not isinstance(failed_dir, str) or not failed_dir.strip()):
            raise ArgumentTypeError(
                f"failed_dir must be a local path or a bucket URL (or None); got {failed_dir!r} "
                f"(also read from ${FAILED_DIR_VAR})"
            )
        return cls(
            executor=executor,
            ray_remote_args=dict(ray_remote_args) if ray_remote_args else None,
            failed_dir=failed_dir,
            shared_output=_require_bool("shared_output", shared_output),
            num_workers_given=workers_given,
        )

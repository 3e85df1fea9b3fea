"""``map(fn, inputs, output_dir)``: litdata's transform half, exactly once.

litdata's map calls ``fn(input, output_dir)`` and lets fn write files anywhere under
output_dir; a crash leaves half-written files and a rerun redoes every input. Here each call
of fn gets a private staging directory instead, and the run is an ordinary optimize run (the
same workers, nodes/Slurm, on_error, retries, timeouts, leases and status) whose samples are
manifests of the staged files:

1. fn(input, staging) writes its files into a fresh local directory (``staging`` has the
   layout fn would give output_dir).
2. The worker uploads them to ``OUTPUT/.shardwright/map/staged/<attempt>/...`` (hidden) and
   returns ``{"files": [...], "staged": <attempt>}``; the engine commits that sample with the
   input's chunk, exactly once: an input whose commit record exists is skipped by a rerun, an
   attempt that died before it left only hidden staged files.
3. When the run is published, its files are moved under their final names in input order,
   each file atomically (rename on local disk, one PUT on object stores), and a marker is
   written last. A crash during this step is finished by rerunning the same call (moves are
   idempotent), so no truncated file is ever visible and no uncommitted input has a visible file.

The run's own dataset (``OUTPUT/.shardwright/map``) lists every input's files:
``shardwright status OUTPUT/.shardwright/map`` shows progress.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UsageError
from ..format import chunk_item, chunk_num_items, decompress, item_decoder, unpack_chunk
from ..protocol.index import read_index, read_index_bytes
from ..protocol.layout import STATE_DIR
from ..storage import Storage, open_storage, parse_location
from ..storage.files import fsync_dir
from .map_watch import watching
from .result import OptimizeResult
from .run import optimize

__all__ = ["MAP_DIR", "map"]

MAP_DIR = f"{STATE_DIR}/map"  # the map run's own dataset, under the output
_STAGED = "staged"
_TMP = "staging-tmp"  # local outputs: where fn writes before its directory is renamed under staged/
_INPUTS_PER_COMMIT = 16  # an input is committed with at most 15 others (one chunk of manifests)
_DONE_KEY = "materialized.json"  # in the run's storage: every file is in place


def _run_url(output_dir: str | os.PathLike[str]) -> str:
    location = parse_location(output_dir)
    return f"{location.url.rstrip('/')}/{MAP_DIR}"


class _MapInput:
    """The fn of the map's optimize run: stage fn's files, upload them hidden, return their manifest.

    It carries the user fn's name and code so the run's identity is the user's fn."""

    def __init__(self, fn: Callable[[Any, str], Any], run_url: str, storage_options: dict | None):
        # The run's identity is the user's fn (engine.identity follows __wrapped__; fn_name and
        # fn_code read __module__/__qualname__/__code__); the rest sits under a dunder key, which
        # identity does not hash: new credentials must not make a resume "another call".
        self.__wrapped__ = fn
        self.__module__ = getattr(fn, "__module__", "?")
        self.__qualname__ = getattr(fn, "__qualname__", type(fn).__name__)
        self.__code__ = getattr(fn, "__code__", None)
        self.__dict__["__map__"] = {"run_url": run_url, "storage_options": storage_options, "storage": None}
        self.__dict__["__wants_device__"] = _takes(fn, "device")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["__code__"] = None  # code objects do not pickle; only the parent fingerprints fn
        state["__map__"] = {**state["__map__"], "storage": None}
        return state

    def _run_storage(self) -> Storage:
        state = self.__dict__["__map__"]
        if state["storage"] is None:
            state["storage"] = open_storage(state["run_url"], state["storage_options"])
        return state["storage"]

    def __call__(self, item: Any) -> dict | None:
        storage = self._run_storage()
        user_fn: Callable[..., Any] = self.__wrapped__
        fn = user_fn
        if self.__dict__["__wants_device__"]:
            fn = functools.partial(user_fn, device=_device())  # litdata passes it when fn takes it
        attempt = uuid.uuid4().hex
        final = storage.local_path(f"{_STAGED}/{attempt}")
        if final is not None:
            # Local output: fn writes next to the run, and the staging directory is renamed
            # into place (no copy), its files made durable first.
            parent = storage.local_path(_TMP)
            assert parent is not None
            os.makedirs(parent, exist_ok=True)
            outer = tempfile.mkdtemp(prefix="attempt-", dir=parent)
            staging = os.path.join(outer, "out")  # fn's directory, inside one of its own: see _escaped
            os.mkdir(staging)
            try:
                with watching(staging, _output_root(parent)):
                    fn(item, staging)
                _escaped(outer)
                files = _staged_files(staging)
                if not files:
                    return None
                _make_durable(staging, files)
                os.makedirs(os.path.dirname(final), exist_ok=True)
                os.replace(staging, final)
                fsync_dir(os.path.dirname(final))
            finally:
                shutil.rmtree(outer, ignore_errors=True)
            return {"files": json.dumps(files), "staged": attempt}
        with tempfile.TemporaryDirectory(prefix="shardwright-map-") as outer:
            staging = os.path.join(outer, "out")
            os.mkdir(staging)
            with watching(staging, None):
                fn(item, staging)
            _escaped(outer)
            files = _staged_files(staging)
            if not files:
                return None
            for name in files:
                with open(os.path.join(staging, name), "rb") as handle:
                    storage.write_bytes(f"{_STAGED}/{attempt}/{name}", handle.read())
        return {"files": json.dumps(files), "staged": attempt}


def _output_root(tmp: str) -> str:
    """The local output directory of the map run's staging parent (OUTPUT/.shardwright/map/staging-tmp)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.normpath(tmp))))


def _make_durable(staging: str, files: list[str]) -> None:
    """fsync fn's files and their directories: the commit record that follows must not outlive them."""
    folders = {staging}
    for name in files:
        path = os.path.join(staging, name)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        folder = os.path.dirname(path)
        while folder != staging and folder not in folders:
            folders.add(folder)
            folder = os.path.dirname(folder)
    for folder in folders:
        fsync_dir(folder)


def _takes(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _device() -> str:
    """litdata's ``device`` argument: this worker's GPU when torch sees some, else ``"cpu"``."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return f"cuda:{os.getpid() % torch.cuda.device_count()}"
    return "cpu"


def _escaped(outer: str) -> None:
    """UsageError naming a file fn wrote through '../' (next to its directory): it would be
    silently dropped, as nothing outside fn's directory is kept."""
    stray = sorted(name for name in os.listdir(outer) if name != "out")
    if stray:
        raise UsageError(
            f"map: fn wrote {('../' + stray[0])!r} outside the directory it was given (through '../'); "
            "files outside it are not kept: write every file under that directory"
        )


def _staged_files(staging: str) -> list[str]:
    """Relative names of the files fn wrote (sorted); links and other special files are refused."""
    names = []
    for folder, dirs, files in os.walk(staging):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not (os.path.isdir(path) or os.path.isfile(path)):
                raise UsageError(
                    f"map: fn made {os.path.relpath(path, staging)!r}, a link or special file; write regular files only"
                )
        names += [os.path.relpath(os.path.join(folder, name), staging).replace(os.sep, "/") for name in files]
    for name in names:
        if name == STATE_DIR or name.startswith(f"{STATE_DIR}/"):
            raise UsageError(f"map: fn wrote {name!r}; {STATE_DIR}/ under output_dir is shardwright's, use other names")
    return sorted(names)


def _manifests(run: Storage) -> list[dict]:
    """The committed manifests of a published map run, in input order."""
    chunks, config, _ = read_index(run)
    if not chunks:
        return []
    assert config.data_spec is not None
    decode = item_decoder(config.data_format, config.data_spec, allow_pickle=False)
    items = []
    for entry in chunks:
        data = unpack_chunk(decompress(run.read_bytes(entry.filename), config.compression), config.compression_level)
        items += [decode(chunk_item(data, j)) for j in range(chunk_num_items(data))]
    return items


def _move(run: Storage, out: Storage, staged: str, name: str) -> None:
    source, target = run.local_path(staged), out.local_path(name)
    if source is not None and target is not None:
        if os.path.exists(source):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)  # atomic on one filesystem
        return
    if run.exists(staged):
        out.write_bytes(name, run.read_bytes(staged))
        run.delete(staged)


def materialize(output_dir: str, storage_options: dict | None = None) -> int:
    """Move a published map run's staged files to their final names (idempotent); the number of files."""
    run = open_storage(_run_url(output_dir), storage_options)
    return move_staged(run, open_storage(output_dir, storage_options, create=True))


def move_staged(run: Storage, out: Storage) -> int:
    """:func:`materialize` between the run's storage and the output's (any backends)."""
    # The marker names the index it materialized: a later run of the map (overwrite, append)
    # publishes another index, whose files are moved in turn.
    index = hashlib.sha256(read_index_bytes(run)).hexdigest()
    if run.exists(_DONE_KEY):
        done = json.loads(run.read_bytes(_DONE_KEY))
        if done.get("index") == index:
            return int(done["files"])
    count = 0
    for manifest in _manifests(run):
        for name in json.loads(manifest["files"]):
            _move(run, out, f"{_STAGED}/{manifest['staged']}/{name}", name)
            count += 1
    out.barrier()
    run.delete_prefix(f"{_STAGED}/")  # attempts that died before their commit
    run.delete_prefix(f"{_TMP}/")
    run.write_bytes(_DONE_KEY, json.dumps({"files": count, "index": index}).encode())
    return count


def map(
    fn: Callable[[Any, str], Any],
    inputs: Sequence,
    output_dir: str | os.PathLike[str],
    *,
    storage_options: dict | None = None,
    **options: Any,
) -> OptimizeResult:
    """Call ``fn(input, directory)`` for every input; the files fn writes into ``directory``
    appear under ``output_dir`` with the same relative names, exactly once (see the module doc).

    The keyword arguments are optimize()'s (num_workers, num_nodes/node_rank, on_error,
    max_retries, timeout, mode, start_method, verbose, batch_size, fast_dev_run ...), with the
    same meaning: a killed map is resumed by rerunning the same call. Files of later inputs
    replace those of earlier ones with the same name. Each file is uploaded once and moved
    once; an input's files are held in memory one file at a time.
    """
    for name in ("chunk_size", "chunk_bytes", "compression", "item_loader"):
        if name in options:
            raise UsageError(f"map takes no {name}=: it writes fn's files, not a dataset")
    if options.pop("error_when_not_empty", False):
        out = open_storage(output_dir, storage_options, create=True)
        if any(not key.startswith(f"{STATE_DIR}/") for key in out.list()):
            raise UsageError(f"map: output_dir {out.url} is not empty (error_when_not_empty=True)")
    if _takes(fn, "is_last"):
        raise UsageError(
            "map: fn takes is_last, litdata's signal for a worker's last input; shardwright's workers take "
            "shards as they free up and have no last input: make fn complete on each input instead"
        )
    run_url = _run_url(output_dir)
    result = optimize(
        _MapInput(fn, run_url, storage_options),
        inputs,
        run_url,
        chunk_size=_INPUTS_PER_COMMIT,
        storage_options=storage_options,
        **options,
    )
    if result.published:
        files = materialize(os.fspath(output_dir), storage_options)
        if options.get("verbose", True):
            print(f"shardwright map: {files:,} files of {result.inputs:,} inputs in {output_dir}", file=sys.stderr)
    return result

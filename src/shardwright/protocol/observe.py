"""Read what an output holds, for :func:`shardwright.protocol.decide.decide`."""

from __future__ import annotations

from ..errors import CorruptStateError
from ..storage import Storage
from .decide import Observed
from .index import index_source, parse_dataset_index, read_index_bytes
from .manifest import read_manifest
from .recorded import Recorded, read_recorded
from .records import load_progress
from .run_record import read_run_record


def foreign_files(storage: Storage) -> list[str]:
    """Top-level files that look like a dataset's (chunks, index) when no run of ours is there."""
    return [k for k in storage.list("") if "/" not in k and (k.endswith(".bin") or k.endswith("index.json"))]


def observe(storage: Storage, *, read_records: bool = False, read_identities: bool = False) -> Observed:
    """The state of ``storage`` as :func:`decide` needs it. An unreadable manifest, index or
    run record is recorded, not raised (mode="overwrite" wipes it); ``read_records`` also checks that the run's
    records parse (only an overwrite needs to know, to resume or wipe)."""
    manifest, manifest_error = None, None
    try:
        manifest = read_manifest(storage)
    except CorruptStateError as exc:
        manifest_error = exc
    records_readable = True
    if manifest is not None and read_records:
        try:
            load_progress(storage, manifest.shard_bounds(), manifest.run_id, sealed=manifest.records_sealed)
        except CorruptStateError:
            records_readable = False
    index, last_run = None, None
    try:
        data = read_index_bytes(storage)
    except FileNotFoundError:
        pass
    else:
        try:
            index = parse_dataset_index(data, index_source(storage.url))
            last_run = read_run_record(storage)
        except CorruptStateError as exc:
            manifest_error = manifest_error or exc
    recorded: Recorded | None = None
    if read_identities and index is not None and manifest_error is None:
        last = last_run.data.get("generation") if last_run is not None else None
        try:
            recorded = read_recorded(storage, last) if type(last) is int and 0 <= last < 2**32 else Recorded([], [], [])
        except CorruptStateError as exc:
            manifest_error = exc
    return Observed(
        url=storage.url,
        manifest=manifest,
        manifest_error=manifest_error,
        index_chunks=tuple(index[0]) if index is not None else None,
        index_config=index[1] if index is not None else None,
        last_run=last_run,
        foreign_files=tuple(foreign_files(storage)) if manifest is None and index is None else (),
        records_readable=records_readable,
        recorded=recorded,
    )

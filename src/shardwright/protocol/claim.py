"""The sample format of a run: the first sample encoded anywhere fixes it (format.json)."""

from __future__ import annotations

from ..storage import Storage
from .jsonio import MAX_STATE_BYTES, dumps, loads_object, read_versioned_state, require_field
from .layout import FORMAT_KEY


def _read_format_versioned(storage: Storage) -> tuple[dict, str] | None:
    current = read_versioned_state(storage, FORMAT_KEY, "format record", MAX_STATE_BYTES)
    if current is None:
        return None
    record = loads_object(current[0], "format record", storage, FORMAT_KEY)
    where = f"{storage.url}/{FORMAT_KEY}"
    require_field(record, "data_format", list, "format record", where)
    require_field(record, "input_index", int, "format record", where)
    return record, current[1]


def read_format(storage: Storage, run_id: str) -> dict | None:
    """The format claimed in this run, or None (a leftover claim of another run is ignored)."""
    current = _read_format_versioned(storage)
    if current is None or current[0].get("run_id") != run_id:
        return None
    return current[0]


def claim_format(storage: Storage, run_id: str, data_format: list, data_spec: str | None, input_index: int) -> dict:
    """The first sample encoded anywhere in the run fixes the dataset's format; returns the winner's."""
    record = {"data_format": data_format, "data_spec": data_spec, "input_index": input_index, "run_id": run_id}
    while True:
        if storage.create_exclusive(FORMAT_KEY, dumps(record)):
            return record
        current = _read_format_versioned(storage)
        if current is None:
            continue  # deleted in between: try again
        existing, version = current
        if existing.get("run_id") == run_id:
            return existing
        if storage.replace_if_version(FORMAT_KEY, dumps(record), version):  # a leftover of another run
            return record

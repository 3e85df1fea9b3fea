"""The run record, ``.shardwright/run.json``: what the last finished run did (what ``status``
shows) and which of its inputs failed (what a rerun of the same call retries)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import CorruptStateError
from ..format import ChunkEntry
from ..process import host_identity
from ..storage import Storage
from .fingerprint import InputsFingerprint
from .fn_identity import FnIdentity
from .jsonio import dumps, loads_object, read_state
from .layout import RUN_RECORD_KEY, chunk_generation
from .manifest import MAX_INPUTS, Manifest

__all__ = ["MAX_INPUTS_HISTORY", "RunRecord", "inputs_history", "read_run_record", "write_run_record"]

MAX_INPUTS_HISTORY = 10_000  # digests of finished runs' inputs kept in run.json (oldest dropped beyond)


@dataclass(frozen=True)
class RunRecord:
    """run.json, checked. The fields the protocol decides on are typed; ``data`` is the whole
    record as written (counts, timings), which ``status`` shows as it is."""

    run_id: str | None
    inputs: dict  # the InputsFingerprint JSON of the run ("count": the run-wide input count)
    settings: dict | None  # OutputSettings JSON
    fn_name: str | None
    fn_code: str | None  # digest of the code of the fn that finished the run ("" / None: unknown)
    failed_inputs: tuple[tuple[int, int], ...]  # [input id, outputs committed] of skipped inputs
    items_added: int | None
    data: dict = field(compare=False, repr=False)
    mode: str | None = None  # create, append, overwrite or retry
    fn: FnIdentity = field(default=FnIdentity(name=""))  # the fn that finished it (name and code only, older records)
    inputs_history: tuple[str, ...] = ()  # digests of the inputs of every run the dataset holds

    @classmethod
    def from_json(cls, data: object, where: str) -> RunRecord:
        """Raises CorruptStateError naming ``where`` and the safe fix (delete the record)."""
        fix = f"delete {where} (it only describes the last finished run; the dataset is not affected) and rerun"
        if not isinstance(data, dict):
            raise CorruptStateError(f"run record {where} is not a JSON object; {fix}")
        failed = data.get("failed_inputs", [])
        inputs = data.get("inputs")
        count = inputs.get("count") if isinstance(inputs, dict) else None  # run-wide: what failed ids index
        if (
            not isinstance(failed, list)
            or not isinstance(inputs, dict)
            or type(count) is not int
            or not 0 <= count <= MAX_INPUTS
            or not all(
                isinstance(p, list) and len(p) == 2 and all(type(x) is int and x >= 0 for x in p) and p[0] < count
                for p in failed
            )
        ):
            raise CorruptStateError(f"run record {where} has an invalid input count or failed-input list; {fix}")
        settings = data.get("settings")
        items_added = data.get("items_added")
        history = data.get("inputs_history")
        if history is None:  # written before inputs_history existed: the run's own inputs at least
            try:
                history = [InputsFingerprint.from_json(inputs).digest()]
            except (KeyError, ValueError, TypeError):
                history = []
        if (
            not isinstance(history, list)
            or len(history) > MAX_INPUTS_HISTORY
            or not all(isinstance(h, str) and len(h) <= 64 for h in history)
        ):
            raise CorruptStateError(f"run record {where} has an invalid inputs_history; {fix}")
        fn_json = data.get("fn_identity")
        fn = (
            FnIdentity.from_json(fn_json, where)
            if fn_json is not None
            else FnIdentity(
                name=_optional_str(data.get("fn_name")) or "", code=_optional_str(data.get("fn_code")) or ""
            )
        )
        return cls(
            run_id=_optional_str(data.get("run_id")),
            inputs=inputs,
            settings=settings if isinstance(settings, dict) else None,
            fn_name=_optional_str(data.get("fn_name")),
            fn_code=_optional_str(data.get("fn_code")),
            failed_inputs=tuple((p[0], p[1]) for p in failed),
            items_added=items_added if type(items_added) is int else None,
            data=data,
            mode=_optional_str(data.get("mode")),
            fn=fn,
            inputs_history=tuple(history),
        )

    @classmethod
    def of_run(
        cls,
        manifest: Manifest,
        chunks: list[ChunkEntry],
        failed: list[list[int]],
        finisher: FnIdentity | None,
        previous: RunRecord | None = None,
    ) -> RunRecord:
        """The record of ``manifest``'s run, which published ``chunks`` and skipped ``failed``.

        ``finisher`` is the identity of the fn that finished the run (a fixed fn resuming a
        failed run), so that rerunning the call that finished it is a no-op; merge (no fn at
        hand) records the manifest's. ``previous`` is the record it replaces: its
        ``inputs_history`` is carried on (see :func:`inputs_history`)."""
        fn = finisher if finisher is not None else manifest.fn()
        new = [c for c in chunks if chunk_generation(c.filename) == manifest.generation]
        now = time.time()
        data = {
            "failed_inputs": sorted(failed),
            "state": "complete",
            "run_id": manifest.run_id,
            "generation": manifest.generation,
            "mode": manifest.mode,
            "inputs": manifest.inputs,
            "num_inputs": manifest.num_inputs,
            "settings": manifest.settings.to_json(),
            "items": sum(c.chunk_size for c in chunks),
            "items_added": sum(c.chunk_size for c in new),
            "chunks": len(chunks),
            "chunks_added": len(new),
            "started_at": manifest.created_at,
            "finished_at": now,
            "seconds": now - manifest.created_at,
            "published_by": host_identity(),
            "fn_name": fn.name,
            "fn_code": fn.code,
            "fn_identity": fn.to_json(),
            "inputs_history": inputs_history(manifest, previous)[-MAX_INPUTS_HISTORY:],
        }
        return cls.from_json(data, f"the run record of run {manifest.run_id}")

    def to_json(self) -> dict:
        return dict(self.data)


def inputs_history(manifest: Manifest, previous: RunRecord | None) -> list[str]:
    """Digests of the inputs of every run whose outputs the dataset holds after ``manifest``'s
    run: a new dataset (create, overwrite) starts the list, an append (or incremental run) extends it, a retry (the
    same inputs again) keeps it. An append of inputs on this list is refused (decide)."""
    earlier = (
        list(previous.inputs_history)
        if previous is not None and manifest.mode in ("append", "retry", "incremental")
        else []
    )
    mine = InputsFingerprint.from_json(manifest.inputs).digest()
    return earlier + ([mine] if mine not in earlier else [])


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def read_run_record(storage: Storage) -> RunRecord | None:
    """run.json of the last finished run, checked: it decides what a rerun retries."""
    try:
        data = read_state(storage, RUN_RECORD_KEY, "run record")
    except FileNotFoundError:
        return None
    where = f"{storage.url}/{RUN_RECORD_KEY}"
    try:
        record = loads_object(data, "run record", storage, RUN_RECORD_KEY)
    except CorruptStateError:
        record = None  # from_json says what is wrong and what to do
    return RunRecord.from_json(record, where)


def write_run_record(storage: Storage, record: RunRecord) -> None:
    storage.write_bytes(RUN_RECORD_KEY, dumps(record.to_json()))

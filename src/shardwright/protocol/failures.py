"""Per-input failure records (on_error="skip"): why an input failed, one file per input and run."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..storage import Storage
from .jsonio import dumps
from .layout import FAILED_PREFIX, failure_key, parse_failure_key


@dataclass(frozen=True)
class FailureRecord:
    """Details of one input that failed every attempt in one run (one file per input and run).

    Informational: which inputs failed is committed by the commit records' ``failed`` lists
    (so a failure is counted once, with the chunk that follows it); these files carry the why.
    """

    input_index: int
    input_repr: str
    exception_type: str
    message: str
    traceback: str
    host: str
    pid: int
    node: int
    attempts: int
    generation: int
    time: float

    def key(self) -> str:
        return failure_key(self.input_index, self.generation)


def write_failure(storage: Storage, record: FailureRecord) -> None:
    storage.write_bytes(record.key(), dumps(asdict(record)))


def forget_resolved_failures(storage: Storage, still_failed: set[int]) -> None:
    """Detail records of inputs that no longer fail (a retry or a resume succeeded) go."""
    for key in storage.list(FAILED_PREFIX):
        index = parse_failure_key(key)
        if index is not None and index not in still_failed:
            storage.delete(key)

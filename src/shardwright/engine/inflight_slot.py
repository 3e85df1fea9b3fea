"""One input in flight (engine.inflight): its :class:`Slot` holds the input's outputs until
the reorder buffer hands them to the shard's writer in input order, and where it resumes: the
last ResumePoint's state and how many outputs came before it."""

from __future__ import annotations

import json

from . import call_count
from .calls import AttemptHistory

__all__ = ["Slot"]


class Slot:
    """One input of the shard from its start until its outputs reach the writer.

    ``base``: outputs of the input committed before this run (a record cut inside it);
    ``items``: its encoded outputs since, numbered ``base`` on; ``point``: the JSON text of
    the last ResumePoint (None: none yet) and ``point_outputs`` the outputs before it: an
    attempt resumed there yields output number ``point_outputs`` first, and outputs below
    ``produced`` are skipped (already here). ``failures``: failed attempts since progress."""

    __slots__ = (
        "attempts",
        "base",
        "calls",
        "done",
        "history",
        "failed",
        "failures",
        "fatal",
        "input_id",
        "items",
        "point",
        "point_outputs",
        "position",
        "value",
    )

    def __init__(self, position: int, input_id: int, value: object, base: int):
        self.position = position
        self.input_id = input_id
        self.value = value
        self.base = base
        self.items: list[bytes] = []
        self.point: str | None = None
        self.point_outputs = 0
        self.done = False
        self.failed = False  # on_error="skip" gave up on it: no outputs, a failure record
        self.failures = 0
        self.attempts = 0
        self.history: AttemptHistory | None = None  # every failed attempt (engine.calls), from the first failure
        self.fatal: BaseException | None = None  # our own error (a sample that cannot be encoded): stops the run
        self.calls = call_count.InputCalls()  # its calls in flight under a Limiter (status)

    @property
    def produced(self) -> int:
        return self.base + len(self.items)

    def resume_kwargs(self) -> tuple[dict, int]:
        """fn's keyword arguments for the next attempt, and the number of its first output."""
        if self.point is None:
            return {}, 0
        return {"resume": json.loads(self.point)}, self.point_outputs

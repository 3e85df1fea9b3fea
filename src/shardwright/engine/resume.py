"""What fn is (a plain function, ``async def``, an async generator) and ``ResumePoint``, the
marker a generator fn yields between samples so that an interrupted input resumes there.

A fn is classified once, when the call is validated (and again in each worker process, which
gets fn itself): an error about fn's shape is one clear line before anything is written, not
a worker's failure on its first input.
"""

from __future__ import annotations

import functools
import inspect
import json
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentTypeError, UsageError
from ..protocol.progress import MAX_RESUME_STATE_BYTES  # stored with every progress snapshot

__all__ = ["MAX_RESUME_STATE_BYTES", "FnKind", "ResumePoint", "classify_fn", "resume_state_json"]


SYNC, ASYNC, ASYNC_GEN = "sync", "async", "asyncgen"


def resume_state_json(state: object) -> str:
    """``state`` as compact JSON, or a UsageError naming what is wrong with it. Only JSON's own
    types are accepted (dict with str keys, list, str, int, float, bool, None), so the state
    fn gets back on resume equals the one it yielded; NaN and infinities are refused."""
    try:
        text = json.dumps(state, separators=(",", ":"), allow_nan=False, ensure_ascii=False, default=_refuse)
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"ResumePoint(state): state must be JSON (dict, list, str, int, float, bool, None); {exc}"
        ) from None
    except RecursionError:  # the limit of the encoder's recursion, far past MAX_RESUME_STATE_BYTES anyway
        raise UsageError(
            "ResumePoint(state): state is nested too deeply to be JSON; keep it small and flat (e.g. {'page': 17})"
        ) from None
    if len(text) > MAX_RESUME_STATE_BYTES:  # before it is parsed back: its size is the first thing wrong
        raise UsageError(
            f"ResumePoint(state): state is more than {MAX_RESUME_STATE_BYTES:,} bytes of JSON; keep it small (where to "
            "resume, e.g. {'page': 17}), not the data itself"
        )
    if json.loads(text) != state:  # e.g. a tuple (JSON has only lists) or a dict with int keys
        raise UsageError(
            "ResumePoint(state): state must be plain JSON that reads back equal (lists, not tuples; str dict "
            f"keys); got {_short(state)}"
        )
    size = len(text.encode("utf-8"))
    if size > MAX_RESUME_STATE_BYTES:
        raise UsageError(
            f"ResumePoint(state): state is {size:,} bytes of JSON, more than {MAX_RESUME_STATE_BYTES:,}; keep it "
            "small (where to resume, e.g. {'page': 17}), not the data itself"
        )
    return text


def _refuse(value: object) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON ({_short(value)})")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ResumePoint:
    """Yielded by a generator fn between samples: "everything before this is done; to go on
    from here, call me again with ``resume=state``".

    ``state`` is small JSON (at most 4 KB), e.g. ``{"page": 17}``. After an interruption
    (Ctrl-C, SIGTERM, a crash, a retry of a failed attempt) fn is called as
    ``fn(input, resume=state)`` with the last state it yielded and recorded, and yields the
    samples after it; the samples it yielded before that ResumePoint are never asked for
    again. fn must accept the keyword (``def fn(doc, resume=None)``).
    """

    __slots__ = ("state", "text")

    def __init__(self, state: object):
        self.text = resume_state_json(state)  # checked here: fn's own line is in the traceback
        self.state = json.loads(self.text)  # a copy: fn may change its own object afterwards

    def __repr__(self) -> str:
        return f"ResumePoint({self.text})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResumePoint) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


@dataclass(frozen=True)
class FnKind:
    """How fn is called: ``mode`` is "sync" (a plain function or generator function: run in
    threads when inputs are in flight together), "async" (``async def``: awaited, one sample
    or None) or "asyncgen" (an async generator: many samples). ``accepts_resume``: fn takes
    ``resume=`` (so it may yield ResumePoints)."""

    mode: str
    accepts_resume: bool

    @property
    def is_async(self) -> bool:
        return self.mode != SYNC


def _unwrap(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def classify_fn(fn: object) -> FnKind:
    """fn's kind, or a UsageError when fn takes ``resume`` in a way it cannot be given."""
    if not callable(fn):
        raise ArgumentTypeError(f"fn must be callable (a function of one input); got {type(fn).__name__}")
    target = _unwrap(fn)
    # an instance whose class defines ``async def __call__``: its method says what it is
    call = None if inspect.isroutine(target) or inspect.isclass(target) else type(target).__call__
    if inspect.isasyncgenfunction(target) or (call is not None and inspect.isasyncgenfunction(call)):
        mode = ASYNC_GEN
    elif inspect.iscoroutinefunction(target) or (call is not None and inspect.iscoroutinefunction(call)):
        mode = ASYNC
    else:
        mode = SYNC
    try:
        signature = inspect.signature(fn)  # of fn itself: a partial's bound arguments are gone from it
    except (TypeError, ValueError):  # a builtin without a signature: it cannot take resume=
        return FnKind(mode, False)
    resume = signature.parameters.get("resume")
    if resume is None:  # fn(x, **options) takes it too
        takes = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
        return FnKind(mode, takes)
    if resume.kind is inspect.Parameter.POSITIONAL_ONLY or resume.kind is inspect.Parameter.VAR_POSITIONAL:
        raise UsageError(
            "fn's resume parameter must be a keyword parameter (def fn(x, *, resume=None)): shardwright passes "
            "resume=state after a ResumePoint"
        )
    if resume.default is inspect.Parameter.empty:
        raise UsageError(
            "fn's resume parameter needs a default (def fn(x, resume=None)): an input that never yielded a "
            "ResumePoint is called as fn(x), without it"
        )
    return FnKind(mode, True)

"""Calls in flight per input, for ``shardwright status`` (``doc007.txt: page 17, 3 calls in
flight``): the in-flight machinery binds each attempt of an input to its counter, and a
:class:`~shardwright.engine.limits.Limiter` slot counts itself there while its call runs.

Only calls made under a Limiter are counted: the engine sees no other call fn makes. The
binding is a context variable, so it follows the attempt's asyncio task, and the thread a
plain fn runs in (not threads fn starts itself). The count is for people: a torn read of it
costs nothing.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

__all__ = ["InputCalls", "bind", "call_ended", "call_started", "unbind"]


class InputCalls:
    """The calls one input has in flight now."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


_current: ContextVar[InputCalls | None] = ContextVar("shardwright_input_calls", default=None)


def bind(calls: InputCalls) -> Token:
    """The attempt running in this context is ``calls``'s input's (undo with :func:`unbind`)."""
    return _current.set(calls)


def unbind(token: Token) -> None:
    _current.reset(token)


def call_started() -> InputCalls | None:
    """A call starts in this context: counted for its input (None: no input bound here)."""
    calls = _current.get()
    if calls is not None:
        calls.count += 1
    return calls


def call_ended(calls: InputCalls | None) -> None:
    if calls is not None:
        calls.count = max(0, calls.count - 1)

"""Executors: where a call's shards run. ``"local"`` is the engine itself (this machine, or
this node of a Slurm or Kubernetes run); others register here by name (``cluster`` registers
``"ray"``), so the engine never imports their code: it looks them up when a call names one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..errors import UsageError
from .options import OptimizeOptions

if TYPE_CHECKING:
    from .result import OptimizeResult

LOCAL = "local"


@dataclass(frozen=True)
class ExecutorCall:
    """An optimize() call, validated, handed to an executor."""

    fn: Callable
    inputs: Sequence
    output_dir: str
    options: OptimizeOptions
    started: float  # time.monotonic() when optimize() was called


class Executor(Protocol):
    def run(self, call: ExecutorCall) -> OptimizeResult: ...


# name -> (factory, how to install what it needs): a factory imports the executor's code
# (and its third-party package) only when a call names it
_registry: dict[str, tuple[Callable[[], Executor], str]] = {}


def register_executor(name: str, factory: Callable[[], Executor], install_hint: str = "") -> None:
    _registry[name] = (factory, install_hint)


def executor_names() -> list[str]:
    return [LOCAL, *sorted(_registry)]


def get_executor(name: str) -> Executor:
    """The executor registered as ``name``; a UsageError naming the known ones otherwise."""
    if name not in _registry:
        known = ", ".join(repr(n) for n in executor_names())
        raise UsageError(f"executor={name!r} is not known; use one of {known}")
    factory, hint = _registry[name]
    try:
        return factory()
    except ImportError as exc:
        raise UsageError(f"executor={name!r} needs a package that is not installed ({exc}); {hint}") from None

"""Executors: where a call's shards run. ``"local"`` is the engine itself (this machine, or
this node of a Slurm or Kubernetes run); others register here by name (``cluster`` registers
``"ray"``), so the engine never imports their code: it looks them up when a call names one.

An executor only runs shards. Everything before and after the work (the output, the node
lease, the attempt log, deciding what the output needs, publishing, the result) is the
driver's (``engine/driver.py``), once for every executor: as Ray's job manager owns a job's
life and its supervisor only runs the entrypoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import UsageError
from ..protocol.lease import Lease
from ..protocol.manifest import Manifest
from ..protocol.records import ShardProgress
from ..storage import Storage
from .attempts import AttemptLog
from .inputs import RunInputs
from .options import OptimizeOptions
from .planning import NodeIdentity

LOCAL = "local"


@dataclass(frozen=True)
class ExecutorCall:
    """An optimize() call, validated, handed to the driver."""

    fn: Callable
    inputs: RunInputs
    output_dir: str
    options: OptimizeOptions
    started: float  # time.monotonic() when optimize() was called


@dataclass(frozen=True)
class Placement:
    """Where an executor runs a call, known before the output is opened."""

    node: NodeIdentity  # the share of the shards the driver's node lease covers
    num_nodes: int  # how many ways the run is split (its default num_shards counts them)
    shared_by: str | None = None  # who else writes the output ("the 3 nodes of ..."), None: nobody
    executor: str | None = None  # recorded in the node lease (None: the local engine)


@dataclass(frozen=True)
class OpenedRun:
    """A run the driver opened for an executor: its manifest created or resumed, under the
    driver's node lease; the executor runs its unfinished shards."""

    call: ExecutorCall
    storage: Storage
    manifest: Manifest
    resumed: bool
    node: NodeIdentity
    lease: Lease
    attempt: AttemptLog


@dataclass(frozen=True)
class ShareTotals:
    """What an executor's shards committed in this call; ``known``: the progress of the
    shards it ran, which publishing need not read again (empty: it reads every shard's)."""

    items: int = 0
    chunks: int = 0
    bytes: int = 0
    failed: int = 0
    known: Mapping[int, ShardProgress] = field(default_factory=dict)


class Executor(Protocol):
    def place(self, call: ExecutorCall) -> AbstractContextManager[Placement]:
        """Checks of the call that only this executor makes, and where it runs, held for the
        whole call (Ray's connection)."""
        ...

    def run_shards(self, run: OpenedRun) -> ShareTotals: ...


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

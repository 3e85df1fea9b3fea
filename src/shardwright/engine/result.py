"""What optimize() returns, and the error it raises for a pool that did not finish."""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass, field

from ..errors import FnError, LeaseLostError, ShardwrightError, WorkerDiedError
from ..process import describe_exit
from ..protocol.layout import FAILED_PREFIX
from ..secrets import redact_url_credentials
from .inputs import RunInputs
from .pool import PoolOutcome
from .progress import Tracker


@dataclass
class OptimizeResult:
    """What one optimize() call did (on this node)."""

    output_dir: str
    items: int  # samples written by this call (this node)
    chunks: int  # chunks written by this call
    bytes: int  # bytes of chunk files written by this call (as stored)
    seconds: float
    resumed: bool  # continued an interrupted run
    published: bool  # index.json written (False: other nodes' shards still pending)
    inputs: int = 0  # inputs of the whole run
    failed: int = 0  # inputs that failed and were skipped (on_error="skip")
    pending_shards: list = field(default_factory=list)
    note: str = ""  # what the plan skipped or left (mode="incremental"), for the user

    def __str__(self) -> str:
        if self.published:
            state = "published"
        elif self.pending_shards:
            state = f"waiting for {len(self.pending_shards)} shard(s) of other nodes"
        else:
            state = "being published by another node that finished at the same moment"
        failed = (
            (
                f"; {self.failed:,} input(s) failed and were skipped (records under "
                f"{self.output_dir}/{FAILED_PREFIX}; rerun the same call to retry them)"
            )
            if self.failed
            else ""
        )
        note = f" ({self.note})" if self.note else ""
        return (
            f"{self.items:,} items in {self.chunks:,} chunks ({self.bytes / 1e6:,.1f} MB) in {self.seconds:.1f} s"
            f"{' (resumed)' if self.resumed else ''}; dataset {state}: {self.output_dir}{failed}{note}"
        )


def raise_for_outcome(outcome: PoolOutcome, inputs: RunInputs, tracker: Tracker) -> None:
    """Raise what the user must see when the pool stopped early; return when it finished."""
    total = tracker.inputs_total
    if outcome.error is not None:
        failure = outcome.error
        original = pickle.loads(failure.pickled_exception) if failure.pickled_exception else None
        if failure.kind == "fn":
            index = failure.input_index
            value = redact_url_credentials(inputs.display_name(index))
            tb = redact_url_credentials(failure.traceback)  # a URL with credentials in fn's message
            message = redact_url_credentials(failure.message)
            raise FnError(
                f"fn raised on input {index:,} ({value}) in worker {failure.wid}: {message}. Committed work "
                f"is kept: fix fn or the input and rerun the same call to resume.\n--- worker traceback ---\n{tb}",
                input_index=index,
                input_repr=value,
                worker_traceback=tb,
            ) from original
        if isinstance(original, ShardwrightError):
            raise original
        raise ShardwrightError(
            f"worker {failure.wid} failed: {failure.message}\n--- worker traceback ---\n{failure.traceback}"
        ) from original
    if outcome.dead_worker is not None:
        dead = outcome.dead_worker
        index = dead.input_index
        where = f"input {index:,} ({inputs.display_name(index)})" if 0 <= index < len(inputs) else "start-up"
        raise WorkerDiedError(
            f"worker {dead.wid} (pid {dead.pid}) {describe_exit(dead.exitcode)} while processing {where}; the other "
            f"workers were stopped and committed work is kept ({tracker.inputs_done():,} of {total:,} inputs done). "
            "Fix the cause (memory? a crash in fn?) and rerun the same call to resume"
        )
    if outcome.aborted is not None:
        raise LeaseLostError(f"stopped: {outcome.aborted}")
    if outcome.interrupted_by is not None:
        line = f"Interrupted: {tracker.inputs_done():,} of {total:,} inputs done. Rerun the same call to resume."
        print(line, file=sys.stderr, flush=True)
        if "ipykernel" in sys.modules or hasattr(sys, "ps1"):
            raise KeyboardInterrupt(line)
        raise SystemExit(128 + outcome.interrupted_by)


def empty_run_note(fn_name: str, inputs: int, failed: int, url: str) -> str:
    """The warning of a run that added 0 items: what failed when inputs failed (on_error="skip"),
    else the likely cause, a fn that forgot ``return``."""
    if failed:
        return (
            f"the run added 0 items: {failed:,} of the {inputs:,} input(s) failed in fn {fn_name} "
            f"(on_error='skip'); see result.failures or {url}/.shardwright/failed for why, fix fn or the "
            "inputs and rerun"
        )
    return (
        f"fn {fn_name} returned no sample for any of the {inputs:,} input(s): the run added 0 items. Did fn "
        "forget `return`? Fix it and rerun (the changed fn is detected)"
    )

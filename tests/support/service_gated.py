"""A pipeline that waits on a file before each input, so a test can change the world while a
job runs (`shardwright serve --pipelines support.service_gated`)."""

from __future__ import annotations

import os
import time

from pydantic import BaseModel, Field


class GateConfig(BaseModel):
    """Wait on a file before each input (tests change the world while a job runs)."""

    started: str = Field(..., description="created when the first input starts")
    gate: str = Field(..., description="each input waits until this file exists (60 s at most)")


def gated(item, config: GateConfig):
    """An int as {"i": i}, a listed file as {"name", "data"}: after the gate opens."""
    if not os.path.exists(config.started):
        open(config.started, "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(config.gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    if isinstance(item, int):
        return {"i": item}
    return {"name": os.path.basename(item.path), "data": item.read()}


def echo(i):
    return {"i": i}


class AfterConfig(BaseModel):
    """Each job process runs ``free`` inputs, then waits on a file before each of the others."""

    gate: str = Field(..., description="inputs after the first ``free`` wait until this file exists (120 s at most)")
    free: int = Field(..., ge=0, description="inputs each process runs before it waits")


_run_here = [0]  # inputs this process has run


def gated_after(i: int, config: AfterConfig):
    """{"i": i}: at once for the process's first ``free`` inputs, after the gate opens for the rest."""
    _run_here[0] += 1
    if _run_here[0] > config.free:
        deadline = time.monotonic() + 120
        while not os.path.exists(config.gate) and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"i": i}

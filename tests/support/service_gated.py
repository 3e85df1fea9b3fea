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

"""Pipelines for the jobs-service tests (`shardwright serve --pipelines support.service_pipelines`)."""

from __future__ import annotations

import os
import signal
import time

from pydantic import BaseModel, Field


class SquareConfig(BaseModel):
    """How to square."""

    factor: int = Field(1, ge=1, le=1000, description="multiply the square by this")
    sleep: float = Field(0.0, ge=0, le=5, description="seconds to sleep per input")
    fail_on: int | None = Field(None, description="raise on this input (a user error)...")
    unless_exists: str | None = Field(None, description="...unless this file exists (the fix)")
    pid_dir: str | None = Field(None, description="each worker writes its pid here (so tests can kill one)")
    kill_runner_on: int | None = Field(
        None, description="SIGKILL the job process on this input (the OOM killer's way)..."
    )
    once_marker: str | None = Field(None, description="...once: only while this file does not exist (created then)")
    holds: dict[int, str] = Field(
        {}, description="{input: gate file}: inputs from that one on wait until the file exists (polled)"
    )


def square(i: int, config: SquareConfig):
    """Square an int: {"i": i, "sq": i*i*factor}."""
    if config.pid_dir:
        path = os.path.join(config.pid_dir, str(os.getpid()))
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(str(i))
    for first, gate in config.holds.items():  # held steps: the job is certainly running while a test acts
        deadline = time.monotonic() + 120
        while i >= first and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)  # a short wait at a time: the worker still takes its signals
    if config.sleep:
        time.sleep(config.sleep)
    if config.kill_runner_on == i and config.once_marker and not os.path.exists(config.once_marker):
        open(config.once_marker, "w").close()
        os.kill(os.getppid(), signal.SIGKILL)  # the worker's parent: the job process, dead without a word
    if config.fail_on == i and not (config.unless_exists and os.path.exists(config.unless_exists)):
        raise ValueError(f"input {i} is bad (test failure)")
    return {"i": i, "sq": i * i * config.factor}


def echo(i):
    """Write each input as is: {"i": i}."""
    return {"i": i}


def _helper(i):  # private: not a pipeline
    return i


def two_args(a, b):  # no config model: not a pipeline
    return a

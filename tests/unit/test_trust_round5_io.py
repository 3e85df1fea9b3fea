"""Trust round 5, I/O-bound fns: a ResumePoint state nested past the JSON encoder's recursion is
one UsageError line (a raw RecursionError before); backoff() never returns a wait that sleep
cannot take, whatever retry_after a caller passes it (1e300, inf, nan)."""

from __future__ import annotations

import math
import random

import pytest

from shardwright.engine.calls import LONGEST_RETRY_AFTER, backoff
from shardwright.engine.resume import ResumePoint
from shardwright.errors import UsageError


def test_a_deeply_nested_state_is_one_line():
    state: list = []
    cur = state
    for _ in range(5000):
        cur.append([])
        cur = cur[0]
    with pytest.raises(UsageError, match="nested too deeply"):
        ResumePoint(state)


@pytest.mark.parametrize("hostile", [1e300, math.inf, math.nan, -math.inf, -5.0])
def test_backoff_bounds_any_retry_after(hostile):
    delay = backoff(1, 0.5, 10.0, random.Random(1), retry_after=hostile)
    assert math.isfinite(delay) and 0.0 <= delay <= LONGEST_RETRY_AFTER * 1.1


# litdata states imported from a file someone handed over


def litdata_state(**fields) -> dict:
    base = {
        "num_samples_yielded": 8, "num_workers": 2, "batch_size": 4, "world_size": 1, "drop_last": False,
        "input_dir_path": "/d", "current_epoch": 1, "shuffle": False, "sample_in_epoch": 8,
    }  # fmt: skip
    return {**base, **fields}


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"drop_last": "false"}, "'drop_last' is 'false', not true or false"),  # a truthy str: another split
        ({"world_size": 1 << 40, "num_workers": 1 << 40}, "'world_size'"),  # 2^80 counts allocated before
        ({"num_workers": 1 << 30}, "'num_workers'"),
        ({"batch_size": 1 << 40}, "'batch_size'"),
    ],
)
def test_a_hostile_litdata_state_is_one_line(fields, words):
    from shardwright.errors import ResumeStateError
    from shardwright.reader.litdata_state import read_ranges

    with pytest.raises(ResumeStateError) as info:
        read_ranges(litdata_state(**fields), 100)
    assert words in str(info.value)

"""Calls in flight per input (engine.call_count): a Limiter slot counts itself for the input its
attempt is bound to, the lease carries the counts, and status prints them (issue 32 item 6)."""

from __future__ import annotations

import asyncio
import json

from shardwright.engine import call_count
from shardwright.engine.limits import Limiter
from shardwright.protocol.lease import HolderFields, LeaseHolder
from shardwright.protocol.status import InputInProgress


def test_a_limiter_slot_counts_for_the_input_bound_to_its_task_only():
    limiter = Limiter()
    mine, other = call_count.InputCalls(), call_count.InputCalls()

    async def attempt(calls: call_count.InputCalls, held: asyncio.Event, release: asyncio.Event) -> None:
        token = call_count.bind(calls)
        try:
            async with limiter.slot(), limiter.slot():
                held.set()
                await release.wait()
        finally:
            call_count.unbind(token)

    async def main() -> None:
        held, release = asyncio.Event(), asyncio.Event()
        task = asyncio.ensure_future(attempt(mine, held, release))
        await held.wait()
        assert (mine.count, other.count) == (2, 0)
        async with limiter.slot():  # no input bound here: counted nowhere
            assert mine.count == 2
        release.set()
        await task

    asyncio.run(main())
    assert mine.count == 0
    with limiter.slot_sync():
        pass  # nothing bound: nothing to count, nothing raised


def test_a_failed_call_is_no_longer_in_flight():
    calls = call_count.InputCalls()
    token = call_count.bind(calls)
    try:
        try:
            with Limiter().slot_sync():
                assert calls.count == 1
                raise TimeoutError
        except TimeoutError:
            pass
    finally:
        call_count.unbind(token)
    assert calls.count == 0


def test_the_lease_carries_each_inputs_calls_and_status_prints_them():
    fields = HolderFields(current_inputs=(3, 4), current_states=('{"page": 17}', ""), current_calls=(3, 1))
    holder = LeaseHolder.from_json(json.loads(json.dumps(fields.to_json())), "lease")
    assert holder.current_calls == (3, 1)
    assert LeaseHolder.from_json({"current_calls": [2, "x", -1, True]}, "lease").current_calls == (2, 0, 0, 0)
    entry = InputInProgress(3, "doc007.txt", 0, "host", '{"page": 17}', True, 3)
    assert entry.describe() == "doc007.txt: page 17, 3 calls in flight"
    assert InputInProgress(4, "doc008.txt", 1, "host", None, True, 1).describe() == "doc008.txt: 1 call in flight"
    assert InputInProgress(5, "doc009.txt", 1, "host", '{"page": 2}').describe() == "doc009.txt: page 2"

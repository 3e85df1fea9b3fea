"""The driver (engine/driver.py) with a fake executor on the memory backend: what it does
before and after the work is the same whatever runs the shards, so an incremental run's
note reaches the result, a storage outage leaves the node lease to expire instead of
asking the store again, and a run that added no item warns."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator

import pytest

from shardwright.engine.driver import drive
from shardwright.engine.executors import ExecutorCall, OpenedRun, Placement, ShareTotals
from shardwright.engine.inputs import run_inputs
from shardwright.engine.options import OptimizeOptions
from shardwright.engine.planning import NodeIdentity
from shardwright.errors import StorageError
from shardwright.format import ItemEncoder
from shardwright.protocol.claim import claim_format, read_format
from shardwright.protocol.commit import PendingChunk, RoundSettings, commit_round
from shardwright.protocol.layout import lease_key
from shardwright.protocol.records import load_progress
from shardwright.storage import MemoryStorage, open_storage


def value(v: object) -> dict:
    return {"v": v}


@pytest.fixture
def url() -> Iterator[str]:
    name = f"driver-{uuid.uuid4().hex[:8]}"
    yield f"memory://{name}"
    MemoryStorage.drop(name)


class FakeExecutor:
    """Runs every unfinished shard in this process: each input one item (``items=False``:
    none), one chunk per input; or fails with ``outage`` after cutting the store off."""

    def __init__(self, items: bool = True, outage: list | None = None):
        self.items, self.outage = items, outage  # outage: the (operation, key) pairs the store was asked
        self.ran = 0

    @contextlib.contextmanager
    def place(self, call: ExecutorCall) -> Iterator[Placement]:
        yield Placement(NodeIdentity(0, 1, "a test"), 1)

    def run_shards(self, run: OpenedRun) -> ShareTotals:
        self.ran += 1
        storage, manifest, values = run.storage, run.manifest, run.call.inputs.values
        if self.outage is not None:
            asked = self.outage
            assert isinstance(storage, MemoryStorage)
            storage.fail_when(lambda op, key: asked.append((op, key)) or StorageError(f"injected outage ({op})"))
            raise StorageError("the store stopped answering")
        settings = RoundSettings(manifest.run_id, manifest.generation, None, True)
        encoder = ItemEncoder()
        if self.items:
            known = read_format(storage, manifest.run_id)
            if known is None:
                encoder.encode(value(values[0]), 0)
                claim_format(storage, manifest.run_id, list(encoder.data_format or []), encoder.data_spec, 0)
            else:
                encoder = ItemEncoder(known["data_format"], known["data_spec"])
        items = 0
        for p in load_progress(storage, manifest.shard_bounds(), manifest.run_id, repair=True).values():
            if not self.items:
                commit_round(storage, [PendingChunk(p.shard, p.next_seq, [], p.next_input, p.end, 0, True)], settings)
                continue
            for k in range(p.end - p.next_input):
                position = p.next_input + k
                ids = manifest.input_ranges
                source = position if ids is None else _position(ids, position)
                item = encoder.encode(value(values[source]), position)
                job = PendingChunk(p.shard, p.next_seq + k, [item], position, position + 1, 0, position + 1 == p.end)
                commit_round(storage, [job], settings)
                items += 1
            storage.barrier()
        return ShareTotals(items=items, chunks=items)


def _position(ranges: list, k: int) -> int:
    """The k-th position the run's input ranges name."""
    for a, b in ranges:
        if k < b - a:
            return a + k
        k -= b - a
    raise IndexError(k)


def call(url: str, values: list, **options: object) -> ExecutorCall:
    validated = OptimizeOptions.validate(value, chunk_size=1, num_shards=2, verbose=False, **options)  # type: ignore[arg-type]
    return ExecutorCall(value, run_inputs(values), url, validated, time.monotonic())


def test_an_incremental_run_carries_its_plan_note_into_the_result(url):
    first = drive(call(url, ["a", "b", "c"]), FakeExecutor())
    assert first.published and first.items == 3 and first.note == ""
    again = drive(call(url, ["a", "b", "c", "d", "e"], mode="incremental"), FakeExecutor())
    assert again.published and again.items == 2
    assert "3 input(s) already in the dataset" in again.note, "the plan's note is in the result"
    executor = FakeExecutor()
    nothing_new = drive(call(url, ["a", "b", "c", "d", "e"], mode="incremental"), executor)
    assert executor.ran == 0 and nothing_new.items == 0 and nothing_new.note


def test_after_a_storage_outage_the_lease_is_left_to_expire(url):
    asked: list[tuple[str, str | None]] = []
    with pytest.raises(StorageError, match="stopped answering"):
        # the executor cuts the store off, then fails: the attempt log cannot be written either
        drive(call(url, [1, 2, 3]), FakeExecutor(outage=asked))
    assert any(op == "write_bytes" for op, _key in asked), "the attempt log was tried"
    lease = lease_key("node-0")
    assert not [op for op, key in asked if key == lease and op in ("read_versioned", "delete")], (
        "no release was asked of a store that stopped answering"
    )
    storage = open_storage(url)
    assert isinstance(storage, MemoryStorage)
    storage.clear_faults()
    assert storage.exists(lease), "the lease expires on its own"


def test_a_published_run_that_added_no_item_warns(url, caplog):
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        result = drive(call(url, [1, 2, 3, 4]), FakeExecutor(items=False))
    assert result.published and result.items == 0
    assert "returned no sample for any of the 4 input(s)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        drive(call(f"{url}-full", [1, 2]), FakeExecutor())
    assert "returned no sample" not in caplog.text
    MemoryStorage.drop(url.removeprefix("memory://") + "-full")


def test_one_driver_holds_the_sequence_around_the_work():
    """No executor re-runs the driver: the calls of the lease/attempt/publish sequence are
    made in engine/driver.py only (the protocol defines them; ``shardwright merge`` publishes
    a finished run by its own command)."""
    import re
    from pathlib import Path

    import shardwright

    root = Path(shardwright.__file__).parent
    calls = re.compile(r"\b(publish_if_complete|AttemptLog|open_call)\(|\.confirm\(\)")
    found = {
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        for line in path.read_text().splitlines()
        if calls.search(line) and not line.lstrip().startswith(("def ", "class "))
    }
    assert found == {"engine/driver.py", "protocol/publish.py"}, found

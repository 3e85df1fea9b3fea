"""The worker's hot loop takes the compiled encoder as soon as the first sample fixes the
format (issue 36): before, a worker's first shard sent every sample through the format gate
(the general encoder, ~3x the cost of an item) until the loop's next look 20 ms later."""

from __future__ import annotations

import os

import shardwright
from shardwright.engine import worker
from shardwright.engine.shard_writer import FormatGate


def small_dict(i):
    return {"i": i, "x": i * i}


def test_the_gate_encodes_only_the_first_sample(tmp_path, monkeypatch):
    calls = tmp_path / "gate-calls"
    original = FormatGate.encode

    def counted(self, sample, input_index):
        # the workers are forked from this process: each call appends a line, in any process
        fd = os.open(calls, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b"%d\n" % input_index)
        finally:
            os.close(fd)
        return original(self, sample, input_index)

    monkeypatch.setattr(FormatGate, "encode", counted)
    # no look during the run (the loop's 20 ms clock): only the fix can take the compiled
    # encoder before the first shard ends, whatever the machine's load
    monkeypatch.setattr(worker, "STOP_CHECK_INTERVAL", 3600.0)
    out = tmp_path / "out"
    shardwright.optimize(small_dict, list(range(3_000)), str(out), num_workers=1, verbose=False)

    assert calls.read_text().split() == ["0"]  # the sample that fixed the format, and no other
    ds = shardwright.StreamingDataset(str(out))
    assert len(ds) == 3_000
    assert ds[2_999] == {"i": 2_999, "x": 2_999 * 2_999}

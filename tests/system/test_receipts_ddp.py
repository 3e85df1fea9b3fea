"""Receipts under real torch.distributed (gloo on loopback, DataLoader worker processes): an
epoch read on 2 ranks, stopped, resumed on 3 ranks, stopped, and finished on 1 rank reads every
sample exactly once, and epoch_report() — gathered from every rank — says so."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from shardwright import StreamingDataLoader, StreamingDataset, optimize  # noqa: E402

N = 600


def sample(i: int) -> dict:
    return {"i": i}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loader(data: str) -> StreamingDataLoader:
    return StreamingDataLoader(
        StreamingDataset(data, shuffle=True, seed=5), batch_size=8, num_workers=2, drop_last=False
    )


def _rank(rank: int, world: int, port: int, data: str, out: str, state_file: str, batches: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        loader = _loader(data)
        if Path(state_file).exists():
            loader.load_state_dict(json.loads(Path(state_file).read_text()))
        seen: list[int] = []
        state = None
        for k, batch in enumerate(loader):
            seen += [int(v) for v in batch["i"]]
            if k + 1 == batches:
                state = loader.state_dict()
                break
        report = loader.epoch_report()  # a collective: every rank calls it
        Path(out, f"{world}-{rank}.json").write_text(
            json.dumps({"seen": seen, "state": state, "exactly_once": report.exactly_once, "ranks": report.ranks})
        )
    finally:
        dist.destroy_process_group()


def _world(world: int, data: str, tmp: Path, batches: int) -> list[dict]:
    state_file = str(tmp / "state.json")
    args = (world, _port(), data, str(tmp), state_file, batches)
    torch.multiprocessing.spawn(_rank, args=args, nprocs=world, join=True)
    records = [json.loads((tmp / f"{world}-{r}.json").read_text()) for r in range(world)]
    Path(state_file).write_text(json.dumps(records[0]["state"]))  # rank 0's, as a training script saves
    return records


@pytest.mark.slow
def test_an_epoch_on_2_then_3_ranks_then_1_reads_every_sample_once(tmp_path):
    data = str(tmp_path / "data")
    optimize(sample, list(range(N)), data, chunk_size=20, num_workers=1, verbose=False)
    two = _world(2, data, tmp_path, 5)
    assert two[0]["state"] == two[1]["state"], "every rank's state is the same"
    assert not any(r["exactly_once"] for r in two) and {r["ranks"] for r in two} == {2}
    three = _world(3, data, tmp_path, 4)
    assert {r["ranks"] for r in three} == {3}
    last = StreamingDataLoader(StreamingDataset(data, shuffle=True, seed=5), batch_size=8, drop_last=False)
    last.load_state_dict(json.loads((tmp_path / "state.json").read_text()))
    rest = [int(v) for batch in last for v in batch["i"]]
    seen = [i for world in (two, three) for r in world for i in r["seen"]] + rest
    assert sorted(seen) == list(range(N)), "each sample read once across the three layouts"
    report = last.epoch_report()
    assert report.exactly_once and report.seen == N and report.ranks == 1, report

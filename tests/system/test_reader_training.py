"""The reader as training uses it: chunk-aware shuffle through real DataLoader workers (fork,
spawn, persistent), real torch.distributed (gloo, 2 ranks x 2 workers), exact resume after
SIGKILL in real processes (other num_workers, other world size), torchdata's
StatefulDataLoader, token blocks, weighted mixing."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardwright import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset, optimize  # noqa: E402
from shardwright.reader import ResumeStateError  # noqa: E402
from support.helpers import child_env, kill_group, wait_for  # noqa: E402

N, PER_CHUNK = 1200, 50  # 24 chunks


def make(i: int) -> dict:
    return {"i": i, "x": np.full(8, i % 251, dtype=np.uint8)}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train") / "ds"
    optimize(make, list(range(N)), str(out), chunk_size=PER_CHUNK, num_shards=4, num_workers=2, verbose=False)
    return out


def ids_collate(batch: list) -> dict:
    info = torch.utils.data.get_worker_info()
    return {"ids": [int(x["i"]) for x in batch], "worker": info.id if info is not None else 0}


def read_epoch(loader) -> list[dict]:
    return list(loader)


def chunk_loads(ids: list[int], keep: int) -> int:
    """Chunk loads a reader with an LRU of ``keep`` decoded chunks makes for this order."""
    lru: OrderedDict = OrderedDict()
    loads = 0
    for i in ids:
        c = i // PER_CHUNK
        if c in lru:
            lru.move_to_end(c)
            continue
        loads += 1
        lru[c] = True
        if len(lru) > keep:
            lru.popitem(last=False)
    return loads


# --- shuffle ---------------------------------------------------------------------------------


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_shuffle_with_locality_and_epochs(data, context):
    ds = StreamingDataset(data, shuffle=True, seed=3, shuffle_window=4)
    loader = StreamingDataLoader(
        ds,
        batch_size=10,
        num_workers=2,
        collate_fn=ids_collate,
        multiprocessing_context=context,
        persistent_workers=True,
    )
    orders = []
    for _epoch in range(2):
        batches = read_epoch(loader)
        ids = [i for b in batches for i in b["ids"]]
        assert sorted(ids) == list(range(N)), "every item exactly once per epoch"
        assert ids != list(range(N))
        orders.append(ids)
        total_loads = 0
        for w in (0, 1):
            mine = [i for b in batches if b["worker"] == w for i in b["ids"]]
            total_loads += chunk_loads(mine, keep=6)
            same = sum(a // PER_CHUNK == b // PER_CHUNK for a, b in zip(mine, mine[1:])) / (len(mine) - 1)
            assert same < 0.45, f"worker {w}: {same:.0%} of neighbours share a chunk"
            tail = mine[-100:]  # the end of the epoch mixes too
            assert sum(a // PER_CHUNK == b // PER_CHUNK for a, b in zip(tail, tail[1:])) / 99 < 0.6
        assert total_loads <= 1.25 * (N // PER_CHUNK), f"{total_loads} chunk loads for {N // PER_CHUNK} chunks"
    assert orders[0] != orders[1], "set_epoch (done by the loader) must change the order"
    assert loader.current_epoch == 2  # litdata's count: epochs started


@pytest.mark.parametrize("override", [False, True])
def test_persistent_workers_read_each_epoch_in_its_own_order(data, override):
    """The loader's shuffle= override makes a copy of the dataset: it keeps an epoch counter
    the persistent workers share (copy.copy dropped it: every epoch in the first one's order)."""
    ds = StreamingDataset(data) if override else StreamingDataset(data, shuffle=True)
    extra = {"shuffle": True} if override else {}
    loader = StreamingDataLoader(
        ds, batch_size=64, num_workers=2, persistent_workers=True, collate_fn=ids_collate, **extra
    )
    orders = [[i for b in loader for i in b["ids"]] for _ in range(3)]
    assert len({tuple(o) for o in orders}) == 3, "each epoch has its own order"
    assert all(sorted(o) == sorted(orders[0]) for o in orders)


def test_plain_dataloader_and_set_epoch(data):
    ds = StreamingDataset(data, shuffle=True, seed=5)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=8, num_workers=2, collate_fn=ids_collate, persistent_workers=True
    )
    seen = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        ids = [i for b in loader for i in b["ids"]]
        assert sorted(ids) == list(range(N))
        seen.append(ids)
    assert len({tuple(s) for s in seen}) == 3, "persistent workers must see set_epoch"
    ds.set_epoch(1)
    assert [i for b in loader for i in b["ids"]] == seen[1], "an epoch's order is a function of seed and epoch"


def test_unshuffled_iteration_is_in_order_and_map_style_kept(data):
    ds = StreamingDataset(data)
    assert not isinstance(ds, torch.utils.data.IterableDataset)
    assert [x["i"] for x in ds] == list(range(N))
    batches = list(StreamingDataLoader(ds, batch_size=7, num_workers=2, collate_fn=ids_collate))
    assert sorted(i for b in batches for i in b["ids"]) == list(range(N))
    assert sum(len(b["ids"]) % 7 != 0 for b in batches) <= 1, "only the last batch of a rank may be partial"


def test_environment_ranks_split_and_drop(data, monkeypatch):
    per_rank = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        ds = StreamingDataset(data)  # world_size > 1: iterable, drop_last by default
        assert isinstance(ds, torch.utils.data.IterableDataset)
        batches = list(StreamingDataLoader(ds, batch_size=16, num_workers=2, collate_fn=ids_collate))
        per_rank.append(batches)
    counts = [len(b) for b in per_rank]
    assert len(set(counts)) == 1, f"ranks yield {counts} batches"
    ids = [i for batches in per_rank for b in batches for i in b["ids"]]
    assert len(ids) == len(set(ids)) and N - len(ids) < 3
    chunks = [{i // PER_CHUNK for b in batches for i in b["ids"]} for batches in per_rank]
    assert all(len(c) <= N // PER_CHUNK / 3 + 2 for c in chunks), [len(c) for c in chunks]
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ValueError, match="RANK=5 is not within WORLD_SIZE=3"):
        StreamingDataset(data)


def test_pad_gives_equal_ranks_and_reads_everything(tmp_path, monkeypatch):
    out = tmp_path / "odd"
    optimize(make, list(range(101)), str(out), chunk_size=10, num_workers=1, verbose=False)
    ids, counts = [], []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        batches = list(StreamingDataLoader(StreamingDataset(out, pad=True), batch_size=4, collate_fn=ids_collate))
        counts.append(len(batches))
        ids += [i for b in batches for i in b["ids"]]
    assert counts[0] == counts[1] and set(ids) == set(range(101)) and len(ids) == 102


# --- resume ----------------------------------------------------------------------------------


def consume(loader, batches: int) -> list[int]:
    out = []
    it = iter(loader)
    for _ in range(batches):
        out += next(it)["ids"]
    return out


@pytest.mark.parametrize(("workers_before", "workers_after", "batch_after"), [(2, 2, 10), (2, 3, 10), (0, 2, 6)])
def test_resume_mid_epoch_in_a_new_loader(data, workers_before, workers_after, batch_after):
    ds = StreamingDataset(data, shuffle=True, seed=11)
    first = StreamingDataLoader(ds, batch_size=10, num_workers=workers_before, collate_fn=ids_collate)
    seen = consume(first, 37)
    state = json.loads(json.dumps(first.state_dict()))
    assert len(json.dumps(state)) < 2000
    again = StreamingDataLoader(
        StreamingDataset(data, shuffle=True, seed=11),
        batch_size=batch_after,
        num_workers=workers_after,
        collate_fn=ids_collate,
    )
    again.load_state_dict(state)
    rest = [i for b in again for i in b["ids"]]
    assert sorted(seen + rest) == list(range(N))
    if workers_before == workers_after and batch_after == 10:  # same layout: the very same order
        full = [
            i
            for b in StreamingDataLoader(
                StreamingDataset(data, shuffle=True, seed=11),
                batch_size=10,
                num_workers=workers_before,
                collate_fn=ids_collate,
            )
            for i in b["ids"]
        ]
        assert seen + rest == full
    # The next epoch after the resumed one is a whole new epoch.
    assert sorted(i for b in again for i in b["ids"]) == list(range(N))


def test_resume_state_of_another_dataset_is_refused(data, tmp_path):
    loader = StreamingDataLoader(StreamingDataset(data, shuffle=True, seed=1), batch_size=10, collate_fn=ids_collate)
    consume(loader, 2)
    state = loader.state_dict()
    other = StreamingDataLoader(StreamingDataset(data, shuffle=True, seed=2), batch_size=10)
    with pytest.raises(ResumeStateError, match="another dataset or other order options"):
        other.load_state_dict(state)
    damaged = json.loads(json.dumps(state))
    damaged["position"]["single"]["consumed"] = [10**12]
    with pytest.raises(ResumeStateError):
        StreamingDataLoader(StreamingDataset(data, shuffle=True, seed=1), batch_size=10).load_state_dict(damaged)


def test_elastic_resume_two_ranks_to_one(data, monkeypatch):
    seen = []
    state = None
    for rank in range(2):  # two ranks in lockstep: 9 batches each, then the job stops
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        loader = StreamingDataLoader(
            StreamingDataset(data, shuffle=True, seed=4), batch_size=10, num_workers=2, collate_fn=ids_collate
        )
        seen += consume(loader, 9)
        state = state or loader.state_dict()
        assert loader.state_dict() == state, "every rank's state is the same"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    resumed = StreamingDataLoader(
        StreamingDataset(data, shuffle=True, seed=4, iterable=True), batch_size=7, num_workers=3, collate_fn=ids_collate
    )
    resumed.load_state_dict(state)
    rest = [i for b in resumed for i in b["ids"]]
    assert len(seen) + len(rest) == N and sorted(seen + rest) == list(range(N))


def test_stateful_dataloader(data):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    ds = StreamingDataset(data, shuffle=True, seed=8)
    loader = stateful.StatefulDataLoader(ds, batch_size=10, num_workers=2, collate_fn=ids_collate)
    it = iter(loader)
    seen = [i for _ in range(23) for i in next(it)["ids"]]
    state = loader.state_dict()
    del it, loader
    ds2 = StreamingDataset(data, shuffle=True, seed=8)
    again = stateful.StatefulDataLoader(ds2, batch_size=10, num_workers=2, collate_fn=ids_collate)
    again.load_state_dict(state)
    rest = [i for b in again for i in b["ids"]]
    assert sorted(seen + rest) == list(range(N))


TRAIN_CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    from shardwright import StreamingDataLoader, StreamingDataset
    data, state_path, log_path, epochs, workers = sys.argv[1:6]
    epochs, workers = int(epochs), int(workers)

    def ids(batch):
        return [int(x["i"]) for x in batch]

    loader = StreamingDataLoader(StreamingDataset(data, shuffle=True, seed=21), batch_size=16,
                                 num_workers=workers, collate_fn=ids)
    if os.path.exists(state_path):
        with open(state_path) as f:
            saved = json.load(f)
        loader.load_state_dict(saved["loader"])
        with open(log_path, "r+") as f:  # drop what was logged after the last saved state
            f.truncate(saved["log_bytes"])
    # TRAIN_HOLD="N logged|saved MARK": after this run's N-th batch is logged (its state not
    # saved yet) or saved, create MARK and wait there until the test kills the process
    hold, made = os.environ.get("TRAIN_HOLD", "").split(), 0

    def held(where):
        if hold and made == int(hold[0]) and hold[1] == where:
            open(hold[2], "w").close()
            threading.Event().wait()

    while loader.state_dict()["position"]["single"]["epoch"] < epochs:  # the epoch the next iteration reads
        epoch = loader.state_dict()["position"]["single"]["epoch"]
        for batch in loader:
            made += 1
            with open(log_path, "a") as f:
                f.write(json.dumps([epoch, batch]) + "\\n")
            held("logged")
            state = {"loader": loader.state_dict(), "log_bytes": os.path.getsize(log_path)}
            with open(state_path + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(state_path + ".tmp", state_path)
            held("saved")
            time.sleep(0.01)
        if loader.state_dict()["position"]["single"]["epoch"] != epoch + 1:
            raise SystemExit("the loader must be at the next epoch after a full one")
    print("done")
""")


@pytest.mark.slow
def test_sigkill_and_resume_loop(data, tmp_path):
    """Kill a training process at random batches, resume from its last state in a new process
    (num_workers changes between runs): over 2 epochs, every item exactly once per epoch. Each
    killed run holds at its batch (TRAIN_HOLD) until the kill, alternately between the batch's
    log line and its saved state (the resume drops that line) and after both: the kills land
    there at any load."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN_CHILD)
    state, log = str(tmp_path / "state.json"), str(tmp_path / "log.jsonl")
    Path(log).write_text("")
    rng = random.Random(7)
    progress = []
    for run in range(5):  # four runs killed at random batches of their training, then one that finishes
        workers = rng.choice([0, 1, 2])
        mark = tmp_path / f"held-{run}"
        # at most 4 x 20 of the 2 x 75 batches: the last run always has some left
        hold = f"{rng.randint(1, 20)} {('logged', 'saved')[run % 2]} {mark}" if run < 4 else ""
        proc = subprocess.Popen(
            [sys.executable, str(script), str(data), state, log, "2", str(workers)],
            env=child_env(TRAIN_HOLD=hold),
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if run < 4:
            assert wait_for(lambda p=proc, m=mark: p.poll() is not None or m.exists(), 300), "never held"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            kill_group(proc, signal.SIGKILL)
            proc.communicate()
            progress.append(os.path.getsize(log))
            continue
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0 and "done" in out, err[-3000:]
        break
    else:
        pytest.fail("training never finished")
    assert len(progress) == 4 and progress[0] > 0, "the loop must really kill the trainer mid-training"
    per_epoch: dict = {0: Counter(), 1: Counter()}
    with open(state) as f:
        size = json.load(f)["log_bytes"]
    with open(log) as f:
        text = f.read()[:size]
    for line in text.splitlines():
        epoch, batch = json.loads(line)
        per_epoch[epoch].update(batch)
    for epoch, counts in per_epoch.items():
        assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}, f"epoch {epoch}"


# --- torch.distributed -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_rank(rank: int, world: int, port: int, data: str, out_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        ds = StreamingDataset(data, shuffle=True, seed=9)
        loader = StreamingDataLoader(ds, batch_size=12, num_workers=2, collate_fn=ids_collate, persistent_workers=True)
        record = {"epochs": [], "states": []}
        for _epoch in range(2):
            batches = []
            for b in loader:
                batches.append(b["ids"])
                # Every rank must have a batch at every step: a rank that ran out would hang here.
                t = torch.tensor([len(b["ids"])])
                dist.all_reduce(t)
                if len(batches) == 3:
                    record["states"].append(loader.state_dict())
            record["epochs"].append(batches)
        Path(out_dir, f"{rank}.json").write_text(json.dumps(record))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_two_ranks_two_workers(data, tmp_path):
    port = _free_port()
    torch.multiprocessing.spawn(_ddp_rank, args=(2, port, str(data), str(tmp_path)), nprocs=2, join=True)
    records = [json.loads(Path(tmp_path, f"{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        per_rank = [records[r]["epochs"][epoch] for r in range(2)]
        assert len(per_rank[0]) == len(per_rank[1])
        ids = [i for batches in per_rank for b in batches for i in b]
        assert len(ids) == len(set(ids)) == N  # 1200 items split evenly: nothing dropped
        chunks = [{i // PER_CHUNK for b in batches for i in b} for batches in per_rank]
        assert all(len(c) <= N // PER_CHUNK // 2 + 1 for c in chunks), [len(c) for c in chunks]
    e0 = [i for r in range(2) for b in records[r]["epochs"][0] for i in b]
    e1 = [i for r in range(2) for b in records[r]["epochs"][1] for i in b]
    assert e0 != e1
    assert records[0]["states"] == records[1]["states"], "ranks save the same state"


# --- tokens and mixing ---------------------------------------------------------------------------


def test_combined_mix_is_deterministic_and_resumable(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    optimize(make, list(range(300)), str(a), chunk_size=20, num_workers=1, verbose=False)
    optimize(make, list(range(1000, 1100)), str(b), chunk_size=20, num_workers=1, verbose=False)

    def loader(workers: int, batch: int = 8):
        mix = CombinedStreamingDataset(
            [StreamingDataset(a, shuffle=True), StreamingDataset(b, shuffle=True)], weights=[0.5, 0.5], seed=3
        )
        return StreamingDataLoader(mix, batch_size=batch, num_workers=workers, collate_fn=ids_collate)

    full = [i for bt in loader(2) for i in bt["ids"]]
    assert sorted(full) == list(range(300)) + list(range(1000, 1100))
    assert full == [i for bt in loader(2) for i in bt["ids"]], "deterministic"
    head = full[:120]
    assert 40 <= sum(i >= 1000 for i in head) <= 80, "weights 0.5/0.5 mix both from the start"
    first = loader(2)
    seen = consume(first, 11)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = loader(3, batch=5)
    resumed.load_state_dict(state)
    rest = [i for bt in resumed for i in bt["ids"]]
    assert sorted(seen + rest) == sorted(full)


def test_combined_resume_on_another_world_size(tmp_path, monkeypatch):
    """litdata refuses this (a combined dataset's state only resumes on the same world size)."""
    a, b = tmp_path / "a", tmp_path / "b"
    optimize(make, list(range(200)), str(a), chunk_size=20, num_workers=1, verbose=False)
    optimize(make, list(range(1000, 1160)), str(b), chunk_size=20, num_workers=1, verbose=False)

    def loader(workers: int):
        mix = CombinedStreamingDataset(
            [StreamingDataset(a, shuffle=True), StreamingDataset(b, shuffle=True)], weights=[2, 1], seed=5
        )
        return StreamingDataLoader(mix, batch_size=6, num_workers=workers, collate_fn=ids_collate)

    monkeypatch.setenv("WORLD_SIZE", "2")
    seen, state = [], None
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        first = loader(2)
        seen += consume(first, 7)
        state = state or first.state_dict()
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    resumed = loader(1)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    rest = [i for bt in resumed for i in bt["ids"]]
    assert len(seen) + len(rest) == 360 and sorted(seen + rest) == list(range(200)) + list(range(1000, 1160))


def test_resume_jumps_without_reading_what_was_read(data, tmp_path):
    """After the resume point, chunks whose items were all read are deleted: a resume that
    replayed (read and discarded) would fail on them."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    first = StreamingDataLoader(StreamingDataset(copy, shuffle=True, seed=13), batch_size=10, collate_fn=ids_collate)
    seen = consume(first, 45)
    state = first.state_dict()
    left = set(range(N)) - set(seen)
    ds = StreamingDataset(copy, shuffle=True, seed=13)
    needed = {i // PER_CHUNK for i in left}
    gone = [c for k, c in enumerate(ds.chunks) if k not in needed]
    assert len(gone) >= 4, "the test must delete chunks that a replay would read"
    for c in gone:
        (copy / c.filename).unlink()
    again = StreamingDataLoader(ds, batch_size=10, num_workers=2, collate_fn=ids_collate)
    again.load_state_dict(state)
    rest = [i for b in again for i in b["ids"]]
    assert sorted(rest) == sorted(left)

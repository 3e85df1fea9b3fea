"""litdata's names on real datasets, compared with litdata 0.2.76 where it defines the result:
StreamingDataset(input_dir=, max_cache_size=, subsample=, transform=, item_loader=),
StreamingDataLoader(shuffle=, drop_last=, collate_fn=), optimize(batch_size=, fast_dev_run=),
merge_datasets, train_test_split, walk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import shardwright as sw
from shardwright.errors import DatasetExistsError, UsageError

torch = pytest.importorskip("torch")
ld = pytest.importorskip("litdata")


def sample(i: int) -> dict:
    return {"i": i, "v": np.arange(3, dtype=np.int64) + i}


def write(out: Path, n: int = 40, **kwargs) -> Path:
    sw.optimize(sample, list(range(n)), str(out), num_workers=1, verbose=False, **{"chunk_size": 4, **kwargs})
    return out


def ids(items) -> list[int]:
    return [int(item["i"]) for item in items]


def add_one(item: dict) -> dict:
    return {**item, "i": item["i"] + 1000}


def tag_pid(item: dict) -> dict:
    return {**item, "pid": os.getpid()}


def test_input_dir_and_max_cache_size(tmp_path):
    out = write(tmp_path / "d")
    assert len(sw.StreamingDataset(input_dir=str(out))) == 40
    assert len(sw.StreamingDataset(str(out), max_cache_size="1GB")) == 40
    assert len(sw.StreamingDataset(output_dir=str(out))) == 40  # the older name still works
    with pytest.raises(UsageError, match="refused: encrypted"):
        sw.StreamingDataset(str(out), encryption=object())


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("fraction", [0.5, 0.3, 1.5])
def test_subsample_selects_litdatas_items(tmp_path, shuffle, fraction):
    out = write(tmp_path / "d", 38)
    ours = sw.StreamingDataset(str(out), subsample=fraction, shuffle=shuffle, seed=3)
    theirs = ld.StreamingDataset(str(out), subsample=fraction, shuffle=shuffle, seed=3)
    assert len(ours) == len(theirs)
    assert sorted(ids(ours[i] for i in range(len(ours)))) == sorted(ids(theirs))
    assert sorted(ids(ours)) == sorted(ids(theirs))
    again = sw.StreamingDataset(str(out), subsample=fraction, shuffle=shuffle, seed=3)
    assert ids(again) == ids(sw.StreamingDataset(str(out), subsample=fraction, shuffle=shuffle, seed=3))


def test_subsample_resumes_mid_epoch(tmp_path):
    out = write(tmp_path / "d", 40)
    ds = sw.StreamingDataset(str(out), subsample=0.5, shuffle=True, seed=1)
    loader = sw.StreamingDataLoader(ds, batch_size=2)
    it = iter(loader)
    first = [next(it) for _ in range(3)]
    state = loader.state_dict()
    rest = list(it)
    resumed = sw.StreamingDataLoader(sw.StreamingDataset(str(out), subsample=0.5, shuffle=True, seed=1), batch_size=2)
    resumed.load_state_dict(state)
    again = list(resumed)
    assert [b["i"].tolist() for b in again] == [b["i"].tolist() for b in rest]
    seen = [x for b in first + rest for x in b["i"].tolist()]
    assert len(seen) == 20 and len(set(seen)) == 20


def test_transform_runs_per_item_in_the_worker(tmp_path):
    out = write(tmp_path / "d", 12)
    ds = sw.StreamingDataset(str(out), transform=[add_one, tag_pid])
    assert ds[3]["i"] == 1003
    loader = sw.StreamingDataLoader(ds, batch_size=4, num_workers=2)
    batches = list(loader)
    assert sorted(x for b in batches for x in b["i"].tolist()) == [1000 + i for i in range(12)]
    assert {p for b in batches for p in b["pid"].tolist()} - {os.getpid()}  # ran in the workers


def test_litdatas_tokens_loader_is_accepted(tmp_path):
    out = tmp_path / "tok"
    sw.optimize(lambda i: np.arange(i * 10, i * 10 + 10, dtype=np.int32), list(range(5)), str(out),
                num_workers=1, verbose=False, chunk_size=2, item_loader=ld.TokensLoader())  # fmt: skip
    ours = sw.StreamingDataset(str(out), item_loader=ld.TokensLoader(block_size=5))
    theirs = ld.StreamingDataset(str(out), item_loader=ld.TokensLoader(block_size=5))
    assert len(ours) == len(theirs) == 10
    assert all(np.array_equal(np.asarray(ours[i]), np.asarray(theirs[i])) for i in range(10))


def test_loader_shuffle_and_drop_last_override_the_dataset(tmp_path):
    out = write(tmp_path / "d", 10)
    ds = sw.StreamingDataset(str(out))
    plain = [x for b in sw.StreamingDataLoader(ds, batch_size=4) for x in b["i"].tolist()]
    assert plain == list(range(10))
    shuffled = [x for b in sw.StreamingDataLoader(ds, batch_size=4, shuffle=True) for x in b["i"].tolist()]
    assert sorted(shuffled) == list(range(10)) and shuffled != plain
    assert ds.shuffle is False  # the loader's override leaves the dataset as it is
    dropped = list(sw.StreamingDataLoader(ds, batch_size=4, drop_last=True))
    assert [len(b["i"]) for b in dropped] == [4, 4]
    back = sw.StreamingDataLoader(sw.StreamingDataset(str(out), shuffle=True), batch_size=4, shuffle=False)
    assert [x for b in back for x in b["i"].tolist()] == plain


def test_default_collate_is_litdata_collate_and_batches_graphs(tmp_path):
    out = tmp_path / "g"
    sw.optimize(lambda i: {"g": sw.Graph(x=torch.full((2, 2), float(i)), edge_index=torch.tensor([[0], [1]])), "i": i},
                list(range(6)), str(out), num_workers=1, verbose=False, chunk_size=3)  # fmt: skip
    batch = next(iter(sw.StreamingDataLoader(sw.StreamingDataset(str(out)), batch_size=3)))
    pyg = pytest.importorskip("torch_geometric.data")
    assert isinstance(batch["g"], pyg.Batch) and batch["g"].num_graphs == 3
    assert batch["i"].tolist() == [0, 1, 2]
    custom = next(iter(sw.StreamingDataLoader(sw.StreamingDataset(str(out)), batch_size=2, collate_fn=list)))
    assert [item["i"] for item in custom] == [0, 1]


def test_optimize_batch_size_and_fast_dev_run(tmp_path):
    out = tmp_path / "b"
    sw.optimize(lambda batch: {"n": len(batch), "first": batch[0]}, list(range(10)), str(out),
                num_workers=1, verbose=False, batch_size=4, chunk_size=2)  # fmt: skip
    assert [(x["n"], x["first"]) for x in sw.StreamingDataset(str(out))] == [(4, 0), (4, 4), (2, 8)]
    dev = tmp_path / "dev"
    sw.optimize(sample, list(range(100)), str(dev), num_workers=1, verbose=False, fast_dev_run=True)
    assert ids(sw.StreamingDataset(str(dev))) == list(range(10))
    with pytest.raises(UsageError, match="Lightning AI's platform"):
        sw.optimize(sample, [1], str(tmp_path / "m"), machine="A10G")
    assert not (tmp_path / "m").exists()  # refused before anything is written


def test_merge_datasets_exactly_once(tmp_path):
    a, b = write(tmp_path / "a", 9), write(tmp_path / "b", 5)
    out = tmp_path / "merged"
    sw.merge_datasets([str(a), str(b)], str(out))
    merged = sw.StreamingDataset(str(out))
    assert ids(merged) == list(range(9)) + list(range(5))
    assert ids(ld.StreamingDataset(str(out))) == ids(merged)
    sw.merge_datasets([str(a), str(b)], str(out))  # a rerun of a finished merge: nothing happens
    assert ids(sw.StreamingDataset(str(out))) == ids(merged)
    with pytest.raises(UsageError, match="listed twice"):
        sw.merge_datasets([str(a), str(a)], str(tmp_path / "twice"))
    with pytest.raises(UsageError, match="is one of the input_dirs"):
        sw.merge_datasets([str(a), str(b)], str(a))
    with pytest.raises(DatasetExistsError):
        sw.merge_datasets([str(b), str(a)], str(out))
    # A merge killed after copying chunks (no index.json yet) is finished by rerunning it.
    partial = tmp_path / "partial"
    sw.merge_datasets([str(a), str(b)], str(partial))
    (partial / "index.json").unlink()
    (partial / json.loads((out / "index.json").read_text())["chunks"][-1]["filename"]).unlink()
    with pytest.raises(sw.IncompleteDatasetError if hasattr(sw, "IncompleteDatasetError") else FileNotFoundError):
        sw.StreamingDataset(str(partial))
    sw.merge_datasets([str(a), str(b)], str(partial))
    assert ids(sw.StreamingDataset(str(partial))) == ids(merged)


@pytest.mark.parametrize("shuffle", [False, True])
def test_train_test_split_matches_litdata(tmp_path, shuffle):
    out = write(tmp_path / "d", 37)
    ours = sw.train_test_split(sw.StreamingDataset(str(out)), [0.6, 0.3, 0.1], seed=5, shuffle=shuffle)
    theirs = ld.train_test_split(ld.StreamingDataset(str(out)), [0.6, 0.3, 0.1], seed=5, shuffle=shuffle)
    assert [len(x) for x in ours] == [len(x) for x in theirs] == [22, 11, 3]
    for mine, lit in zip(ours, theirs):
        assert sorted(ids(mine)) == sorted(ids(lit))
    everything = [x for part in ours for x in ids(part)]
    assert len(set(everything)) == len(everything)  # disjoint
    assert ids(sw.train_test_split(sw.StreamingDataset(str(out)), [0.6], seed=5, shuffle=shuffle)[0]) == ids(ours[0])


def test_walk(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x.txt").write_text("x")
    (tmp_path / "y.txt").write_text("y")
    got = list(sw.walk(str(tmp_path)))
    assert got == [
        (str(tmp_path), ["a"], ["y.txt"]),
        (str(tmp_path / "a"), ["b"], ["x.txt"]),
        (str(tmp_path / "a" / "b"), [], []),
    ]
    assert sorted(os.walk(tmp_path)) == sorted(got)
    for i in range(12):  # names in the directory's order, as os.walk (and litdata's walk) list them
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / f"f{i}.txt").write_text("z")
        (tmp_path / f"f{i}.txt").write_text("z")
    assert sorted(os.walk(tmp_path)) == sorted(sw.walk(str(tmp_path)))

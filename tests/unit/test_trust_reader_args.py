"""The reader's arguments are strict, and its one-line fixes: booleans that are not bools,
cache_dir="", fsspec-style storage_options, overflowing mix weights, empty epochs and token
datasets shorter than one block (issue 14: BAD 6 and the reader's POOR lines)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright import CombinedStreamingDataset, StreamingDataset
from shardwright.errors import ArgumentTypeError, CorruptStateError, UsageError
from support.datasets import write_dataset


def loader_class():
    """StreamingDataLoader is a torch DataLoader: tests of it skip where torch is not installed
    (the unit layer also runs on Pythons with the core dependencies only)."""
    return pytest.importorskip("shardwright.reader.loader").StreamingDataLoader


@pytest.fixture
def dataset(tmp_path):
    out = tmp_path / "ds"
    write_dataset(out, [{"i": i} for i in range(10)], chunk_size=4)
    return out


@pytest.mark.parametrize("name", ["allow_pickle", "shuffle", "pad", "drop_last", "iterable", "check_checksums"])
@pytest.mark.parametrize("value", ["false", "False", 0, 1, "", "no"])
def test_string_or_int_booleans_are_refused_naming_the_argument(dataset, name, value):
    with pytest.raises(ArgumentTypeError, match=rf"^{name} must be True(,| or) False.*got {value!r}"):
        StreamingDataset(dataset, **{name: value})


class Evil:
    """Unpickling this creates a file: code of the dataset's choosing."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_allow_pickle_false_string_never_unpickles(tmp_path):
    target = tmp_path / "pwned"
    out = tmp_path / "p"
    write_dataset(out, [{"x": Evil(str(target))}])
    with pytest.raises(TypeError, match="allow_pickle must be True or False"):
        StreamingDataset(out, allow_pickle="false")[0]
    assert not target.exists()


def test_loader_drop_last_is_strict(dataset):
    with pytest.raises(ArgumentTypeError, match="drop_last must be True, False or None"):
        loader_class()(StreamingDataset(dataset), batch_size=2, drop_last="false")


def test_empty_cache_dir_is_refused(dataset):
    with pytest.raises(UsageError, match="cache_dir is empty"):
        StreamingDataset(dataset, cache_dir="")


def test_fsspec_storage_option_names_get_the_boto3_names(dataset):
    with pytest.raises(UsageError, match=r"'key' -> aws_access_key_id; 'client_kwargs' -> its contents"):
        StreamingDataset("s3://bucket/x", storage_options={"key": "AKIDEXAMPLE", "client_kwargs": {}})


@pytest.mark.parametrize(
    "weights", [[1e308, 1e308], [10**400, 1], [float("inf"), 1], [1, float("nan")], ["1", 2], [True, 1]]
)
def test_combined_weights_that_overflow_or_are_not_numbers_are_refused(dataset, weights):
    a, b = StreamingDataset(dataset), StreamingDataset(dataset)
    with pytest.raises(ValueError, match="weights must be 2 positive"):
        CombinedStreamingDataset([a, b], weights=weights)


def test_fewer_items_than_ranks_with_drop_last_warns_and_every_rank_yields_nothing(tmp_path, monkeypatch):
    out = tmp_path / "three"
    write_dataset(out, [{"i": i} for i in range(3)])
    for rank in range(4):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "4")
        ds = StreamingDataset(out, drop_last=True)
        with pytest.warns(UserWarning, match=r"the epoch is empty: drop_last with 3 items on 4 ranks"):
            batches = list(loader_class()(ds, batch_size=2))
        assert batches == []


def test_tokens_loader_without_a_complete_block_warns(tmp_path):
    from shardwright.format import ChunkEntry, IndexConfig, TokenEncoder, build_chunk, render_index
    from shardwright.reader import TokensLoader

    out = tmp_path / "tokens"
    out.mkdir()
    enc = TokenEncoder()
    item = enc.encode(np.arange(5, dtype=np.int32), 0)
    raw = build_chunk([item])
    (out / "chunk-0.bin").write_bytes(raw)
    config = IndexConfig(None, None, None, enc.data_format, enc.data_spec, item_loader="TokensLoader")
    (out / "index.json").write_bytes(render_index([ChunkEntry("chunk-0.bin", 1, len(raw), dim=5)], config))
    with pytest.warns(UserWarning, match=r"holds 5 tokens, fewer than one block of block_size=8"):
        ds = StreamingDataset(out, item_loader=TokensLoader(block_size=8))
    assert len(ds) == 0


def test_dataset_replaced_under_an_open_reader_says_reopen(tmp_path):
    out = tmp_path / "ds"
    write_dataset(out, [{"i": i} for i in range(8)], chunk_size=4)
    ds = StreamingDataset(out)
    assert ds[0] == {"i": 0}
    for f in out.iterdir():
        f.unlink()
    write_dataset(out, [{"i": -i} for i in range(8)], chunk_size=4, generation=1)  # mode="overwrite" did this
    with pytest.raises(CorruptStateError, match=r"was replaced since it was opened.*reopen it"):
        ds[5]


def test_pickle_leaf_of_a_main_class_warns_at_write_time():
    import __main__
    from shardwright.format import ItemEncoder

    class Point:
        pass

    Point.__module__, Point.__qualname__ = "__main__", "TrustPoint"
    __main__.TrustPoint = Point  # a class defined in the script that runs optimize()
    try:
        with pytest.warns(UserWarning, match=r"input 7: a pickle leaf refers to __main__.TrustPoint.*cannot unpickle"):
            ItemEncoder().encode({"p": Point()}, 7)
    finally:
        del __main__.TrustPoint
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ItemEncoder().encode({"p": {"plain": [1, "__main__"]}}, 8)  # the string alone is no reference

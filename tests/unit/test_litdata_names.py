"""litdata's argument names: pure checks of what each becomes, or the one-line refusal."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright.engine.options import FAST_DEV_RUN_INPUTS, litdata_args
from shardwright.errors import ArgumentTypeError, UsageError
from shardwright.reader.litdata_args import cache_limit, item_loader_of, refuse_litdata_only, transforms_of
from shardwright.reader.subsample import Subsample, check_fraction, split_regions


def test_batch_size_groups_inputs_then_fast_dev_run_cuts():
    args = litdata_args(batch_size=3, fast_dev_run=2, others={})
    assert args.apply(list(range(10))) == [[0, 1, 2], [3, 4, 5]]
    assert litdata_args(fast_dev_run=True, others={}).apply(list(range(50))) == list(range(FAST_DEV_RUN_INPUTS))
    assert litdata_args(batch_size=1, others={}).apply([1, 2]) == [1, 2]
    assert litdata_args(others={}).apply(range(3)) == range(3)


@pytest.mark.parametrize("name", ["machine", "optimize_dns", "broadcast_paths"])
def test_lightning_platform_arguments_are_refused_with_the_reason(name):
    with pytest.raises(UsageError, match="Lightning AI's platform") as caught:
        litdata_args(others={name: 2})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["num_downloaders", "num_uploaders"])
def test_litdata_io_thread_counts_are_accepted_as_tuning_with_a_warning_that_says_why(name):
    with pytest.warns(UserWarning, match=f"{name}=4\\) changes nothing here") as caught:
        litdata_args(others={name: 4})
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    for bad in ("4", 0, True, 2.0):  # still strict: a count of threads
        with pytest.raises((ArgumentTypeError, UsageError), match=name):
            litdata_args(others={name: bad})


@pytest.mark.parametrize("name", ["weights", "key_fn", "encryption", "queue", "reader", "compression_batch_size"])
def test_other_litdata_arguments_are_refused_with_the_reason(name):
    with pytest.raises(UsageError, match=f"optimize\\({name}=...\\) is refused: "):
        litdata_args(others={name: object()})


def test_argument_checks():
    with pytest.raises(ArgumentTypeError, match="unexpected keyword argument 'bogus'"):
        litdata_args(others={"bogus": 1})
    with pytest.raises(ArgumentTypeError, match="batch_size"):
        litdata_args(batch_size="4", others={})
    with pytest.raises(UsageError, match="align_chunking=True: `chunk_size` needs to be defined"):
        litdata_args(align_chunking=True, others={})
    with pytest.raises(UsageError, match="align_chunking requires keep_data_ordered=True"):
        litdata_args(align_chunking=True, chunk_size=8, keep_data_ordered=False, others={})
    litdata_args(align_chunking=True, chunk_size=8, keep_data_ordered=True, reorder_files=False, others={})
    with pytest.raises(UsageError, match="compression_level='batch' is refused"):
        litdata_args(compression_level="batch", others={})
    litdata_args(compression_level="chunk", others={})
    with pytest.raises(UsageError, match="input_dir='s3://b/x' is refused"):
        litdata_args(input_dir="s3://b/x", others={})
    with pytest.raises(ArgumentTypeError, match="keep_data_ordered"):
        litdata_args(keep_data_ordered="yes", others={})


def test_subsample_selection_is_litdatas():
    sizes = [4, 4, 4, 3]
    assert Subsample.of(sizes, 0.5, False, 42).regions == ((0, 0, 4), (1, 0, 3))
    again = Subsample.of(sizes, 0.5, True, 7)
    assert again == Subsample.of(sizes, 0.5, True, 7)  # deterministic
    order = np.random.RandomState([7]).permutation(4).tolist()
    assert [k for k, _, _ in again.regions] == order[: len(again.regions)]
    twice = Subsample.of(sizes, 2.0, False, 42)
    assert sum(twice.group_sizes) == 30 and twice.base(15) == 0 and twice.base(29) == 14
    with pytest.raises(ValueError, match="subsample"):
        check_fraction(0.0)


def test_split_regions_cuts_consecutive_runs():
    runs = split_regions([(0, 0, 4), (1, 0, 4)], [3, 3, 2])
    assert runs == [[(0, 0, 3)], [(0, 3, 4), (1, 0, 2)], [(1, 2, 4)]]


def test_reader_arguments():
    assert cache_limit(None, "2GB", None, 5) == 2 * 1000**3
    assert cache_limit("1MB", None, None, 5) == 1000**2
    assert 0 < cache_limit(None, 0.5, None, 5)
    with pytest.raises(UsageError, match="not both"):
        cache_limit("1MB", "2MB", None, 5)
    assert transforms_of(abs) == (abs,) and transforms_of([abs, str]) == (abs, str)
    with pytest.raises(UsageError, match="callable"):
        transforms_of([abs, 3])
    with pytest.raises(UsageError, match="refused: custom serializers"):
        refuse_litdata_only({"serializers": {}})
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        refuse_litdata_only({"nope": 1})


def test_item_loader_by_name():
    ld = pytest.importorskip("litdata")
    from shardwright import TokensLoader

    assert item_loader_of(ld.TokensLoader(block_size=8)) == TokensLoader(block_size=8)
    assert item_loader_of(TokensLoader(block_size=4)) == TokensLoader(block_size=4)
    from litdata.streaming.item_loader import PyTreeLoader

    assert item_loader_of(PyTreeLoader()) is None
    with pytest.raises(UsageError, match="item_loader=TemporalArrayLoader"):
        item_loader_of(ld.TemporalArrayLoader.__new__(ld.TemporalArrayLoader))


def test_an_unknown_mode_is_named_in_litdatas_words(tmp_path):
    import shardwright as sw

    with pytest.raises(UsageError, match="The provided `mode` should be either `append` or `overwrite`"):
        sw.optimize(fn=str, inputs=[1], output_dir=str(tmp_path / "out"), mode="some-random-mode")
    assert not (tmp_path / "out").exists()  # refused before anything is written

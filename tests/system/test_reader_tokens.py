"""Token datasets: optimize(..., item_loader=TokensLoader()) writes litdata's token layout;
StreamingDataset(..., item_loader=TokensLoader(B)) reads fixed blocks across chunk boundaries;
litdata reads ours and we read litdata's."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardwright import StreamingDataLoader, StreamingDataset, TokensLoader, optimize  # noqa: E402
from shardwright.errors import SampleFormatError, UnsupportedFormatError  # noqa: E402


def doc(i: int) -> np.ndarray:
    """Document i: a run of tokens of varying length, values that say where they come from."""
    n = 5 + (i * 7) % 23
    return (np.arange(n, dtype=np.int32) + i * 100).astype(np.int32)


def tensor_doc(i: int):
    return torch.from_numpy(doc(i).astype(np.int64))


STREAM = np.concatenate([doc(i) for i in range(60)])


@pytest.fixture(scope="module")
def tokens_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok") / "ds"
    optimize(
        doc,
        list(range(60)),
        str(out),
        chunk_size=7,
        num_workers=2,
        num_shards=3,
        item_loader=TokensLoader(),
        verbose=False,
    )
    return out


def test_blocks_cross_chunk_boundaries(tokens_dir):
    ds = StreamingDataset(tokens_dir, item_loader=TokensLoader(block_size=16))
    assert ds.config.item_loader == "TokensLoader" and all(c.dim for c in ds.chunks)
    assert sum(c.dim for c in ds.chunks) == len(STREAM)
    assert len(ds) == len(STREAM) // 16, "at most one partial block (the stream's tail) is left out"
    for i in range(len(ds)):
        block = ds[i]
        assert isinstance(block, np.ndarray) and block.dtype == np.int32
        assert np.array_equal(block, STREAM[i * 16 : (i + 1) * 16])
    crossing = sum(1 for i in range(len(ds)) if len({k for k, _, _ in ds._tokens.pieces(i)}) > 1)
    assert crossing > 5, "the test must exercise blocks that span chunks"


def test_shuffled_blocks_through_a_loader(tokens_dir):
    ds = StreamingDataset(tokens_dir, item_loader=TokensLoader(block_size=9), shuffle=True, seed=1)
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2)
    blocks = [b for batch in loader for b in batch]
    starts = sorted(int(b[0]) for b in blocks)
    expected = sorted(int(STREAM[i * 9]) for i in range(len(STREAM) // 9))
    assert starts == expected and len(blocks) == len(STREAM) // 9


def test_token_dataset_needs_the_loader_and_bad_samples_are_clear(tokens_dir, tmp_path):
    with pytest.raises(UnsupportedFormatError, match="token dataset.*item_loader=shardwright.TokensLoader"):
        StreamingDataset(tokens_dir)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        TokensLoader(block_size=0)
    with pytest.raises(SampleFormatError, match="1-D numpy arrays or torch tensors of tokens"):
        optimize(
            lambda i: {"x": i}, [1, 2], str(tmp_path / "bad"), num_workers=1, item_loader=TokensLoader(), verbose=False
        )


def test_litdata_reads_ours(tokens_dir):
    ld = pytest.importorskip("litdata")
    theirs = ld.StreamingDataset(str(tokens_dir), item_loader=ld.TokensLoader(block_size=8))
    ours = StreamingDataset(tokens_dir, item_loader=TokensLoader(block_size=8))
    starts = np.concatenate([[0], np.cumsum([c.dim for c in ours.chunks])])
    expected = [
        STREAM[s + j * 8 : s + (j + 1) * 8] for c, s in enumerate(starts[:-1]) for j in range(ours.chunks[c].dim // 8)
    ]  # litdata cuts blocks inside each chunk
    got = [np.asarray(theirs[i]) for i in range(len(theirs))]
    assert len(got) == len(expected) and all(np.array_equal(g, e) for g, e in zip(got, expected))
    assert len(ours) >= len(theirs)


def test_we_read_litdatas(tmp_path):
    ld = pytest.importorskip("litdata")
    out = tmp_path / "lit"
    ld.optimize(
        fn=tensor_doc,
        inputs=list(range(40)),
        output_dir=str(out),
        chunk_size=6,
        num_workers=1,
        item_loader=ld.TokensLoader(),
        start_method="fork",
    )
    stream = torch.cat([tensor_doc(i) for i in range(40)])
    ds = StreamingDataset(out, item_loader=TokensLoader(block_size=10))
    assert len(ds) == len(stream) // 10
    for i in range(len(ds)):
        assert isinstance(ds[i], torch.Tensor) and torch.equal(ds[i], stream[i * 10 : (i + 1) * 10])

"""Both directions against the real litdata (0.2.76 in the test env), plus our reader's errors.

(a) chunks written with shardwright.format are read by litdata.StreamingDataset;
(b) datasets written by litdata.optimize are read by shardwright.StreamingDataset;
(c) leaf bytes, dtype codes and chunk bytes equal what litdata's own writer produces.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import zstandard

from shardwright.errors import CorruptStateError, IncompleteDatasetError, UnsupportedFormatError
from shardwright.format import (
    ChunkEntry,
    IndexConfig,
    ItemEncoder,
    build_chunk,
    compress,
    flatten_sample,
    render_index,
)
from shardwright.protocol.layout import STATE_DIR, chunk_filename
from shardwright.protocol.records import CommitRecord, write_records
from shardwright.reader import StreamingDataset
from shardwright.storage import LocalStorage

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ld():
    """litdata, or a clean skip of the litdata tests (our reader's own tests still run)."""
    return pytest.importorskip("litdata")


@pytest.fixture(scope="module")
def ld_zstd(ld):
    # litdata decompresses with the `zstd` (python-zstd) module, not `zstandard`.
    pytest.importorskip("zstd", reason="litdata needs the 'zstd' package to read compressed chunks")
    return ld


# --- helpers ----------------------------------------------------------------------------------


def make_sample(i: int) -> dict:
    return {
        "i": i * 1_000_003 - 2**40,
        "x": i / 7,
        "ok": i % 2 == 0,
        "s": f"sample-{i}-é-日本",
        "b": bytes([i % 256]) * (i % 5),
        "a": np.arange(i % 6, dtype=np.float32) * i,
        "m": np.full((2, 3), i, dtype=np.int16),
        "t": torch.full((3, 2), float(i), dtype=torch.float64),
        "v": torch.arange(i % 4, dtype=torch.int64),
        "nested": {"tup": (i, str(i)), "deeper": {"f": -float(i)}},
        "none": None,
    }


def make_sample_with_list(i: int) -> dict:
    # litdata 0.2.76's optimize turns a list inside a dict into one "json" leaf of its own
    # binary format (shardwright reads it as unsupported), so lists are tested only in (a).
    return {**make_sample(i), "lst": [float(i), -i, [str(i)]]}


def assert_value_equal(got, want, where: str = ""):
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for key in want:
            assert_value_equal(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), where
        for k, (g, w) in enumerate(zip(got, want)):
            assert_value_equal(g, w, f"{where}[{k}]")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want), where
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want), where
    elif isinstance(want, bytes):
        assert bytes(got) == want, where  # litdata hands out memoryviews of its mmap for bytes leaves
    else:
        assert type(got) is type(want) and got == want, where


def write_dataset(
    out: Path, samples: list, per_chunk: int, compression: str | None, minimal: bool = False
) -> list[ChunkEntry]:
    """A dataset written only with shardwright.format, like the writer will."""
    out.mkdir(parents=True, exist_ok=True)
    enc = ItemEncoder()
    entries = []
    for seq, start in enumerate(range(0, len(samples), per_chunk)):
        items = [enc.encode(s, start + k) for k, s in enumerate(samples[start : start + per_chunk])]
        raw = build_chunk(items)
        name = chunk_filename(0, seq % 2, seq, compression)
        (out / name).write_bytes(compress(raw, compression))
        entries.append(ChunkEntry(name, len(items), len(raw)))
    config = IndexConfig(None, per_chunk, compression, enc.data_format, enc.data_spec)
    if minimal:
        # The strict minimum both litdata versions read.
        document = {
            "chunks": [{k: e.to_json()[k] for k in ("chunk_bytes", "chunk_size", "filename")} for e in entries],
            "config": {k: config.to_json()[k] for k in ("data_format", "data_spec", "compression")},
        }
        (out / "index.json").write_text(json.dumps(document))
    else:
        (out / "index.json").write_bytes(render_index(entries, config))
    return entries


def first_of_batch(batch: list):
    return batch[0]


# Module-level so litdata's worker processes can find it.
def litdata_fn(i: int) -> dict:
    return make_sample(i)


def run_optimize(ld, out: Path, n: int, **kwargs) -> None:
    # start_method: litdata force-sets the process-wide start method (spawn by default), which
    # would leak into every later test of the session; fork is Linux's default anyway.
    ld.optimize(
        fn=litdata_fn,
        inputs=list(range(n)),
        output_dir=str(out),
        chunk_size=7,
        num_workers=1,
        keep_data_ordered=True,
        start_method="fork",
        **kwargs,
    )


# --- (a) shardwright writes, litdata reads ----------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_litdata_reads_our_chunks(ld, tmp_path, compression):
    if compression:
        pytest.importorskip("zstd")
    samples = [make_sample_with_list(i) for i in range(40)]
    out = tmp_path / "ours"
    entries = write_dataset(out, samples, per_chunk=9, compression=compression)
    assert len(entries) == 5

    ds = ld.StreamingDataset(str(out))
    assert len(ds) == 40
    for i in range(40):
        assert_value_equal(ds[i], samples[i], f"item {i}")
    iterated = list(ds)  # StreamingDataset iteration (in order without shuffle)
    loader = ld.StreamingDataLoader(ds, batch_size=1, num_workers=0, collate_fn=first_of_batch)
    for seen in (iterated, list(loader)):
        assert len(seen) == 40
        for got, want in zip(seen, samples):
            assert_value_equal(got, want)

    # litdata 0.2.76 decompresses local chunks in place and deletes the .zstd.bin files;
    # our reader must still read the dataset afterwards.
    ours = StreamingDataset(out)
    for i in range(40):
        assert_value_equal(ours[i], samples[i], f"item {i}")


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_minimal_index_keys(ld, tmp_path, compression):
    if compression:
        pytest.importorskip("zstd")
    samples = [{"k": i, "arr": np.arange(i, dtype=np.uint8)} for i in range(10)]
    out = tmp_path / "minimal"
    write_dataset(out, samples, per_chunk=4, compression=compression, minimal=True)
    document = json.loads((out / "index.json").read_text())
    assert set(document) == {"chunks", "config"} and set(document["config"]) == {
        "data_format",
        "data_spec",
        "compression",
    }
    ours = StreamingDataset(out)
    for i in range(10):
        assert_value_equal(ours[i], samples[i])
    ds = ld.StreamingDataset(str(out))
    assert len(ds) == 10
    for i in range(10):
        assert_value_equal(ds[i], samples[i])


# --- (b) litdata writes, shardwright reads ----------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_we_read_litdata_optimize(ld, tmp_path, compression):
    if compression:
        pytest.importorskip("zstd")
    out = tmp_path / "lit"
    # compression_level="chunk" = whole-file zstd (*.zstd.bin), what 0.2.58 reads too.
    run_optimize(ld, out, 30, **({"compression": compression, "compression_level": "chunk"} if compression else {}))
    index = json.loads((out / "index.json").read_text())
    assert index["config"]["compression"] == compression
    assert all(c["filename"].endswith(".zstd.bin" if compression else ".bin") for c in index["chunks"])

    ds = StreamingDataset(out)
    assert len(ds) == 30
    assert [c.chunk_size for c in ds.chunks] == [7, 7, 7, 7, 2]
    for i, got in enumerate(ds):
        assert_value_equal(got, make_sample(i), f"item {i}")
    assert_value_equal(ds[-1], make_sample(29))
    assert [g["i"] for g in ds[3:20:4]] == [make_sample(i)["i"] for i in range(3, 20, 4)]


def test_we_read_litdata_default_zstd(ld_zstd, tmp_path):
    # 0.2.76's compression="zstd" defaults to in-file "batch" frames (0.2.58 cannot read them).
    out = tmp_path / "batch"
    run_optimize(ld_zstd, out, 10, compression="zstd")
    assert json.loads((out / "index.json").read_text())["config"]["compression_level"] == "batch"
    ds = StreamingDataset(out)
    for i in range(10):
        assert_value_equal(ds[i], make_sample(i))


def test_dataloader_with_workers_over_litdata_output(ld, tmp_path):
    out = tmp_path / "lit"
    run_optimize(ld, out, 20)
    ds = StreamingDataset(out)
    assert isinstance(ds, torch.utils.data.Dataset)
    # spawn: workers get a pickled copy of the dataset (fork is covered by the test below).
    loader = torch.utils.data.DataLoader(
        ds, batch_size=3, num_workers=2, collate_fn=list, multiprocessing_context="spawn"
    )
    seen = [sample for batch in loader for sample in batch]
    assert len(seen) == 20
    for i, got in enumerate(seen):
        assert_value_equal(got, make_sample(i))


# --- (c) byte equality with litdata's own serializers -----------------------------------------

TORCH_DTYPES = [
    "float32", "float64", "float16", "bfloat16", "complex64", "complex128",
    "uint8", "int8", "int16", "int32", "int64", "bool", "uint16",
]  # fmt: skip


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_dtype_codes_match_litdata(ld, name):
    from litdata.streaming.serializers import NoHeaderTensorSerializer, TensorSerializer

    dtype = getattr(torch, name)
    lit_code = NoHeaderTensorSerializer()._dtype_to_indices[dtype]  # the code litdata writes
    one_d = torch.arange(5).to(dtype)
    ours = ItemEncoder()
    item = ours.encode(one_d, 0)
    assert ours.data_format == [f"no_header_tensor:{lit_code}"]
    nd = torch.arange(6).reshape(2, 3).to(dtype)
    ours_nd = ItemEncoder()
    item_nd = ours_nd.encode(nd, 0)
    assert ours_nd.data_format == ["tensor"]
    assert struct.unpack(">II", item_nd[4:12]) == (lit_code, 2)

    # litdata's writer goes through numpy and cannot write bfloat16 at all; we can.
    if dtype is not torch.bfloat16:
        lit_bytes, lit_name = NoHeaderTensorSerializer().serialize(one_d)
        assert (item[4:], ours.data_format) == (lit_bytes, [lit_name])
        assert item_nd[4:] == TensorSerializer().serialize(nd)[0]
    # litdata's own deserializers read our bytes back to the same tensors.
    reader = NoHeaderTensorSerializer()
    reader.setup(ours.data_format[0])
    assert torch.equal(reader.deserialize(item[4:]), one_d)
    assert torch.equal(TensorSerializer().deserialize(item_nd[4:]), nd)


@pytest.mark.parametrize(
    "dtype",
    [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
     np.float16, np.float32, np.float64, np.complex64, np.complex128, np.bool_],
)  # fmt: skip
def test_numpy_codes_match_litdata(ld, dtype):
    from litdata.streaming.serializers import NoHeaderNumpySerializer, NumpySerializer

    arr = np.arange(6).astype(dtype)
    _, lit_name = NoHeaderNumpySerializer().serialize(arr)
    enc = ItemEncoder()
    enc.encode(arr, 0)
    assert enc.data_format == [lit_name]
    nd = arr.reshape(2, 3)
    lit_bytes, _ = NumpySerializer().serialize(nd)
    assert ItemEncoder().encode(nd, 0)[4:] == lit_bytes


LEAVES = [
    1, -5, True, False, 2.5, np.float64(1.5), "text", "", b"raw", b"", None, np.int64(3), np.float32(2.0),
    np.bool_(True), np.array(4), np.arange(3, dtype=np.int32), np.ones((2, 2), dtype=np.float64),
    torch.arange(3), torch.ones(2, 2), torch.tensor(1.5), {"set"}, (1, "a"), [np.arange(2)],
]  # fmt: skip


@pytest.mark.parametrize("leaf", LEAVES, ids=range(len(LEAVES)))
def test_item_bytes_equal_litdata_writer(ld, tmp_path, leaf):
    """Same sample -> same data_format, data_spec and item bytes as litdata's BinaryWriter."""
    from litdata.streaming.writer import BinaryWriter

    sample = {"leaf": leaf, "n": 7}
    writer = BinaryWriter(str(tmp_path), chunk_size=10)
    lit_item, _ = writer.serialize(sample)
    enc = ItemEncoder()
    ours = enc.encode(sample, 0)
    if "pickle" in writer._data_format and (
        isinstance(leaf, np.generic) or (isinstance(leaf, np.ndarray) and leaf.ndim == 0)
    ):
        # Deliberate deviation: litdata pickles numpy scalars and 0-d arrays; we store them as
        # int/float/bool or a 0-d "numpy" leaf, so reading them never needs unpickling. litdata
        # reads those bytes back to the same value.
        assert "pickle" not in enc.data_format
        from litdata.streaming.serializers import _SERIALIZERS

        raw = ours[4 * len(enc.data_format) :]
        size = int.from_bytes(ours[:4], "little")
        value = _SERIALIZERS[enc.data_format[0].split(":")[0]].deserialize(raw[:size])
        assert value == leaf and np.asarray(value).dtype.kind == np.asarray(leaf).dtype.kind
        return
    assert enc.data_format == writer._data_format
    assert enc.data_spec == writer.get_config()["data_spec"]
    if "pickle" not in enc.data_format:  # pickles of equal objects may legitimately differ
        assert ours == lit_item
    # And the second sample (litdata's fast path for later samples) matches too.
    assert enc.encode(sample, 1) == writer.serialize(sample)[0] or "pickle" in enc.data_format


def test_chunk_file_bytes_equal_litdata_writer(ld, tmp_path):
    from litdata.streaming.writer import BinaryWriter

    samples = [{"i": i, "s": "x" * i, "a": np.arange(i, dtype=np.float32)} for i in range(7)]
    writer = BinaryWriter(str(tmp_path / "lit"), chunk_size=3)
    for i, s in enumerate(samples):
        writer.add_item(i, s)
    writer.done()
    enc = ItemEncoder()
    items = [enc.encode(s, i) for i, s in enumerate(samples)]
    for k, start in enumerate(range(0, 7, 3)):
        lit_chunk = (tmp_path / "lit" / f"chunk-0-{k}.bin").read_bytes()
        assert build_chunk(items[start : start + 3]) == lit_chunk


# --- our reader: errors and access patterns ---------------------------------------------------


def small_dataset(tmp_path: Path, n: int = 23, per_chunk: int = 5, compression: str | None = None) -> Path:
    out = tmp_path / "ds"
    write_dataset(out, [{"i": i, "s": str(i)} for i in range(n)], per_chunk, compression)
    return out


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_reader_access_patterns(tmp_path, compression):
    ds = StreamingDataset(small_dataset(tmp_path, compression=compression))
    assert len(ds) == 23 and len(ds.chunks) == 5
    assert ds[0] == {"i": 0, "s": "0"} and ds[22]["i"] == 22 and ds[-1]["i"] == 22 and ds[-23]["i"] == 0
    assert ds[np.int64(4)]["i"] == 4
    assert [x["i"] for x in ds] == list(range(23))
    assert [x["i"] for x in ds[3:17:4]] == [3, 7, 11, 15]
    assert [x["i"] for x in ds[::-5]] == [22, 17, 12, 7, 2]
    assert ds[30:] == []
    for bad in (23, -24, 10**9):
        with pytest.raises(IndexError):
            ds[bad]
    with pytest.raises(TypeError):
        ds[1.0]
    # Random access over more chunks than the LRU holds.
    order = [22, 0, 11, 5, 17, 1, 21, 9, 0, 14]
    assert [ds[i]["i"] for i in order] == order


def test_reader_empty_dataset(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    (out / "index.json").write_bytes(render_index([], IndexConfig(None, 10, None, [], None)))
    ds = StreamingDataset(out)
    assert len(ds) == 0 and list(ds) == [] and ds.chunks == []


def test_reader_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        StreamingDataset(tmp_path / "nope")


def test_reader_no_index_is_incomplete(tmp_path):
    out = tmp_path / "half"
    storage = LocalStorage(out)
    for shard, seqs in ((0, 3), (1, 2)):  # one commit round per record, as the engine may write them
        for seq in range(seqs):
            entry = ChunkEntry(chunk_filename(0, shard, seq, None), chunk_size=1, chunk_bytes=8)
            write_records(storage, [CommitRecord(shard, seq, entry, 8, seq, seq + 1, 0, False, (), "run")])
    with pytest.raises(IncompleteDatasetError) as err:
        StreamingDataset(out)
    message = str(err.value)
    assert message.startswith(f"{out} has no index.json: the optimize run writing it has not finished")
    assert "(5 checkpointed chunks found under .shardwright/)" in message
    assert "rerun the same optimize call to finish it" in message


def test_reader_corrupt_index(tmp_path):
    out = small_dataset(tmp_path)
    (out / "index.json").write_text('{"chunks": [')
    with pytest.raises(CorruptStateError, match="index.json at .* is not valid JSON"):
        StreamingDataset(out)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_reader_missing_or_short_chunk(tmp_path, compression):
    out = small_dataset(tmp_path, compression=compression)
    ds = StreamingDataset(out)
    victim = ds.chunks[2].filename
    data = (out / victim).read_bytes()
    (out / victim).write_bytes(data[: len(data) // 2])
    ds = StreamingDataset(out)
    assert ds[0]["i"] == 0  # other chunks still read
    with pytest.raises(CorruptStateError, match=victim):
        ds[11]
    (out / victim).unlink()
    with pytest.raises(CorruptStateError, match=f"chunk file .*{victim}.* is missing"):
        StreamingDataset(out)[10]


def test_reader_chunk_count_mismatch(tmp_path):
    out = small_dataset(tmp_path)
    index = json.loads((out / "index.json").read_text())
    index["chunks"][0]["chunk_size"] = 4
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match="holds 5 items but index.json says 4"):
        StreamingDataset(out)[0]


def test_reader_unsupported_leaf_format_fails_at_open(tmp_path):
    out = small_dataset(tmp_path)
    index = json.loads((out / "index.json").read_text())
    index["config"]["data_format"] = ["int", "custom"]
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(UnsupportedFormatError, match="'custom'"):
        StreamingDataset(out)


def test_reader_arrow_footer_chunk_damaged_is_corrupt(tmp_path):
    # litdata 0.2.76 with pyarrow: header with all offsets equal, rows in an Arrow footer.
    out = tmp_path / "arrow"
    out.mkdir()
    header = struct.pack("<5I", 3, 20, 20, 20, 20)
    (out / "chunk-0-0.bin").write_bytes(header + b"arrow-ipc-bytes" + b"LDARW01\0")
    spec = flatten_sample({"a": 1})[1]
    config = IndexConfig(None, 3, None, ["int"], spec)
    (out / "index.json").write_bytes(render_index([ChunkEntry("chunk-0-0.bin", 3, 43)], config))
    with pytest.raises(CorruptStateError, match="Arrow footer"):
        StreamingDataset(out)[0]


def test_reader_is_picklable(tmp_path):
    import pickle

    ds = StreamingDataset(small_dataset(tmp_path))
    assert ds[7]["i"] == 7  # fills the mmap cache
    clone = pickle.loads(pickle.dumps(ds))
    assert [x["i"] for x in clone] == list(range(23))


def test_reader_dataloader_workers(tmp_path):
    ds = StreamingDataset(small_dataset(tmp_path, n=40))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
    batches = list(loader)
    assert torch.equal(torch.cat([b["i"] for b in batches]), torch.arange(40))
    assert sum((b["s"] for b in batches), []) == [str(i) for i in range(40)]


def test_reader_copes_with_litdata_decompressed_copies(tmp_path):
    # What litdata leaves behind after reading a compressed local dataset: only the .bin files.
    out = small_dataset(tmp_path, compression="zstd")
    ds = StreamingDataset(out)
    for entry in ds.chunks:
        stored = out / entry.filename
        plain = out / entry.filename.replace(".zstd", "")
        plain.write_bytes(zstandard.ZstdDecompressor().decompress(stored.read_bytes()))
        stored.unlink()
    shutil.rmtree(out / STATE_DIR, ignore_errors=True)
    assert [x["i"] for x in StreamingDataset(out)] == list(range(23))
    assert not any(name.endswith(".zstd.bin") for name in os.listdir(out))

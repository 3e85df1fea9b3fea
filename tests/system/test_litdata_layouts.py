"""Datasets written by litdata 0.2.76's optimize (every chunk layout, media leaves) read by
shardwright, and datasets written by shardwright's optimize read by litdata: values equal, and
for media leaves the item bytes equal litdata's own.

litdata's optimize runs its own worker processes (fork, as in test_litdata_compat).
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import shardwright as sw
from shardwright.format import chunk_item, chunk_num_items, decompress, unpack_chunk

torch = pytest.importorskip("torch")
ld = pytest.importorskip("litdata")
PIL = pytest.importorskip("PIL.Image")
pytest.importorskip("pyarrow")


def lit_optimize(fn, n: int, out: Path, **kwargs) -> None:
    ld.optimize(
        fn=fn, inputs=list(range(n)), output_dir=str(out), num_workers=1, keep_data_ordered=True,
        start_method="fork", **{"chunk_size": 16, **kwargs},
    )  # fmt: skip


def ours_optimize(fn, n: int, out: Path, **kwargs) -> None:
    sw.optimize(fn, list(range(n)), str(out), num_workers=1, **{"chunk_size": 16, **kwargs})


def same(a, b) -> bool:
    if isinstance(b, dict):
        return isinstance(a, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in b)
    if isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), b) and np.asarray(a).dtype == b.dtype
    if isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(b, PIL.Image):
        return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()
    if isinstance(b, memoryview):
        return bytes(a) == bytes(b)
    return a == b


def sine(i: int) -> dict:
    x = float(np.linspace(-5, 5, 100)[i])
    return {"x": x, "sine": float(np.sin(x)), "name": f"p{i}", "tags": [i, i + 1]}


def rows(i: int) -> dict:
    return {"id": i, "text": "word " * (i % 7), "score": i / 3}


@pytest.mark.parametrize(
    "fn, kwargs, layout",
    [
        (sine, {}, "arrow"),  # a list inside the dict: litdata writes the Arrow footer only
        (rows, {}, "arrow"),  # a flat dict of plain values: Arrow footer too
        (rows, {"compression": "zstd"}, "arrow"),  # Arrow IPC zstd
        (lambda i: {"a": np.arange(i % 5 + 1), "i": i}, {"compression": "zstd"}, "batch"),  # default zstd: framed
        (
            lambda i: {"a": np.arange(i % 5 + 1), "i": i},
            {"compression": "zstd", "compression_level": "sample"},
            "sample",
        ),
        (
            lambda i: {"a": np.arange(i % 5 + 1), "i": i},
            {"compression": "zstd:9", "compression_level": "chunk"},
            "chunk",
        ),
    ],
)
def test_we_read_every_layout_litdata_writes(tmp_path, fn, kwargs, layout):
    out = tmp_path / "lit"
    lit_optimize(fn, 40, out, **kwargs)
    first = out / json.loads((out / "index.json").read_text())["chunks"][0]["filename"]
    raw = first.read_bytes()
    if layout == "arrow":
        assert raw.endswith(b"LDARW01\0")
    elif layout == "batch":
        assert raw.startswith(b"LDFZ01\0\0")
    theirs, ours = ld.StreamingDataset(str(out)), sw.StreamingDataset(out)
    assert len(ours) == len(theirs) == 40
    for i in range(40):
        assert same(ours[i], theirs[i]), (i, ours[i], theirs[i])
    assert same(list(ours), [ours[i] for i in range(40)])


def test_framed_chunks_we_pack_are_read_by_litdata(tmp_path):
    # format.layouts writes litdata's framed and per-item zstd: litdata's reader takes them.
    out = tmp_path / "lit"
    lit_optimize(lambda i: {"a": np.arange(i % 5 + 1), "i": i}, 40, out, compression="zstd", compression_level="chunk")
    index = json.loads((out / "index.json").read_text())
    for level in ("batch", "sample"):
        copy = tmp_path / level
        copy.mkdir()
        chunks = []
        for entry in index["chunks"]:
            classic = decompress((out / entry["filename"]).read_bytes(), "zstd")
            packed = (
                sw.format.pack_framed(classic, "zstd", 8)
                if level == "batch"
                else sw.format.pack_sample(classic, "zstd")
            )
            name = entry["filename"].replace(".zstd", "")
            (copy / name).write_bytes(packed)
            chunks.append({**entry, "filename": name, "chunk_bytes": len(packed)})
            assert unpack_chunk(packed, level) == classic
        config = {**index["config"], "compression_level": level}
        (copy / "index.json").write_text(json.dumps({"chunks": chunks, "config": config, "updated_at": "1"}))
        theirs, ours = ld.StreamingDataset(str(copy)), sw.StreamingDataset(copy)
        for i in range(40):
            assert same(ours[i], theirs[i]) and ours[i]["i"] == i


# --- the getting-started example, both ways ----------------------------------------------------


def random_images(index: int) -> dict:
    rng = np.random.default_rng(index)
    return {
        "index": index,
        "image": PIL.fromarray(rng.integers(0, 256, (32, 32, 3), np.uint8)),
        "class": int(rng.integers(10)),
    }


def test_getting_started_both_ways(tmp_path):
    for writer, out in ((lit_optimize, tmp_path / "lit"), (ours_optimize, tmp_path / "ours")):
        writer(random_images, 30, out, chunk_size=None, chunk_bytes="64MB")
        assert json.loads((out / "index.json").read_text())["config"]["data_format"] == ["int", "pil", "int"]
        theirs, ours = ld.StreamingDataset(str(out)), sw.StreamingDataset(out)
        for i in range(30):
            assert same(ours[i], random_images(i)) and same(theirs[i], random_images(i))


# --- every media leaf through optimize: the item bytes equal litdata's --------------------------


def _png(i: int) -> bytes:
    buffer = io.BytesIO()
    PIL.fromarray(np.full((4, 6, 3), i, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _jpeg(i: int) -> bytes:
    buffer = io.BytesIO()
    PIL.fromarray(np.full((8, 8, 3), i * 7 % 256, np.uint8)).save(buffer, format="JPEG", quality=80)
    return buffer.getvalue()


def media_sample(lib, i: int) -> dict:
    """The same sample built with litdata's wrappers or ours (``lib`` is the module)."""
    rng = np.random.default_rng(i)
    sample = {
        "pil": lib.Pil(array=rng.integers(0, 256, (4, 4, 3), np.uint8)),
        "raw_pil": PIL.fromarray(np.full((3, 5), i, np.uint8), mode="L"),
        "jpeg": lib.Jpeg(bytes=_jpeg(i)),
        "jpegs": lib.JpegArray(images=[lib.Jpeg(bytes=_jpeg(i)), lib.Jpeg(bytes=_jpeg(i + 1))]),
        "image": lib.Image(array=rng.integers(0, 256, (5, 5, 3), np.uint8)),
        "png": lib.Image(bytes=_png(i)),
        "text": lib.Text(text=f"caption {i}"),
        "file": lib.File(bytes=b"file %d" % i),
        "tensor": lib.Tensor(array=torch.arange(6, dtype=torch.int16).reshape(2, 3) * i),
        "audio": lib.Audio(array=np.sin(np.linspace(0, i + 1, 64)).astype(np.float32), sampling_rate=8000),
        "video": lib.Video(bytes=b"\x00\x00\x00\x18ftypmp42" + bytes([i])),
        "tiff": lib.Tiff(array=np.arange(6, dtype=np.uint8).reshape(2, 3) + i),
        "graph": lib.Graph(x=torch.arange(4.0).reshape(2, 2) + i, edge_index=torch.tensor([[0], [1]])),
        "array": np.arange(i % 4 + 2, dtype=np.float32),
        "grid": np.full((2, 2), i, np.int64),
    }
    return sample


def lit_media(i: int) -> dict:
    return media_sample(ld, i)


def ours_media(i: int) -> dict:
    return media_sample(sw, i)


def _items(out: Path) -> tuple[list[str], list[bytes]]:
    index = json.loads((out / "index.json").read_text())
    items = []
    for entry in index["chunks"]:
        chunk = unpack_chunk((out / entry["filename"]).read_bytes(), index["config"].get("compression_level"))
        items += [bytes(chunk_item(chunk, j)) for j in range(chunk_num_items(chunk))]
    return index["config"]["data_format"], items


def test_media_items_are_byte_equal_to_litdatas(tmp_path):
    lit_optimize(lit_media, 12, tmp_path / "lit", chunk_size=5)
    ours_optimize(ours_media, 12, tmp_path / "ours", chunk_size=5)
    lit_format, lit_items = _items(tmp_path / "lit")
    our_format, our_items = _items(tmp_path / "ours")
    # litdata names Tiff(array=) leaves "tiff", which its reader cannot read; we write "tifffile".
    assert our_format == [name if name != "tiff" else "tifffile" for name in lit_format]
    assert our_format[:4] == ["pil", "pil", "jpeg", "jpeg_array"] and "image:png" in our_format
    assert our_items == lit_items
    # Read back: our reader on litdata's dataset equals ours on our dataset (tiff included).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # audio/video leaves come back as bytes (torchcodec does not load here)
        theirs, mine = sw.StreamingDataset(tmp_path / "lit")[3], sw.StreamingDataset(tmp_path / "ours")[3]
    for key in mine:
        if key == "graph":
            assert torch.equal(theirs[key].x, mine[key].x)
        else:
            assert same(theirs[key], mine[key]), key
    assert torch.equal(mine["image"], torch.from_numpy(np.asarray(ours_media(3)["image"].array)).permute(2, 0, 1))
    assert mine["text"] == "caption 3" and mine["file"] == b"file 3" and mine["video"].endswith(b"\x03")


# --- a mixed dataset through StreamingDataLoader, litdata's default collate --------------------


def mixed(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "image": sw.Image(array=rng.integers(0, 256, (6, 8, 3), np.uint8)),
        "caption": f"a photo of {i}",
        "tokens": torch.arange(5, dtype=torch.int64) + i,
        "array": rng.random((2, 3)).astype(np.float32),
    }


def test_mixed_dataset_through_the_dataloader(tmp_path):
    from torch.utils.data import default_collate

    out = tmp_path / "mixed"
    ours_optimize(mixed, 10, out, chunk_size=4)
    loader = sw.StreamingDataLoader(sw.StreamingDataset(out), batch_size=4)
    batches = list(loader)
    assert [len(b["caption"]) for b in batches] == [4, 4, 2]
    dataset = sw.StreamingDataset(out)
    want = default_collate([dataset[i] for i in range(4)])
    got = batches[0]
    assert got["image"].shape == (4, 3, 6, 8) and got["image"].dtype == torch.uint8
    assert torch.equal(got["image"], want["image"]) and torch.equal(got["tokens"], want["tokens"])
    assert torch.equal(got["array"], want["array"]) and got["caption"] == want["caption"]
    # litdata's default collate (litdata_collate) batches our items the same way (its own
    # reader cannot decode image leaves here: it needs torchvision, whose wheel does not load).
    theirs = ld.litdata_collate([dataset[i] for i in range(4)])
    assert (
        all(torch.equal(theirs[k], got[k]) for k in ("image", "tokens", "array"))
        and theirs["caption"] == got["caption"]
    )

"""litdata's own examples, done with ``shardwright`` in place of ``litdata``: the calls of
examples/getting_started (generate.py, stream.py) and examples/modality (a folder of media
files listed with list_media_folder, wrapped with Video/Image/Audio/Text, a tokenized text
stream with TokensLoader), and what they write read back the same by both libraries.

The examples' code is not copied: each test makes the same calls on small data.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import shardwright
from shardwright.format import chunk_item, chunk_num_items, unpack_chunk

torch = pytest.importorskip("torch")
litdata = pytest.importorskip("litdata")
PIL = pytest.importorskip("PIL.Image")


def random_images(index):  # examples/getting_started/generate.py's fn
    return {
        "index": index,
        "image": PIL.fromarray(np.random.randint(0, 256, (32, 32, 3), np.uint8)),
        "class": np.random.randint(10),
    }


def same_item(a: dict, b: dict) -> bool:
    if list(a) != list(b):
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(y, PIL.Image):
            if x.tobytes() != y.tobytes() or x.mode != y.mode or x.size != y.size:
                return False
        elif isinstance(y, (np.ndarray, torch.Tensor)):
            if not np.array_equal(np.asarray(x), np.asarray(y)):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("writer", ["shardwright", "litdata"])
def test_getting_started(tmp_path, writer):
    lib = shardwright if writer == "shardwright" else litdata
    out = tmp_path / "my_optimized_dataset"
    extra = {} if writer == "shardwright" else {"start_method": "fork"}
    lib.optimize(
        fn=random_images, inputs=list(range(200)), output_dir=str(out), num_workers=4, chunk_bytes="64MB", **extra
    )
    assert json.loads((out / "index.json").read_text())["config"]["data_format"] == ["int", "pil", "int"]

    # stream.py, with shardwright
    dataset = shardwright.StreamingDataset(str(out), shuffle=True)
    sample = dataset[50]
    assert isinstance(sample["image"], PIL.Image) and sample["image"].size == (32, 32)
    assert isinstance(sample["class"], int)
    shardwright.StreamingDataLoader(dataset)  # as in stream.py (PIL images need a collate_fn to be batched)

    theirs = litdata.StreamingDataset(str(out))
    ours = shardwright.StreamingDataset(str(out))
    assert len(ours) == len(theirs) == 200
    for i in range(0, 200, 7):
        assert same_item(ours[i], theirs[i])
    assert sorted(ours[i]["index"] for i in range(200)) == list(range(200))


# --- examples/modality: files on disk, listed and wrapped -------------------------------------


def seed_folder(root: Path) -> None:
    rng = np.random.default_rng(0)
    for label in ("clip_a", "clip_b"):
        folder = root / label
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(2):
            # Not a decodable video (torchvision's write_video does not load here): its bytes travel as they are.
            (folder / f"{index}.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + rng.bytes(64))
            buffer = io.BytesIO()
            PIL.fromarray(rng.integers(0, 256, (8, 8, 3), np.uint8)).save(buffer, format="PNG")
            (folder / f"{index}.png").write_bytes(buffer.getvalue())
            (folder / f"{index}.wav").write_bytes(b"RIFF" + rng.bytes(40))
            (folder / f"{index}.txt").write_text(f"a caption for {label} {index}")


def make_sample(lib):
    def sample(item: dict) -> dict:
        path = item["path"]
        kind = {"mp4": lib.Video, "png": lib.Image, "wav": lib.Audio, "txt": lib.Text}[path.rsplit(".", 1)[1]]
        return {"media": kind(path=path), "caption": item["label"]}

    return sample


def items_of(out: Path) -> tuple[list, list[bytes]]:
    index = json.loads((out / "index.json").read_text())
    blobs = []
    for entry in index["chunks"]:
        chunk = unpack_chunk((out / entry["filename"]).read_bytes(), None)
        blobs += [bytes(chunk_item(chunk, j)) for j in range(chunk_num_items(chunk))]
    return index["config"]["data_format"], blobs


def collate_fn(samples: list) -> dict:
    return {"media": [s["media"] for s in samples], "caption": [s["caption"] for s in samples]}


@pytest.mark.parametrize(
    "kind, name", [("video", "video:mp4"), ("image", "image:png"), ("audio", "audio:wav"), ("text", "text")]
)
def test_modality_folder(tmp_path, kind, name):
    seed_folder(tmp_path / "source")
    inputs = shardwright.list_media_folder(str(tmp_path / "source"), kind=kind)
    assert inputs == litdata.list_media_folder(str(tmp_path / "source"), kind=kind)
    for lib, out in ((shardwright, tmp_path / "ours"), (litdata, tmp_path / "lit")):
        extra = {"start_method": "fork", "keep_data_ordered": True} if lib is litdata else {}
        lib.optimize(fn=make_sample(lib), inputs=inputs, output_dir=str(out), num_workers=2, chunk_bytes="64MB",
                     mode="overwrite", **extra)  # fmt: skip
    ours_format, ours_items = items_of(tmp_path / "ours")
    lit_format, lit_items = items_of(tmp_path / "lit")
    assert ours_format == lit_format == [name, "str"]
    assert sorted(ours_items) == sorted(lit_items)  # the same item bytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # audio/video come back as bytes: torchcodec does not load here
        dataset = shardwright.StreamingDataset(str(tmp_path / "ours"))
        batch = next(iter(shardwright.StreamingDataLoader(dataset, batch_size=2, num_workers=0, collate_fn=collate_fn)))
        assert batch["caption"] == [inputs[0]["label"], inputs[1]["label"]]
        first = dataset[0]["media"]
        raw = Path(inputs[0]["path"]).read_bytes()
        if kind == "text":
            assert first == raw.decode() == litdata.StreamingDataset(str(tmp_path / "ours"))[0]["media"]
        elif kind == "image":
            assert torch.equal(
                first, torch.from_numpy(np.asarray(PIL.open(io.BytesIO(raw)).convert("RGB"))).permute(2, 0, 1)
            )
        else:
            assert first == raw


def test_modality_text_tokens(tmp_path):
    # Pre-training text: tokenized into a 1-D Tensor per document, item_loader=TokensLoader().
    documents = [f"document {i} " * (i + 1) for i in range(8)]

    def tokenize(text: str):
        return shardwright.Tensor(array=torch.tensor([ord(c) for c in text], dtype=torch.int32))

    def lit_tokenize(text: str):
        return litdata.Tensor(array=torch.tensor([ord(c) for c in text], dtype=torch.int32))

    shardwright.optimize(fn=tokenize, inputs=documents, output_dir=str(tmp_path / "ours"), num_workers=2,
                         chunk_size=64, item_loader=shardwright.TokensLoader())  # fmt: skip
    litdata.optimize(fn=lit_tokenize, inputs=documents, output_dir=str(tmp_path / "lit"), num_workers=1,
                     chunk_size=64, item_loader=litdata.TokensLoader(), start_method="fork")  # fmt: skip
    stream = "".join(documents)
    for out in (tmp_path / "ours", tmp_path / "lit"):
        # shardwright reads one token stream cut into blocks (a block may cross chunks) ...
        ours = shardwright.StreamingDataset(str(out), item_loader=shardwright.TokensLoader(block_size=16))
        assert "".join("".join(chr(int(t)) for t in ours[i]) for i in range(len(ours))) == stream[: len(ours) * 16]
        # ... litdata cuts blocks inside each chunk: every one of its blocks is a piece of that stream.
        theirs = litdata.StreamingDataset(str(out), item_loader=litdata.TokensLoader(block_size=16))
        assert len(theirs) > 0 and all("".join(chr(int(t)) for t in theirs[i]) in stream for i in range(len(theirs)))

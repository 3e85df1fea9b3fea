#!/usr/bin/env python
"""A folder of JPEG images into a dataset and back through a decoding loader: shardwright vs
litdata 0.2.76 vs mosaicml-streaming, side by side (litdata's headline workload, issue 36).

    .venv/bin/python benchmarks/bench_images.py                 # 5,000 images, median of 3
    .venv/bin/python benchmarks/bench_images.py --images 20000  # the issue's ~20k
    .venv/bin/python benchmarks/bench_images.py --quick         # 300 images, 1 repeat

The images are made here with Pillow (seeded): JPEG, quality 90, 240x180 to 640x480 pixels,
about 30-200 KB each, mixed sizes, one folder. Then, each step in a fresh process (the time is
the call, the interpreter's start and imports excluded), variants interleaved in every repeat:

* ``write``: the folder into a dataset, 2 workers: ``shardwright.optimize`` and
  ``litdata.optimize`` with fn(path) -> {"image": the file's bytes, "label": int}, 64 MB
  chunks; mosaicml-streaming's ``MDSWriter`` (one process: it has no parallel writer) when
  installed. Floor: **raw read**, every file's bytes read by 2 processes.
* ``read``: each library's dataset through a 2-worker loader (shardwright / litdata: their
  ``StreamingDataLoader``; mosaicml-streaming: torch's ``DataLoader``), batch 64, every JPEG
  decoded with PIL in the workers (the collate decodes, so every library decodes the same way
  and nothing decoded is pickled back). Floors: **decode-only** (every JPEG of the folder
  read and decoded by 2 processes) and **raw read**.

Printed: images/s (median of the repeats, min beside it), the ratios shardwright / litdata
and shardwright / mosaic (> 1: shardwright faster), and ours over the floors. Every run is
checked: the count of images read (and written, read back) must be the folder's.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "stand_in"))  # torchvision stand-in, for mosaicml-streaming
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

from benchsteps import cell, fresh_step, load_average, median_rate, mosaic_python, ratio  # noqa: E402

WORKERS = 2
BATCH = 64
SIZES = [(240, 180), (320, 240), (400, 300), (480, 360), (560, 420), (640, 480)]


# --- the images --------------------------------------------------------------------------------


def make_image(args: tuple[str, int]) -> int:
    """Image i: 8x8 blocks of colour plus noise (a photo-like JPEG size), seeded by i."""
    import numpy as np
    from PIL import Image

    folder, i = args
    rng = np.random.default_rng(i)
    w, h = SIZES[i % len(SIZES)]
    base = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    pixels = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:h, :w].astype(np.int16)
    pixels = (pixels + rng.integers(-40, 40, (h, w, 3))).clip(0, 255).astype(np.uint8)
    path = os.path.join(folder, f"{i:07d}.jpg")
    Image.fromarray(pixels).save(path, "JPEG", quality=90)
    return os.path.getsize(path)


def make_folder(folder: str, n: int) -> int:
    import multiprocessing

    os.makedirs(folder, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        return sum(pool.imap_unordered(make_image, [(folder, i) for i in range(n)], chunksize=64))


def files_of(folder: str) -> list[str]:
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".jpg"))


# --- the steps (each runs in a fresh process) -----------------------------------------------------


def load(path: str) -> dict:
    with open(path, "rb") as f:
        return {"image": f.read(), "label": int(os.path.basename(path)[:-4]) % 1000}


def decode_count(batch: list) -> int:
    """The loaders' collate: decode every JPEG of the batch (in the worker), return the count."""
    from PIL import Image

    for item in batch:
        with Image.open(io.BytesIO(item["image"])) as image:
            image.load()
    return len(batch)


def decode_file(path: str) -> int:
    from PIL import Image

    with Image.open(path) as image:
        image.load()
    return 1


def read_file(path: str) -> int:
    with open(path, "rb") as f:
        return len(f.read()) > 0


def pool_over(fn, files: list[str]) -> int:
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        return sum(pool.imap_unordered(fn, files, chunksize=64))


def write_shardwright(files: list[str], out: str) -> int:
    import shardwright

    shardwright.optimize(load, files, out, chunk_bytes="64MB", num_workers=WORKERS, verbose=False)
    return len(shardwright.StreamingDataset(out))


def write_litdata(files: list[str], out: str) -> int:
    import litdata

    litdata.optimize(fn=load, inputs=files, output_dir=out, chunk_bytes="64MB", num_workers=WORKERS)
    return len(litdata.StreamingDataset(out))


def write_mosaic(files: list[str], out: str) -> int:
    from streaming import MDSWriter, StreamingDataset

    with MDSWriter(out=out, columns={"image": "bytes", "label": "int"}, size_limit=64 << 20) as writer:
        for path in files:
            writer.write(load(path))
    return len(StreamingDataset(local=out))


def read_shardwright(out: str) -> int:
    from shardwright import StreamingDataLoader, StreamingDataset

    loader = StreamingDataLoader(StreamingDataset(out), batch_size=BATCH, num_workers=WORKERS, collate_fn=decode_count)
    return sum(loader)


def read_litdata(out: str) -> int:
    import litdata

    loader = litdata.StreamingDataLoader(
        litdata.StreamingDataset(out), batch_size=BATCH, num_workers=WORKERS, collate_fn=decode_count
    )
    return sum(loader)


def read_mosaic(out: str) -> int:
    import torch
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    ds = StreamingDataset(local=out, batch_size=BATCH)
    return sum(torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=decode_count))


WRITERS = {"shardwright": write_shardwright, "litdata": write_litdata, "mosaic": write_mosaic}
READERS = {"shardwright": read_shardwright, "litdata": read_litdata, "mosaic": read_mosaic}


def run_step(step: str, folder: str, out: str) -> dict:
    """One timed step in this (fresh) process: imports first, then the call alone is timed."""
    phase, _, lib = step.partition(":")
    if lib == "mosaic":
        import streaming  # noqa: F401
    elif lib in ("shardwright", "litdata"):
        __import__(lib)
    import PIL.Image  # noqa: F401
    import torch  # noqa: F401

    files = files_of(folder)
    started = time.perf_counter()
    if phase == "write":
        count = WRITERS[lib](files, out)
    elif phase == "read":
        count = READERS[lib](out)
    elif phase == "decode":
        count = pool_over(decode_file, files)
    else:  # raw
        count = pool_over(read_file, files)
    return {"seconds": time.perf_counter() - started, "count": count}


def fresh(step: str, folder: str, out: str, log) -> dict:
    python = mosaic_python() if step.endswith(":mosaic") else None  # its own venv (numpy < 2.2)
    return fresh_step(__file__, ["--step", step, "--folder", folder, "--out", out], log, python)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="300 images, 1 repeat")
    parser.add_argument("--root", default="", help="work folder (default: a temp dir, removed)")
    parser.add_argument("--step", default="", help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(run_step(args.step, args.folder, args.out)))
        return 0
    n, repeats = (300, 1) if args.quick else (args.images, args.repeats)
    mosaic = mosaic_python()
    libs = ["shardwright", "litdata"] + (["mosaic"] if mosaic else [])
    if mosaic is None:
        print("mosaicml-streaming is not installed (here or in MOSAIC_PYTHON's venv): its columns are skipped")
    else:
        print(f"mosaicml-streaming runs under {mosaic}")
    root = args.root or tempfile.mkdtemp(prefix="bench-images-")
    folder = os.path.join(root, "images")
    print(f"load average {load_average()}", flush=True)
    started = time.perf_counter()
    total = make_folder(folder, n)
    print(
        f"{n} images, {total / n / 1024:.0f} KB mean, {total / 1e6:.0f} MB, made in {time.perf_counter() - started:.1f} s"
    )
    times: dict[str, list[float]] = {}
    failures = 0
    log = open(os.path.join(root, "steps.log"), "w")
    try:
        for r in range(repeats):
            steps = ["raw:", "decode:"] + [f"write:{lib}" for lib in libs] + [f"read:{lib}" for lib in libs]
            for step in steps:
                lib = step.partition(":")[2]
                out = os.path.join(root, f"out-{lib}")
                if step.startswith("write:"):
                    shutil.rmtree(out, ignore_errors=True)
                got = fresh(step, folder, out, log)
                if got.get("failed") or got["count"] != n:
                    failures += lib == "shardwright"
                    print(f"FAILED {step} repeat {r}: {got} (see {log.name})", file=sys.stderr)
                    times[step] = []
                    continue
                if step in times and not times[step]:
                    continue  # failed before
                times.setdefault(step, []).append(got["seconds"])
                print(f"repeat {r} {step:18} {got['seconds']:7.2f} s  {n / got['seconds']:8,.0f} images/s", flush=True)
    finally:
        log.close()
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    print_table(times, n, libs)
    print(f"load average after {load_average()}")
    return 1 if failures else 0


def print_table(times: dict[str, list[float]], n: int, libs: list[str]) -> None:
    def rate(step: str) -> float | None:
        return median_rate(times, step, n)

    def cell_of(step: str) -> str:
        return cell(times, step, rate(step))

    print(
        "\n| step | " + " | ".join(f"{lib} images/s" for lib in libs) + " | raw read | decode-only | "
        "sw/litdata | sw/mosaic | sw/raw | sw/decode |"
    )
    print("|---" * (len(libs) + 7) + "|")
    raw, decode = rate("raw:"), rate("decode:")
    for phase in ("write", "read"):
        sw = rate(f"{phase}:shardwright")
        mosaic = rate(f"{phase}:mosaic") if "mosaic" in libs else None
        print(
            f"| {phase} | "
            + " | ".join(cell_of(f"{phase}:{lib}") for lib in libs)
            + f" | {cell_of('raw:')} | {cell_of('decode:')} | {ratio(sw, rate(f'{phase}:litdata'))} | {ratio(sw, mosaic)} | "
            f"{ratio(sw, raw)} | {ratio(sw, decode) if phase == 'read' else '-'} |"
        )


if __name__ == "__main__":
    sys.exit(main())

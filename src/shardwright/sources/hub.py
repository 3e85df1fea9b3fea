"""Hugging Face Hub datasets as local folders of parquet files (``hf://datasets/org/name``).

``huggingface_hub.snapshot_download`` fetches the dataset's ``*.parquet`` files into Hugging
Face's own cache (``HF_HUB_CACHE``), only those not there yet, so a second reader, or a
machine offline (``HF_HUB_OFFLINE=1``) with the files cached, reads the cached snapshot.
The reader's ``ParquetLoader`` and :func:`shardwright.optimize_hf` read that folder.
"""

from __future__ import annotations

import os

from ..errors import UsageError

__all__ = ["hf_folder", "split_files"]


def hf_folder(url: str, storage_options: dict) -> str:
    """The local folder of ``hf://datasets/org/name[/folder]``'s parquet files: the dataset's
    ``*.parquet`` files fetched into Hugging Face's own cache (``HF_HUB_CACHE``; only the
    files not there yet, so a second reader or an offline machine reads the cached snapshot).
    ``storage_options``: ``token`` and ``revision``, passed to ``huggingface_hub``."""
    parts = url[len("hf://") :].strip("/").split("/")
    if len(parts) < 3 or parts[0] != "datasets":
        raise UsageError(f"{url!r}: an hf:// input_dir names a dataset: hf://datasets/org/name[/folder]")
    bad = next((p for p in parts if p in ("", ".", "..")), None)
    if bad is not None:
        # hf://datasets/org/name/../../x pointed the reader at a folder out of the snapshot
        # (os.path.join of the cache path and "../../x"); every other scheme refuses these too
        what = "an empty segment (//)" if bad == "" else f"a {bad!r} segment"
        raise UsageError(f"{url!r} has {what}: write hf://datasets/org/name[/folder] with plain names")
    repo, sub = "/".join(parts[1:3]), "/".join(parts[3:])
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UsageError(f"reading {url} needs huggingface_hub: pip install huggingface_hub") from None
    extra = set(storage_options) - {"token", "revision"}
    if extra:
        raise UsageError(f"storage_options for hf:// take token and revision only, got {sorted(extra)}")
    pattern = f"{sub}/**.parquet" if sub else "**.parquet"
    local = snapshot_download(
        repo,
        repo_type="dataset",
        allow_patterns=[pattern, pattern.replace("**", "*")],
        revision=storage_options.get("revision"),
        token=storage_options.get("token"),
    )
    return os.path.join(local, *sub.split("/")) if sub else local


def split_files(folder: str, config: str | None, split: str | None) -> list[str]:
    """The parquet files of ``folder`` (a snapshot) of dataset config ``config`` and split
    ``split`` (None: all), sorted: Hub layouts put them as ``CONFIG/SPLIT-*.parquet``,
    ``CONFIG/SPLIT/*.parquet`` or ``data/SPLIT-*.parquet``; a path part names the config,
    and the split is a path part or a file name's prefix before ``-`` or ``.``."""
    found = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            if not name.endswith(".parquet"):
                continue
            parts = os.path.relpath(os.path.join(root, name), folder).split(os.sep)
            if config is not None and config not in parts[:-1]:
                continue
            stem = name[: -len(".parquet")]
            if (
                split is not None
                and split not in parts[:-1]
                and not (stem == split or stem.startswith((f"{split}-", f"{split}.")))
            ):
                continue
            found.append(os.path.join(root, name))
    return sorted(found)

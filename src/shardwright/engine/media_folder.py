"""litdata's input helpers by its names: ``list_media_folder`` and ``iter_webdataset_tar``."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from typing import Any

from ..errors import UsageError

__all__ = ["iter_webdataset_tar", "list_media_folder"]

# The extensions of each kind, as litdata lists them.
_KINDS: dict[str, tuple[str, ...]] = {
    "text": ("txt", "md"),
    "image": ("jpg", "jpeg", "png", "bmp", "gif", "webp", "tif", "tiff"),
    "video": ("mp4", "ogv", "mjpeg", "avi", "mov", "h264", "mpg", "mpeg", "webm", "wmv", "mkv"),
    "audio": ("wav", "mp3", "flac", "ogg", "opus", "m4a", "aac", "wma", "pcm"),
    "mesh": ("glb", "ply", "stl"),
    "pdf": ("pdf",),
    "nifti": ("nii", "nii.gz"),
}


def _matches(name: str, extensions: tuple[str, ...]) -> bool:
    lower = name.lower()
    if lower.endswith(".nii.gz"):
        return "nii.gz" in extensions
    return os.path.splitext(lower)[1].lstrip(".") in extensions


def list_media_folder(root: str, kind: str = "image", drop_labels: bool = False) -> list[dict[str, Any]]:
    """The files of one ``kind`` under ``root`` (a class-folder tree ``root/label/file``), sorted
    by path: ``[{"path": absolute path, "label": parent folder name, or None directly under root}]``."""
    if kind not in _KINDS:
        raise UsageError(f"list_media_folder: kind {kind!r} is not one of {sorted(_KINDS)}")
    root = os.path.abspath(root)
    items = []
    for folder, _, files in os.walk(root):
        for name in files:
            if _matches(name, _KINDS[kind]):
                label = None if drop_labels or os.path.abspath(folder) == root else os.path.basename(folder)
                items.append({"path": os.path.join(folder, name), "label": label})
    return sorted(items, key=lambda item: item["path"])


def iter_webdataset_tar(tar_path: str) -> Iterator[dict[str, Any]]:
    """One dict per WebDataset sample of a ``.tar``: ``{"__key__", "__url__", suffix: bytes ...}``
    (consecutive members ``KEY.SUFFIX`` form a sample)."""
    sample: dict[str, Any] = {}
    key: str | None = None
    with tarfile.open(tar_path, "r") as archive:
        for member in archive:
            base = os.path.basename(member.name.replace("\\", "/"))
            if not member.isfile() or "." not in base:
                continue
            this, suffix = base.split(".", 1)
            if key is not None and this != key:
                yield {**sample, "__key__": key, "__url__": tar_path}
                sample = {}
            key = this
            handle = archive.extractfile(member)
            if handle is not None:
                sample[suffix] = handle.read()
    if key is not None:
        yield {**sample, "__key__": key, "__url__": tar_path}

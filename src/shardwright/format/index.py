"""index.json: the list of chunks and the config that says how to decode their items."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptStateError, UnsupportedFormatError
from ..names import printable
from .checksum import parse_checksum
from .digest import DIGEST_KEY, dataset_digest, parse_digest
from .pytree import parse_spec

# --- index.json -------------------------------------------------------------------------------

# litdata's item offsets are uint32: a chunk's offset table (N + 1 of them, after the count)
# fits in 4 GiB, and so does a chunk (a stored one a little more: framed zstd of incompressible
# items). Larger values are hostile, and would overflow the sizes readers compute from them.
MAX_CHUNK_ITEMS = (1 << 30) - 2
MAX_CHUNK_BYTES = 1 << 33


@dataclass(frozen=True)
class ChunkEntry:
    filename: str
    chunk_size: int  # items in the chunk
    chunk_bytes: int  # size of the uncompressed chunk
    dim: int | None = None
    checksum: str | None = None  # "<algorithm>:<hex>" of the bytes as stored (format.checksum)

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "chunk_bytes": self.chunk_bytes,
            "chunk_size": self.chunk_size,
            "dim": self.dim,
            "filename": self.filename,
        }
        if self.checksum is not None:  # an extra field: litdata's readers ignore it
            entry["checksum"] = self.checksum
        return entry

    @classmethod
    def from_json(cls, data: Any) -> ChunkEntry:
        """Raises ValueError naming the bad field."""
        if type(data) is dict:  # the common entry, checked in a few steps (issue 19: opening a dataset)
            filename, size, nbytes = data.get("filename"), data.get("chunk_size"), data.get("chunk_bytes")
            dim, checksum = data.get("dim"), data.get("checksum")
            if (
                type(filename) is str
                and type(size) is int
                and type(nbytes) is int
                and 0 <= size <= MAX_CHUNK_ITEMS
                and 0 <= nbytes <= MAX_CHUNK_BYTES
                and (dim is None or type(dim) is int)
                and (checksum is None or type(checksum) is str)
                and _safe_filename(filename)
            ):
                try:
                    checksum = parse_checksum(checksum)
                except ValueError as exc:
                    raise ValueError(f"chunk {filename!r}: {exc}") from None
                return cls(filename, size, nbytes, dim, checksum)
        if not isinstance(data, dict):
            raise ValueError(f"a chunk entry must be an object, got {type(data).__name__}")
        for key in ("filename", "chunk_size", "chunk_bytes"):
            if key not in data:
                raise ValueError(f"chunk entry has no {key!r}")
        filename, size, nbytes, dim = data["filename"], data["chunk_size"], data["chunk_bytes"], data.get("dim")
        if not isinstance(filename, str) or not _safe_filename(filename):
            raise ValueError(
                f"chunk filename {filename!r} is not a plain relative path inside the dataset (no '..', no control "
                "characters)"
            )
        for key, value in (("chunk_size", size), ("chunk_bytes", nbytes)):
            if type(value) is not int or value < 0:
                raise ValueError(f"chunk {filename!r} has {key} {value!r}, not a non-negative int")
        for key, value, most in (("chunk_size", size, MAX_CHUNK_ITEMS), ("chunk_bytes", nbytes, MAX_CHUNK_BYTES)):
            if value > most:
                raise ValueError(
                    f"chunk {filename!r} has {key} {value:,}, more than a litdata chunk can hold (at most "
                    f"{most:,}: its offsets are uint32)"
                )
        if dim is not None and type(dim) is not int:
            raise ValueError(f"chunk {filename!r} has dim {dim!r}, not an int or null")
        try:
            checksum = parse_checksum(data.get("checksum"))
        except ValueError as exc:
            raise ValueError(f"chunk {filename!r}: {exc}") from None
        return cls(filename=filename, chunk_size=size, chunk_bytes=nbytes, dim=dim, checksum=checksum)


def _safe_filename(name: str) -> bool:
    # Filenames are joined to the dataset dir: never let one point outside it. Nor hold a
    # control or invisible character: every message naming a chunk would carry it to a terminal.
    parts = name.replace("\\", "/").split("/")
    return (
        bool(name)
        and not name.startswith(("/", "\\"))
        and ".." not in parts
        and "" not in parts
        and printable(name) == name
    )


@dataclass(frozen=True)
class IndexConfig:
    chunk_bytes: int | None
    chunk_size: int | None
    compression: str | None
    data_format: list[str]
    data_spec: str | None
    encryption: Any = None
    item_loader: str = "PyTreeLoader"
    # litdata 0.2.76: None/"chunk" = whole-file compression; "batch"/"sample" = zstd frames
    # inside .bin files (format.layouts).
    compression_level: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "chunk_bytes": self.chunk_bytes,
            "chunk_size": self.chunk_size,
            "compression": self.compression,
            # litdata 0.2.76 keys; null = whole-file compression, no Arrow/batch frames. Its
            # reader only .get()s them, but its writer compares configs when merging.
            "compression_batch_size": 256 if self.compression_level == "batch" else None,
            "compression_level": self.compression_level,
            "data_format": list(self.data_format),
            "data_spec": self.data_spec,
            "encryption": self.encryption,
            "ipc_compression": None,
            "item_loader": self.item_loader,
            "types": None,
        }

    @classmethod
    def from_json(cls, data: Any) -> IndexConfig:
        """Raises ValueError naming the bad field (UnsupportedFormatError for litdata-only modes)."""
        if not isinstance(data, dict):
            raise ValueError(f"config must be an object, got {type(data).__name__}")
        for key in ("data_format", "data_spec", "compression"):
            if key not in data:
                raise ValueError(f"config has no {key!r}")
        data_format = data["data_format"]
        if data_format is None:  # litdata writes null when no sample was ever written
            data_format = []
        if not isinstance(data_format, list) or not all(isinstance(f, str) for f in data_format):
            raise ValueError(f"config data_format {data_format!r:.80} is not a list of strings")
        data_spec = data["data_spec"]
        if data_spec is not None and not isinstance(data_spec, str):
            raise ValueError("config data_spec is not a string or null")
        if data_spec is None and data_format:
            raise ValueError("config has a data_format but no data_spec")
        if data_spec is not None:
            num_leaves = parse_spec(data_spec).num_leaves  # ValueError when malformed
            if num_leaves != len(data_format):
                raise ValueError(f"data_spec has {num_leaves} leaves but data_format has {len(data_format)} names")
        compression = data["compression"]
        if compression is not None and not isinstance(compression, str):
            raise ValueError(f"config compression {compression!r} is not a string or null")
        level = data.get("compression_level")
        if level is not None and level not in ("", "chunk", "batch", "sample"):
            raise ValueError(f"config compression_level {level!r} is not 'chunk', 'batch', 'sample' or null")
        chunk_bytes, chunk_size = data.get("chunk_bytes"), data.get("chunk_size")
        if isinstance(chunk_bytes, str):
            chunk_bytes = parse_size(chunk_bytes)
        for key, value in (("chunk_bytes", chunk_bytes), ("chunk_size", chunk_size)):
            if value is not None and type(value) is not int:
                raise ValueError(f"config {key} {value!r} is not an int or null")
        item_loader = data.get("item_loader", "PyTreeLoader")
        if not isinstance(item_loader, str):
            raise ValueError(f"config item_loader {item_loader!r} is not a string")
        return cls(
            chunk_bytes=chunk_bytes,
            chunk_size=chunk_size,
            compression=compression,
            data_format=list(data_format),
            data_spec=data_spec,
            encryption=data.get("encryption"),
            item_loader=item_loader,
            compression_level=level if compression is not None and level in ("batch", "sample") else None,
        )


def render_index(chunks: list[ChunkEntry], config: IndexConfig, updated_at: str | None = None) -> bytes:
    """index.json bytes, read by litdata 0.2.58 and 0.2.76 alike."""
    document: dict[str, Any] = {
        "chunks": [chunk.to_json() for chunk in chunks],
        "config": config.to_json(),
        # Remote litdata readers key their cache on this value.
        "updated_at": updated_at if updated_at is not None else str(time.time()),
    }
    digest = dataset_digest(chunks, config)
    if digest is not None:  # an extra key: litdata's readers ignore it (format.digest)
        document[DIGEST_KEY] = digest
    return json.dumps(document, sort_keys=True).encode("utf-8")


def index_digest(data: bytes, source: str) -> str | None:
    """The digest an index.json records (None: none recorded). Raises CorruptStateError."""
    try:
        return parse_digest(json.loads(data))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptStateError(f"index.json at {source} is not valid: {exc}") from None


def parse_index(data: bytes, source: str) -> tuple[list[ChunkEntry], IndexConfig]:
    """Chunks and config of an index.json (ours or litdata's). Raises CorruptStateError."""

    def corrupt(what: str) -> CorruptStateError:
        return CorruptStateError(
            f"index.json at {source} is not valid {what}; restore it or rerun optimize with mode='overwrite'"
        )

    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise corrupt(f"JSON: {exc}") from None
    if not isinstance(document, dict):
        raise corrupt(f"dataset index: the top level is a {type(document).__name__}, not an object")
    for key in ("chunks", "config"):
        if key not in document:
            raise corrupt(f"dataset index: it has no {key!r} key")
    if not isinstance(document["chunks"], list):
        raise corrupt("dataset index: 'chunks' is not a list")
    chunks = []
    for position, raw in enumerate(document["chunks"]):
        try:
            chunks.append(ChunkEntry.from_json(raw))
        except ValueError as exc:
            raise corrupt(f"dataset index: chunk {position}: {exc}") from None
    names = {chunk.filename for chunk in chunks}
    if len(names) != len(chunks):  # every reader would yield that chunk's items twice
        seen: set[str] = set()
        for position, chunk in enumerate(chunks):
            if chunk.filename in seen:
                raise corrupt(
                    f"dataset index: chunk {position} names {chunk.filename!r} again (its items would be read twice)"
                )
            seen.add(chunk.filename)
    try:
        config = IndexConfig.from_json(document["config"])
    except UnsupportedFormatError:
        raise
    except ValueError as exc:
        raise corrupt(f"dataset index: {exc}") from None
    return chunks, config


# --- sizes ------------------------------------------------------------------------------------

# Decimal units, as litdata's chunk_bytes="64MB" (1 MB = 1000**2 bytes); the binary "MiB"
# spellings are accepted too and mean powers of 1024.
_SIZE_UNITS: dict[str, int] = {
    "tib": 1024**4, "gib": 1024**3, "mib": 1024**2, "kib": 1024,
    "tb": 1000**4, "gb": 1000**3, "mb": 1000**2, "kb": 1000,
    "t": 1000**4, "g": 1000**3, "m": 1000**2, "k": 1000, "b": 1,
}  # fmt: skip


def parse_size(value: int | str) -> int:
    """Bytes in ``value``: an int, or a string like ``"64MB"`` (decimal, as litdata), ``"1.5 GiB"``."""
    if isinstance(value, bool):
        raise ValueError(f"size {value!r} is not a number of bytes")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"size {value} is negative")
        return value
    if not isinstance(value, str):
        raise ValueError(f"size {value!r} must be an int or a string like '64MB'")
    raw = value.strip().lower().replace(" ", "")
    for suffix, factor in _SIZE_UNITS.items():  # noqa: B007 - used after the loop; longest suffixes first
        if raw.endswith(suffix):
            number = raw[: -len(suffix)]
            break
    else:
        number, factor = raw, 1
    try:
        amount = float(number)
    except ValueError:
        raise ValueError(f"size {value!r} is not understood: use e.g. 64MB, 512KB, 1GB or a number of bytes") from None
    if not math.isfinite(amount) or amount < 0:
        raise ValueError(f"size {value!r} must be a non-negative number of bytes")
    return int(amount * factor)

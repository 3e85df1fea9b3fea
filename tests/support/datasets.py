"""Small datasets written in-process (no optimize() worker pool): for unit tests of the reader
and of verify."""

from __future__ import annotations

from pathlib import Path

from shardwright.format import ChunkEntry, IndexConfig, ItemEncoder, build_chunk, render_index


def write_dataset(
    out: Path, samples: list, chunk_size: int = 0, checksums: bool = True, generation: int = 0
) -> list[ChunkEntry]:
    """Write ``samples`` as a dataset in ``out``: chunks of ``chunk_size`` items (all in one when
    0), index.json last. ``checksums``: record each chunk's checksum as optimize() does."""
    from shardwright.format import chunk_checksum

    out.mkdir(parents=True, exist_ok=True)
    enc = ItemEncoder()
    encoded = [enc.encode(s, i) for i, s in enumerate(samples)]
    size = chunk_size or max(1, len(encoded))
    entries = []
    for k in range(0, len(encoded), size):
        raw = build_chunk(encoded[k : k + size])
        name = f"chunk-{generation}-{k // size:05d}-000000.bin"
        (out / name).write_bytes(raw)
        entries.append(
            ChunkEntry(name, len(encoded[k : k + size]), len(raw), checksum=chunk_checksum(raw) if checksums else None)
        )
    config = IndexConfig(None, size, None, enc.data_format, enc.data_spec)
    (out / "index.json").write_bytes(render_index(entries, config))
    return entries

"""A parquet corpus -> token blocks for language-model training, read back with TokensLoader.

``sources.parquet`` hands fn one row at a time (workers read only their row groups); fn
tokenizes the text (here a byte-level tokenizer, ids 0..255, plus an end-of-document id);
``item_loader=TokensLoader()`` writes one token stream; the reader cuts it into blocks of
``BLOCK`` tokens. Rerunning with more files and ``mode="incremental"`` appends only the new
documents.

    .venv/bin/python examples/parquet_to_tokens.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwright import StreamingDataset, TokensLoader, optimize, sources

BLOCK = 128  # tokens per training example
EOD = 256  # end-of-document token


def tokenize(row: dict) -> np.ndarray:
    """One document -> its tokens (a real pipeline would call its tokenizer here)."""
    ids = np.frombuffer(row["text"].encode("utf-8"), dtype=np.uint8).astype(np.int32)
    return np.append(ids, np.int32(EOD))


def write_corpus(root: Path, first_file: int, files: int, docs_per_file: int = 500) -> None:
    for f in range(first_file, first_file + files):
        texts = [
            f"document {f}-{d}: " + "the quick brown fox jumps over the lazy dog. " * (1 + d % 7)
            for d in range(docs_per_file)
        ]
        pq.write_table(
            pa.table({"id": list(range(docs_per_file)), "text": texts}),
            str(root / f"part-{f:03d}.parquet"),
            row_group_size=100,
        )


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="shardwright-tokens-"))
    corpus, out = work / "corpus", str(work / "tokens")
    corpus.mkdir()
    write_corpus(corpus, 0, 4)
    source = sources.parquet(corpus, columns=["text"])
    print(f"corpus: {source.describe()}")
    optimize(tokenize, source, out, chunk_bytes="1MB", num_workers=2, item_loader=TokensLoader())

    ds = StreamingDataset(out, item_loader=TokensLoader(block_size=BLOCK))
    first = ds[0]
    print(
        f"{len(ds):,} blocks of {BLOCK} tokens; the first starts with {(np.asarray(first[:40]) % 256).astype(np.uint8).tobytes().decode()!r}"
    )

    write_corpus(corpus, 4, 2)  # two new files arrive
    optimize(
        tokenize,
        sources.parquet(corpus, columns=["text"]),
        out,
        chunk_bytes="1MB",
        num_workers=2,
        item_loader=TokensLoader(),
        mode="incremental",
    )  # only the new documents
    print(
        f"after the incremental run: {len(StreamingDataset(out, item_loader=TokensLoader(block_size=BLOCK))):,} blocks"
    )


if __name__ == "__main__":
    main()

"""Token datasets: litdata's ``TokensLoader`` layout, read as fixed-length blocks across chunk
boundaries.

On disk (litdata's format, which we read and write): ``config.item_loader`` is
``"TokensLoader"``, ``data_format`` is one 1-D leaf (``no_header_numpy:k`` or
``no_header_tensor:k``), each item's bytes are its raw tokens with no size header, and each
chunk entry's ``dim`` is the number of tokens in the chunk. A chunk's tokens are therefore one
contiguous run after its offset table.

litdata cuts blocks inside each chunk and drops every chunk's tail. Here the dataset is one
token stream in index order: block ``i`` is tokens ``[i * B, (i + 1) * B)``, wherever they
are, so at most one partial block (the stream's tail) is left out per epoch. A block belongs
to the chunk of its first token (its *group*), which is what the shuffle moves around.
"""

from __future__ import annotations

import bisect

import numpy as np

from ..errors import CorruptStateError, UnsupportedFormatError
from ..format import TOKENS_LOADER, ChunkEntry, TokensLoader, chunk_num_items

# TokensLoader lives in shardwright.format.tokens (the engine writes with it too); it is
# re-exported here, where it used to live, for one release.
__all__ = ["TOKENS_LOADER_NAME", "TokenLayout", "TokensLoader"]

TOKENS_LOADER_NAME = TOKENS_LOADER  # alias of format.TOKENS_LOADER, kept for one release
_NUMPY_DTYPES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bool",
]  # litdata's numpy codes, in order
_TORCH_DTYPES = {
    0: "float32",
    1: "float32",
    2: "float64",
    3: "float64",
    8: "float16",
    9: "float16",
    11: "uint8",
    12: "int8",
    13: "int16",
    14: "int16",
    15: "int32",
    16: "int32",
    17: "int64",
    18: "int64",
    19: "bool",
    20: "uint16",
}  # litdata's torch dtype codes (constants._TORCH_DTYPES_MAPPING)


class TokenLayout:
    """Where each block's tokens are, for one dataset and block size.

    Raises:
        UnsupportedFormatError: the dataset is not a token dataset.
        CorruptStateError: a chunk has no token count.
    """

    def __init__(self, chunks: list[ChunkEntry], data_format: list[str], block_size: int, source: str):
        if len(data_format) != 1:
            raise UnsupportedFormatError(
                f"{source}: a token dataset has one leaf per item, this one has {len(data_format)}"
            )
        name, _, code = data_format[0].partition(":")
        table = {"no_header_numpy": dict(enumerate(_NUMPY_DTYPES)), "no_header_tensor": _TORCH_DTYPES}.get(name)
        if table is None or not code.isdigit() or int(code) not in table:
            raise UnsupportedFormatError(
                f"{source}: token leaves must be 1-D numpy arrays or tensors, not {data_format[0]!r}"
            )
        self.as_tensor = name == "no_header_tensor"
        self.dtype = np.dtype(table[int(code)])
        self.block_size = block_size
        tokens = []
        for entry in chunks:
            if type(entry.dim) is not int or entry.dim < 0:
                raise CorruptStateError(
                    f"{source}: chunk {entry.filename} has no token count (dim); it was not "
                    "written with TokensLoader. Restore index.json or rewrite the dataset"
                )
            tokens.append(entry.dim)
        self.token_starts = np.concatenate([[0], np.cumsum(tokens, dtype=np.int64)]).tolist()
        self.num_blocks = self.token_starts[-1] // block_size
        first_token = [self.token_starts[c] for c in range(len(chunks))]
        # Blocks whose first token lies in chunk c: ceil(start/B) .. ceil(end/B), within num_blocks.
        self.group_sizes = [
            max(
                0,
                min(-(-self.token_starts[c + 1] // block_size), self.num_blocks)
                - min(-(-first_token[c] // block_size), self.num_blocks),
            )
            for c in range(len(chunks))
        ]

    def chunks_of_block_range(self, group: int) -> list[int]:
        """Chunks read by the blocks of ``group``: the group's chunk and those its last block runs into."""
        last_block_end = min(-(-self.token_starts[group + 1] // self.block_size), self.num_blocks) * self.block_size
        last = bisect.bisect_left(self.token_starts, last_block_end) - 1
        return list(range(group, max(group, last) + 1))

    def pieces(self, block: int) -> list[tuple[int, int, int]]:
        """``(chunk, first token in chunk, count)`` runs making block ``block``."""
        start, end = block * self.block_size, (block + 1) * self.block_size
        k = bisect.bisect_right(self.token_starts, start) - 1
        out = []
        while start < end:
            stop = min(end, self.token_starts[k + 1])
            if stop > start:
                out.append((k, start - self.token_starts[k], stop - start))
            start = stop
            k += 1
        return out

    def tokens(self, chunk, entry: ChunkEntry, first: int, count: int) -> np.ndarray:
        """``count`` tokens of a chunk's decoded bytes, from token ``first`` (validated)."""
        n = chunk_num_items(chunk)
        assert entry.dim is not None  # checked when the layout was built
        header = 4 * (n + 2)
        itemsize = self.dtype.itemsize
        if header + entry.dim * itemsize > len(chunk):
            raise CorruptStateError(
                f"chunk file {entry.filename} is too short for the {entry.dim} tokens index.json gives"
            )
        return np.frombuffer(chunk, dtype=self.dtype, count=count, offset=header + first * itemsize)

    def assemble(self, parts: list[np.ndarray]):
        block = parts[0].copy() if len(parts) == 1 else np.concatenate(parts)
        if self.as_tensor:
            import torch

            return torch.from_numpy(block)
        return block

"""Token datasets: litdata's TokensLoader layout, and :class:`TokensLoader`, the value users
pass to choose it (written here; read by shardwright.reader.tokens).

Each item is one 1-D array of tokens stored raw, with no size header (so a chunk's tokens are
one contiguous run after its offset table); ``data_format`` is that one leaf's
``no_header_numpy:k`` / ``no_header_tensor:k``; each chunk entry's ``dim`` is its number of
tokens; ``config.item_loader`` is ``"TokensLoader"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SampleFormatError
from .pytree import flatten_sample
from .sample import ItemEncoder, leaf_format
from .serializers import unwrap_tensor

__all__ = ["TOKENS_LOADER", "TokenEncoder", "TokensLoader", "is_tokens_loader"]

#: ``config.item_loader`` of a token dataset (litdata's name).
TOKENS_LOADER = "TokensLoader"


@dataclass(frozen=True)
class TokensLoader:
    """Read (and write) a dataset as a stream of tokens cut into fixed-length blocks.

    Writing: ``optimize(fn, inputs, out, item_loader=TokensLoader())`` where ``fn`` returns
    (or yields) 1-D integer numpy arrays or torch tensors; the dataset is litdata's token
    layout, so ``litdata.StreamingDataset(out, item_loader=litdata.TokensLoader(B))`` reads it.

    Reading: ``StreamingDataset(out, item_loader=TokensLoader(block_size=B))``: item ``i`` is
    tokens ``[i*B, (i+1)*B)`` of the whole stream, a 1-D array (a torch tensor if the tokens
    were written as tensors), crossing chunk boundaries where needed.

    Args:
        block_size: tokens per item when reading (None when writing).

    Raises:
        ValueError: block_size is not a positive int.
    """

    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.block_size is not None and (type(self.block_size) is not int or self.block_size < 1):
            raise ValueError(f"TokensLoader(block_size={self.block_size!r}): block_size must be a positive int")


def is_tokens_loader(item_loader: Any) -> bool:
    """True for shardwright's TokensLoader, and for litdata's (so a litdata script's
    ``optimize(..., item_loader=litdata.TokensLoader())`` runs unchanged); False for None."""
    if isinstance(item_loader, TokensLoader):
        return True
    kind = type(item_loader)
    return kind.__name__ == TOKENS_LOADER and kind.__module__.partition(".")[0] == "litdata"


class TokenEncoder:
    """Encodes fn's outputs as token items. Same interface as ItemEncoder (data_format,
    data_spec, format_input_index, encode, flat), plus ``itemsize`` (bytes per token)."""

    flat = None  # no compiled encoder: every sample goes through encode()

    def __init__(self, data_format: list[str] | None = None, data_spec: str | None = None):
        self.data_format, self.data_spec = data_format, data_spec
        self.format_input_index: int | None = None
        self.itemsize: int | None = None
        self._inner = ItemEncoder(data_format, data_spec) if data_format is not None else None

    def encode(self, sample: Any, input_index: int) -> bytes:
        """The raw tokens of ``sample``. Raises SampleFormatError naming the input."""
        sample = unwrap_tensor(sample)  # litdata's Tensor(array=...) wrapper
        fmt = leaf_format(sample)
        if not fmt.startswith(("no_header_numpy:", "no_header_tensor:")):
            raise SampleFormatError(
                f"input {input_index}: with item_loader=TokensLoader() fn must return 1-D numpy arrays or torch "
                f"tensors of tokens (e.g. np.asarray(ids, dtype=np.int32)); got {type(sample).__name__}"
                f"{' of shape ' + str(tuple(sample.shape)) if hasattr(sample, 'shape') else ''}"
            )
        if self._inner is None:
            self.data_format, self.data_spec = [fmt], flatten_sample(sample)[1]
            self._inner = ItemEncoder(self.data_format, self.data_spec)
            if self.format_input_index is None:
                self.format_input_index = input_index
        elif [fmt] != self.data_format:
            raise SampleFormatError(
                f"input {input_index}: tokens of type {fmt} but {self._origin()} gave {self.data_format}; every "
                "sample of a token dataset must have the same dtype (convert in fn, e.g. .astype(np.int32))"
            )
        self.itemsize = sample.dtype.itemsize if hasattr(sample.dtype, "itemsize") else sample.element_size()
        return self._inner.encode(sample, input_index)[4:]  # drop the one-leaf size header

    def _origin(self) -> str:
        return "the existing dataset" if (self.format_input_index or 0) < 0 else f"input {self.format_input_index}"

"""Token datasets: litdata's TokensLoader layout (written here; read by
shardwright.reader.tokens).

Each item is one 1-D array of tokens stored raw, with no size header (so a chunk's tokens are
one contiguous run after its offset table); ``data_format`` is that one leaf's
``no_header_numpy:k`` / ``no_header_tensor:k``; each chunk entry's ``dim`` is its number of
tokens; ``config.item_loader`` is ``"TokensLoader"``.
"""

from __future__ import annotations

from typing import Any

from ..errors import SampleFormatError
from .sample import ItemEncoder, flatten_sample, leaf_format

__all__ = ["TOKENS_LOADER", "TokenEncoder", "is_tokens_loader"]

TOKENS_LOADER = "TokensLoader"


def is_tokens_loader(item_loader: Any) -> bool:
    """True for shardwright's (or litdata's) TokensLoader; False for None."""
    return item_loader is not None and type(item_loader).__name__ == TOKENS_LOADER


class TokenEncoder:
    """Encodes fn's outputs as token items. Same interface as ItemEncoder (data_format,
    data_spec, format_input_index, encode), plus ``itemsize`` (bytes per token)."""

    def __init__(self, data_format: list[str] | None = None, data_spec: str | None = None):
        self.data_format, self.data_spec = data_format, data_spec
        self.format_input_index: int | None = None
        self.itemsize: int | None = None
        self._inner = ItemEncoder(data_format, data_spec) if data_format is not None else None

    def encode(self, sample: Any, input_index: int) -> bytes:
        """The raw tokens of ``sample``. Raises SampleFormatError naming the input."""
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

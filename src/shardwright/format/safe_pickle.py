"""Unpickling for datasets nobody vouched for: plain data only.

A pickle runs code only by naming something to call (a class, a function): that lookup goes
through ``Unpickler.find_class``. Refusing every lookup leaves None, bools, numbers, strings,
bytes, lists, tuples, dicts and sets — what litdata pickles for values it has no format for —
and nothing that can run.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from ..errors import CorruptStateError, UnsupportedFormatError

__all__ = ["load_data_only_pickle"]


class _DataOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain data only: None, bools, numbers, strings, bytes, lists, tuples, dicts and
    sets need no class lookup. Anything else (objects, functions, numpy arrays) must look a
    name up, which is refused: that lookup is how a pickle runs code."""

    def find_class(self, module: str, name: str) -> Any:
        raise UnsupportedFormatError(
            f"a pickle leaf of this dataset refers to {module}.{name}: unpickling it runs code chosen by "
            "whoever wrote the dataset, so it is refused by default. If you trust the dataset's origin, "
            "pass StreamingDataset(..., allow_pickle=True)"
        )


def load_data_only_pickle(raw: bytes | memoryview) -> Any:
    """``pickle.loads`` restricted to plain data (see :class:`_DataOnlyUnpickler`).

    Raises:
        UnsupportedFormatError: the pickle refers to a class or function.
        CorruptStateError: the bytes are not a pickle.
    """
    try:
        return _DataOnlyUnpickler(io.BytesIO(raw)).load()
    except UnsupportedFormatError:
        raise
    except Exception as exc:
        raise CorruptStateError(f"a pickle leaf is damaged ({type(exc).__name__}: {exc})") from None

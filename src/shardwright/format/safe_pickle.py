"""Unpickling for datasets nobody vouched for: plain data only.

A pickle runs code only by naming something to call (a class, a function): that lookup goes
through ``Unpickler.find_class``. Refusing every lookup leaves None, bools, numbers, strings,
bytes, lists, tuples, dicts and sets — what litdata pickles for values it has no format for —
and nothing that can run.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import warnings
from typing import Any

from ..errors import CorruptStateError, UnsupportedFormatError

__all__ = ["load_data_only_pickle", "load_trusted_pickle", "main_references", "warn_main_references"]

_WARNED: set[str] = set()  # names already warned about in this process


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


def load_trusted_pickle(raw: bytes | memoryview) -> Any:
    """``pickle.loads`` (``allow_pickle=True``), with one clear line for a pickle naming a class
    or function of the script that wrote it (``__main__``), which no other process has."""
    try:
        return pickle.loads(raw)
    except (AttributeError, ImportError):
        names = main_references(bytes(raw))
        if not names:
            raise
        listed = ", ".join(f"__main__.{n}" for n in names)
        raise UnsupportedFormatError(
            f"a pickle leaf refers to {listed}, defined in the script that wrote the dataset (__main__), which "
            "this process cannot look up. Define it in an importable module and rewrite the dataset with "
            "it (or define it in the script that reads it)"
        ) from None


def main_references(blob: bytes) -> list[str]:
    """Names of ``__main__`` (the running script) that a pickle refers to: no other process can
    look them up. Cheap when there are none (a substring test)."""
    if b"__main__" not in blob:
        return []
    found: list[str] = []
    strings: list[str] = []  # strings pushed so far (STACK_GLOBAL takes the last two)
    memo: dict[int, str] = {}
    try:
        for op, arg, _pos in pickletools.genops(blob):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                strings.append(str(arg))
            elif op.name == "MEMOIZE" and strings:
                memo[len(memo)] = strings[-1]
            elif op.name in ("BINGET", "LONG_BINGET", "GET") and isinstance(arg, int) and arg in memo:
                strings.append(memo[arg])
            elif op.name == "GLOBAL" and isinstance(arg, str):
                module, _, name = arg.partition(" ")
                if module == "__main__":
                    found.append(name)
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2 and strings[-2] == "__main__":
                found.append(strings[-1])
    except Exception:  # not a pickle we can walk: nothing to say
        return found
    return sorted(set(found))


def warn_main_references(blob: bytes, input_index: int) -> None:
    """Warn (once per name and process) when a pickle leaf refers to a class or function of
    ``__main__``: a training job, litdata or ``shardwright`` in another process cannot unpickle it."""
    names = [n for n in main_references(blob) if n not in _WARNED]
    if not names:
        return
    _WARNED.update(names)
    listed = ", ".join(f"__main__.{n}" for n in names)
    warnings.warn(
        f"input {input_index}: a pickle leaf refers to {listed}, defined in the script that runs optimize(); "
        "other processes (a training job, litdata) cannot unpickle it. Define it in an importable module, or "
        "convert the value to plain data (numbers, str, bytes, arrays, dicts) in fn",
        stacklevel=2,
    )

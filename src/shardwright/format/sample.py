"""Items: a sample's leaves encoded behind a size header, and back (see the package docstring)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..errors import CorruptStateError, SampleFormatError
from .flat import FlatEncoder, fixed_item_size, flat_encoder, flat_encoder_source
from .leaves import is_tensor
from .pytree import CONTAINER_NAMES as _CONTAINER_NAMES
from .pytree import MAPPINGS as _MAPPINGS
from .pytree import SpecNode as _Node
from .pytree import flatten_sample, parse_spec, spec_or_corrupt, unflatten_sample, unflattener
from .safe_pickle import warn_main_references
from .serializers import encode_first, encoder_for, leaf_decoder, leaf_format, leaf_matches

__all__ = [
    "ItemEncoder",
    "decode_plan",
    "flatten_sample",
    "leaf_format",
    "parse_spec",
    "unflatten_sample",
]

_U32_MAX = 0xFFFFFFFF
_EXACT: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}

_FIX_HINT = (
    "Every sample must have the same structure (same dict keys, same list/tuple lengths) and the "
    "same leaf types as the first one. Convert values in fn (e.g. int(x), float(x), "
    "np.asarray(x, dtype=np.float32)), give optional fields a value of one type, store a "
    "variable-length list as one 1-D numpy array (any length is one leaf), or store other "
    "variable parts as one leaf (e.g. pickle.dumps(part) as bytes). To change the structure of "
    "a dataset that has committed samples, start over with mode='overwrite'."
)


# --- item encoding ----------------------------------------------------------------------------


class _Mismatch(Exception):
    def __init__(self, path: str, expected: str, got: str):
        super().__init__(path, expected, got)
        self.path, self.expected, self.got = path, expected, got


def _describe(value: Any) -> str:
    kind = _CONTAINER_NAMES.get(type(value))
    if kind is None:
        fmt, name = leaf_format(value), type(value).__name__
        return fmt if fmt == name else f"{fmt} ({name})"
    if type(value) in _MAPPINGS:
        return f"{type(value).__name__} with keys {list(value.keys())!r}"
    return f"{type(value).__name__} of length {len(value)}"


def _describe_node(node: _Node) -> str:
    if node.kind in _MAPPINGS:
        return f"{node.kind.__name__} with keys {list(node.keys)!r}"
    return f"{node.kind.__name__} of length {len(node.children)}"  # type: ignore[union-attr]


def _collect(node: _Node, value: Any, formats: list[str], out: list, path: str) -> None:
    """Leaves of ``value`` in the order of ``node``; raises _Mismatch at the first difference."""
    if node.kind is None:
        fmt = formats[len(out)]
        # A position whose first value was pickled takes anything (litdata pickles it too).
        if fmt != "pickle":
            if _EXACT.get(type(value)) != fmt:  # the common case (int, float, str ...) needs no lookup
                if type(value) in _CONTAINER_NAMES or not leaf_matches(fmt, value):
                    raise _Mismatch(path, fmt, _describe(value))
        out.append(value)
        return
    if node.kind in _MAPPINGS:
        # dict and OrderedDict are interchangeable (as in torch); key order may differ: values
        # are taken by key, in the first sample's order.
        if type(value) not in _MAPPINGS:
            raise _Mismatch(path, _describe_node(node), _describe(value))
        if len(value) != len(node.keys) or not all(key in value for key in node.keys):
            missing = [key for key in node.keys if key not in value]
            extra = [key for key in value if key not in node.keys]
            raise _Mismatch(path, _describe_node(node), f"{_describe(value)} (missing {missing!r}, extra {extra!r})")
        for key, child in zip(node.keys, node.children):
            _collect(child, value[key], formats, out, f"{path}[{key!r}]")
        return
    if type(value) is not node.kind or len(value) != len(node.children):  # type: ignore[arg-type]
        raise _Mismatch(path, _describe_node(node), _describe(value))
    for i, (child, item) in enumerate(zip(node.children, value)):  # type: ignore[call-overload]
        _collect(child, item, formats, out, f"{path}[{i}]")


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ItemEncoder:
    """Turns samples into item bytes. One per writer: the first sample fixes the format.

    ``data_format``/``data_spec`` may be given to continue a dataset (resume, append); then
    every sample must match them. ``format_input_index`` is the input that fixed the format
    (named in error messages); it is set by the first :meth:`encode` when unknown.
    """

    def __init__(self, data_format: list[str] | None = None, data_spec: str | None = None):
        if (data_format is None) != (data_spec is None):
            raise ValueError("give both data_format and data_spec, or neither")
        self.data_format: list[str] | None = None
        self.data_spec: str | None = None
        self.format_input_index: int | None = None
        self._root: _Node | None = None
        self._sizes: struct.Struct | None = None
        self._encoders: list[Callable[[Any], bytes]] = []
        self._pickled: list[int] = []
        # the compiled encoder of flat samples (format/flat.py), or None: returns None for a
        # sample it does not take, which encode() then takes. Public for the worker's hot loop.
        self.flat: FlatEncoder | None = None
        # the size of every item when all leaves are of fixed size (format/packed.py), or None
        self.fixed_size: int | None = None
        if data_format is not None and data_spec is not None:
            self._fix(list(data_format), data_spec)

    def _fix(self, data_format: list[str], data_spec: str) -> None:
        root = spec_or_corrupt(data_spec)
        if root.num_leaves != len(data_format):
            raise CorruptStateError(
                f"data_format has {len(data_format)} names but data_spec has {root.num_leaves} leaves"
            )
        self.data_format, self.data_spec, self._root = data_format, data_spec, root
        self._sizes = struct.Struct(f"<{len(data_format)}I")
        self._encoders = [encoder_for(fmt) for fmt in data_format]
        # a scalar or one container of scalars: a compiled encoder takes the samples it can
        self.flat = flat_encoder(root, data_format)
        self.fixed_size = fixed_item_size(data_format)
        # pickle leaves that name __main__ cannot be read by another process: warn (once per name)
        self._pickled = [i for i, fmt in enumerate(data_format) if fmt in ("pickle", "graph:pickle")]

    def flat_source(self, sample: str, accept: list[str], pack: bool = True) -> tuple[list[str], dict[str, Any]] | None:
        """The statements of :attr:`flat` and their namespace (``flat.flat_encoder_source``),
        for the worker's hot loop to compile into its own code; None when there is no
        compiled encoder."""
        if self.flat is None or self._root is None or self.data_format is None:
            return None
        return flat_encoder_source(self._root, self.data_format, sample, accept, pack)

    def __getstate__(self) -> dict[str, Any]:
        # struct.Struct cannot be pickled: workers rebuild the parsed form from the strings.
        return {
            "data_format": self.data_format,
            "data_spec": self.data_spec,
            "format_input_index": self.format_input_index,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["data_format"], state["data_spec"])  # type: ignore[misc]
        self.format_input_index = state["format_input_index"]

    def _origin(self) -> str:
        if self.format_input_index is None:
            return "the first sample written"
        if self.format_input_index < 0:
            return "the existing dataset (its index.json)"
        return f"input {self.format_input_index}"

    def _where(self, input_index: int, path: str) -> str:
        return f"input {input_index} at {path or 'the top level'}"

    def encode(self, sample: Any, input_index: int) -> bytes:
        """Item bytes of ``sample`` (``u32 sizes[L]`` + leaves). Raises SampleFormatError."""
        if self.flat is not None:
            data = self.flat(sample)
            if data is not None:
                return data  # else the general path below encodes it or says what is wrong
        if self._root is None:
            try:
                leaves, spec = flatten_sample(sample)
            except SampleFormatError as exc:
                raise SampleFormatError(f"input {input_index}: {exc}") from None
            except RecursionError:
                raise SampleFormatError(f"input {input_index}: the sample is nested too deeply") from None
            formats: list[str] = []
            blobs: list[bytes] = []
            for position, leaf in enumerate(leaves):
                try:
                    blob, name = encode_first(leaf)
                except Exception as exc:
                    fmt = leaf_format(leaf)
                    raise SampleFormatError(self._leaf_error(fmt, leaf, position, input_index, exc)) from exc
                formats.append(name)
                if name in ("pickle", "graph:pickle"):
                    warn_main_references(blob, input_index)
                blobs.append(self._checked(blob, position, input_index))
            data = b"".join([struct.pack(f"<{len(blobs)}I", *map(len, blobs)), *blobs])
            # Fix the format only once the first sample encoded cleanly.
            self._fix(formats, spec)
            if self.format_input_index is None:
                self.format_input_index = input_index
            return data
        assert self.data_format is not None and self._sizes is not None
        leaves = []
        try:
            _collect(self._root, sample, self.data_format, leaves, "")
        except _Mismatch as mis:
            raise SampleFormatError(self._mismatch_message(sample, input_index, mis)) from None
        return self._pack(leaves, input_index)

    def _mismatch_message(self, sample: Any, input_index: int, mis: _Mismatch) -> str:
        assert self.data_format is not None and self.data_spec is not None
        expected = unflatten_sample(list(self.data_format), self.data_spec)
        try:
            got_leaves, got_spec = flatten_sample(sample)
            got = unflatten_sample([leaf_format(leaf) for leaf in got_leaves], got_spec)
        except (SampleFormatError, CorruptStateError, RecursionError):
            got = type(sample).__name__
        # appending to a dataset: litdata's words for this mistake, so code matching them still matches
        lead = "The config isn't consistent between chunks: t" if (self.format_input_index or 0) < 0 else "T"
        return (
            f"{self._where(input_index, mis.path)}: expected {mis.expected}, got {mis.got}. "
            f"{lead}he format was fixed by {self._origin()}: expected {_short(expected)}, got {_short(got)}. {_FIX_HINT}"
        )

    def _checked(self, blob: bytes, position: int, input_index: int) -> bytes:
        if len(blob) > _U32_MAX:
            raise SampleFormatError(
                f"input {input_index}: leaf {position} is {len(blob)} bytes; litdata's format stores "
                "each leaf's size as uint32, so a leaf must stay under 4 GiB. Split it across samples."
            )
        return blob

    def _pack(self, leaves: list, input_index: int) -> bytes:
        assert self.data_format is not None and self._sizes is not None
        try:
            blobs = [encode(leaf) for encode, leaf in zip(self._encoders, leaves)]
        except Exception:
            blobs = [self._encode_one(position, leaf, input_index) for position, leaf in enumerate(leaves)]
        for position in self._pickled:
            warn_main_references(blobs[position], input_index)
        lengths = [len(blob) for blob in blobs]
        if max(lengths, default=0) > _U32_MAX:
            for position, blob in enumerate(blobs):
                self._checked(blob, position, input_index)
        return b"".join([self._sizes.pack(*lengths), *blobs])  # each leaf's bytes copied once

    def _encode_one(self, position: int, leaf: Any, input_index: int) -> bytes:
        """One leaf, with the error naming it (the slow path, taken once a leaf failed)."""
        assert self.data_format is not None
        try:
            return self._encoders[position](leaf)
        except Exception as exc:
            fmt = self.data_format[position]
            raise SampleFormatError(self._leaf_error(fmt, leaf, position, input_index, exc)) from exc

    def _leaf_error(self, fmt: str, leaf: Any, position: int, input_index: int, exc: Exception) -> str:
        if fmt == "int" and isinstance(exc, struct.error):
            return (
                f"input {input_index}: int {leaf} (leaf {position}) is outside int64 "
                f"[{-(2**63)}, {2**63 - 1}], the only int litdata's format stores. Store it as "
                "str(value) or bytes, or as a float if precision loss is fine."
            )
        if fmt == "str":
            return (
                f"input {input_index}: str leaf {position} cannot be encoded as UTF-8 ({exc}). "
                "Fix the text (e.g. s.encode('utf-8', 'replace').decode()) or store bytes."
            )
        if fmt == "pickle" and is_tensor(leaf):
            return f"input {input_index}: leaf {position}: {exc}"
        if fmt == "pickle":
            return (
                f"input {input_index}: leaf {position} of type {type(leaf).__name__} is stored with "
                f"pickle but cannot be pickled ({type(exc).__name__}: {exc}). Convert it in fn to "
                "numbers, str, bytes, numpy arrays or tensors."
            )
        return f"input {input_index}: leaf {position} ({fmt}, {type(leaf).__name__}) cannot be encoded: {exc}"


# --- item decoding ----------------------------------------------------------------------------


@lru_cache(maxsize=64)
def decode_plan(
    data_format: tuple[str, ...], data_spec: str, allow_pickle: bool = True
) -> tuple[struct.Struct, list, Callable]:
    """(size header struct, leaf decoders, unflattener) of a dataset; building it checks that
    every leaf format is readable (UnsupportedFormatError) and the spec is sound (CorruptStateError)."""
    num_leaves, build = unflattener(data_spec)
    if num_leaves != len(data_format):
        raise CorruptStateError(f"data_format has {len(data_format)} names but data_spec has {num_leaves} leaves")
    return struct.Struct(f"<{len(data_format)}I"), [leaf_decoder(fmt, allow_pickle) for fmt in data_format], build

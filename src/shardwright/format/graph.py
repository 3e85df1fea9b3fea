"""Graph leaves, byte-compatible with litdata 0.2.76 (``graph`` and ``graph:pickle``).

``graph`` packs a PyG-style mapping of tensors::

    b"LDGR" | u8 version (3) | >u16 n_fields | n_fields x (
        >u16 name_len | name (UTF-8) | u8 kind (0 tensor, 1 pickle) | >u32 n | payload)

Tensor payloads use the ``tensor`` leaf layout. The last field, ``_meta`` (kind 1), is a pickled
dict of plain data: ``_cls`` ("data" or "hetero"), ``_tree`` (the nesting, tensors marked
``"__ldgr_t__"``), ``_paths`` (key tuples) and ``_fields`` (field names). Versions 1 and 2 use
one-byte counts and lengths (version 1 has no kind byte). Graphs without tensors, or holding
lists or opaque objects, are pickled whole as ``graph:pickle``: that leaf is read like a
``pickle`` leaf (litdata reads it with its pickle serializer), so it needs ``allow_pickle=True``
unless it holds plain data only. The ``_meta`` pickle is read as plain data unless
``allow_pickle=True`` (its non-tensor values may be objects).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .leaves import decode_tensor, encode_tensor, is_tensor
from .media import GRAPH_FIELDS, Graph, Tensor
from .optional import available
from .safe_pickle import load_data_only_pickle, load_trusted_pickle

__all__ = ["encode_graph", "graph_decoder", "is_pyg_data"]

_MAGIC = b"LDGR"
_VERSION = 3
_TENSOR, _PICKLE = 0, 1
_META = "_meta"
_MARK = "__ldgr_t__"


def is_pyg_data(value: Any) -> bool:
    return getattr(type(value), "__module__", "").startswith("torch_geometric.data") and hasattr(value, "to_dict")


def _tensor_like(value: Any) -> bool:
    return isinstance(value, (Tensor, np.ndarray)) or is_tensor(value)


def _as_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, Tensor):
        value = value.array if value.dtype is None else torch.as_tensor(value.array).to(value.dtype)
    return (value if is_tensor(value) else torch.as_tensor(value)).cpu().contiguous()


def _flatten(obj: Any, prefix: tuple = ()) -> tuple[dict[tuple, Any], Any] | None:
    if _tensor_like(obj):
        return {prefix: obj}, _MARK
    if isinstance(obj, dict):
        tensors: dict[tuple, Any] = {}
        tree: dict[Any, Any] = {}
        for key, value in obj.items():
            nested = _flatten(value, (*prefix, key))
            if nested is None:
                return None
            tensors.update(nested[0])
            tree[key] = nested[1]
        return tensors, tree
    if isinstance(obj, (list, tuple, set)):
        return None
    return {}, obj


def _mapping(item: Any) -> tuple[dict[str, Any], str] | None:
    if is_pyg_data(item):
        return dict(item.to_dict()), "hetero" if type(item).__name__ == "HeteroData" else "data"
    mapping = item.to_mapping()
    if not mapping:
        return None
    if is_pyg_data(item.data):
        return mapping, "hetero" if type(item.data).__name__ == "HeteroData" else "data"
    hetero = any(isinstance(v, dict) and any(_tensor_like(c) for c in v.values()) for v in mapping.values())
    return mapping, "hetero" if hetero else "data"


def encode_graph(item: Any) -> tuple[bytes, str]:
    """(bytes, name) of a :class:`Graph` or a PyG ``Data``/``HeteroData``."""
    opaque = item.data if isinstance(item, Graph) and item.data is not None else item
    packed = _mapping(item)
    flat = _flatten(packed[0]) if packed is not None else None
    if packed is None or flat is None or not flat[0]:
        return pickle.dumps(opaque), "graph:pickle"
    tensors, tree = flat
    paths = list(tensors)
    names = [".".join("__".join(map(str, k)) if isinstance(k, tuple) else str(k) for k in path) for path in paths]
    if len(set(names)) != len(names):
        names = [f"t{i}" for i in range(len(paths))]
    meta = {"_cls": packed[1], "_tree": tree, "_paths": paths, "_fields": names}
    fields = [(name, _TENSOR, encode_tensor(_as_tensor(tensors[path]))) for name, path in zip(names, paths)]
    fields.append((_META, _PICKLE, pickle.dumps(meta)))
    if len(fields) > 0xFFFF:
        raise ValueError("a graph leaf holds at most 65535 fields")
    parts = [_MAGIC, struct.pack(">BH", _VERSION, len(fields))]
    for name, kind, payload in fields:
        raw = name.encode("utf-8")
        parts.append(struct.pack(">H", len(raw)) + raw + struct.pack(">BI", kind, len(payload)))
        parts.append(payload)
    return b"".join(parts), "graph"


class _Cursor:
    def __init__(self, raw: memoryview) -> None:
        self.raw, self.pos = raw, 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.raw):
            raise ValueError("a graph leaf is truncated")
        self.pos += n
        return self.raw[self.pos - n : self.pos]

    def unpack(self, fmt: str) -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]


def _fill(tree: Any, tensors: dict[tuple, Any], prefix: tuple = ()) -> Any:
    if tree == _MARK:
        return tensors[prefix]
    if isinstance(tree, dict):
        return {key: _fill(value, tensors, (*prefix, key)) for key, value in tree.items()}
    return tree


def _rebuild(values: dict[str, Any]) -> Any:
    tree, paths, names = values.pop("_tree", None), values.pop("_paths", None), values.pop("_fields", None)
    cls = values.pop("_cls", "data")
    if tree is not None and paths is not None and names is not None:
        values = _fill(tree, {tuple(path): values[name] for path, name in zip(paths, names)})
    if available("torch_geometric.data"):
        from torch_geometric.data import Data, HeteroData

        return (HeteroData if cls == "hetero" else Data).from_dict(values)
    if cls == "hetero":
        return Graph(data=values)
    known = {name: values.pop(name) for name in list(values) if name in GRAPH_FIELDS}
    return Graph(**known, data=values or None)


def graph_decoder(allow_pickle: bool) -> Callable[[memoryview], Any]:
    unpickle: Callable[[Any], Any] = load_trusted_pickle if allow_pickle else load_data_only_pickle

    def decode(raw: memoryview) -> Any:
        if bytes(raw[:4]) != _MAGIC:
            loaded = unpickle(bytes(raw))
            return loaded if isinstance(loaded, Graph) else Graph(data=loaded)
        cursor = _Cursor(memoryview(raw)[4:])
        version = cursor.unpack(">B")
        if version not in (1, 2, 3):
            raise ValueError(f"graph leaf version {version} is not one litdata writes (1-3)")
        wide = ">H" if version >= 3 else ">B"
        values: dict[str, Any] = {}
        for _ in range(cursor.unpack(wide)):
            name = bytes(cursor.take(cursor.unpack(wide))).decode("utf-8")
            kind = cursor.unpack(">B") if version >= 2 else _TENSOR
            payload = cursor.take(cursor.unpack(">I"))
            if kind == _PICKLE or name == _META:
                meta = unpickle(bytes(payload))
                if not isinstance(meta, dict):
                    raise ValueError("a graph leaf's _meta is not a dict")
                values.update(meta)
            else:
                values[name] = decode_tensor(payload)
        return _rebuild(values)

    return decode

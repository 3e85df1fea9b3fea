"""Samples as pytrees: flattening a sample into leaves and its ``data_spec`` (torch's treespec
JSON, as litdata writes it), parsing a data_spec, and rebuilding samples from leaves."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Any

from ..errors import CorruptStateError, SampleFormatError

__all__ = [
    "CONTAINER_NAMES",
    "MAPPINGS",
    "SpecNode",
    "flatten_sample",
    "parse_spec",
    "spec_or_corrupt",
    "unflatten_sample",
    "unflattener",
]

_LEAF_SCHEMA: dict[str, Any] = {"type": None, "context": None, "children_spec": []}
_TREESPEC_PROTOCOL = 1

#: The containers a sample may be made of, by their treespec names (everything else is a leaf).
CONTAINER_NAMES: dict[type, str] = {
    dict: "builtins.dict",
    OrderedDict: "collections.OrderedDict",
    list: "builtins.list",
    tuple: "builtins.tuple",
}
_NAME_TO_CONTAINER: dict[str, type] = {name: typ for typ, name in CONTAINER_NAMES.items()}
#: The containers stored as dicts (their keys in the treespec's context).
MAPPINGS = (dict, OrderedDict)


def _check_keys(keys: list, path: str) -> None:
    # The keys travel as JSON in data_spec: only types that come back from JSON unchanged work
    # (a tuple key would come back as an unhashable list).
    for key in keys:
        if key is None or isinstance(key, (str, bool, int)):
            continue
        if type(key) is float and math.isfinite(key):
            continue
        raise SampleFormatError(
            f"dict at {path or 'the top'} has key {key!r} of type {type(key).__name__}; dict keys "
            "are stored as JSON in data_spec, so they must be str, int, finite float, bool or None. "
            "Use string keys (e.g. str(key))."
        )


def _flatten(obj: Any, leaves: list, path: str) -> dict[str, Any]:
    name = CONTAINER_NAMES.get(type(obj))
    if name is None:
        leaves.append(obj)
        return _LEAF_SCHEMA
    if type(obj) in MAPPINGS:
        keys = list(obj.keys())
        _check_keys(keys, path)
        children = [_flatten(value, leaves, f"{path}[{key!r}]") for key, value in obj.items()]
        context = json.dumps(keys)
    else:
        children = [_flatten(value, leaves, f"{path}[{i}]") for i, value in enumerate(obj)]
        context = "null"
    return {"type": name, "context": context, "children_spec": children}


def flatten_sample(sample: Any) -> tuple[list, str]:
    """Leaves of ``sample`` in torch-pytree order and its ``data_spec`` JSON (as litdata writes it)."""
    leaves: list = []
    schema = _flatten(sample, leaves, "")
    return leaves, json.dumps([_TREESPEC_PROTOCOL, schema])


@dataclass(frozen=True)
class SpecNode:
    """A parsed treespec node; ``kind`` is None for a leaf."""

    kind: type | None
    keys: tuple  # dict keys, or () for list/tuple/leaf
    children: tuple[SpecNode, ...]
    num_leaves: int


_LEAF = SpecNode(None, (), (), 1)


_MAX_SPEC_DEPTH = 64  # containers nested deeper than this are not a dataset anyone wrote


def _node_from_json(schema: Any, where: str, depth: int = 0) -> SpecNode:
    if depth > _MAX_SPEC_DEPTH:
        raise ValueError(f"containers are nested more than {_MAX_SPEC_DEPTH} deep")
    if not isinstance(schema, dict) or not {"type", "context", "children_spec"} <= schema.keys():
        raise ValueError(f"{where}: expected an object with type/context/children_spec, got {schema!r:.80}")
    typ, context, children = schema["type"], schema["context"], schema["children_spec"]
    if not isinstance(children, list):
        raise ValueError(f"{where}: children_spec is not a list")
    if typ is None:
        if context is not None or children:
            raise ValueError(f"{where}: a leaf must have context null and no children")
        return _LEAF
    kind = _NAME_TO_CONTAINER.get(typ)
    if kind is None:
        raise ValueError(
            f"{where}: container type {typ!r} is not supported (shardwright reads builtins.dict, "
            "collections.OrderedDict, builtins.list and builtins.tuple)"
        )
    nodes = tuple(_node_from_json(child, f"{where}.children_spec[{i}]", depth + 1) for i, child in enumerate(children))
    keys: tuple = ()
    if kind in MAPPINGS:
        if not isinstance(context, str):
            raise ValueError(f"{where}: dict context must be a JSON string of keys")
        decoded = json.loads(context)
        if not isinstance(decoded, list) or len(decoded) != len(nodes):
            raise ValueError(f"{where}: dict context must list one key per child")
        keys = tuple(decoded)
        if len(set(keys)) != len(keys):
            raise ValueError(f"{where}: dict context has duplicate keys")
    return SpecNode(kind, keys, nodes, sum(node.num_leaves for node in nodes))


@lru_cache(maxsize=64)
def parse_spec(data_spec: str) -> SpecNode:
    """Parse a data_spec; raises ValueError naming what is wrong."""
    try:
        parsed = json.loads(data_spec)
    except RecursionError:
        raise ValueError(f"containers are nested more than {_MAX_SPEC_DEPTH} deep") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(parsed, list) or len(parsed) != 2:
        raise ValueError("expected [protocol, treespec]")
    if parsed[0] != _TREESPEC_PROTOCOL:
        raise ValueError(f"treespec protocol {parsed[0]!r} is not supported (only 1)")
    try:
        return _node_from_json(parsed[1], "treespec")
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def spec_or_corrupt(data_spec: str) -> SpecNode:
    try:
        return parse_spec(data_spec)
    except ValueError as exc:
        raise CorruptStateError(
            f"data_spec {data_spec!r:.120} is not a valid treespec: {exc}; restore the dataset's "
            "index.json or rerun optimize with mode='overwrite'"
        ) from None


def _builder(node: SpecNode) -> Callable[[Iterator], Any]:
    """A function that rebuilds ``node`` by pulling leaves from an iterator."""
    if node.kind is None:
        return next
    kind, keys, n = node.kind, node.keys, len(node.children)
    if all(child.kind is None for child in node.children):
        # Flat containers (the common case) are built with one C-level call.
        if kind is dict:
            return lambda it: dict(zip(keys, islice(it, n)))
        if kind is OrderedDict:
            return lambda it: OrderedDict(zip(keys, islice(it, n)))
        return lambda it: kind(islice(it, n))
    builders = [_builder(child) for child in node.children]
    if kind in MAPPINGS:
        return lambda it: kind((key, build(it)) for key, build in zip(keys, builders))
    return lambda it: kind(build(it) for build in builders)


@lru_cache(maxsize=64)
def unflattener(data_spec: str) -> tuple[int, Callable[[Iterator], Any]]:
    node = spec_or_corrupt(data_spec)
    return node.num_leaves, _builder(node)


def unflatten_sample(leaves: list, data_spec: str) -> Any:
    """Inverse of :func:`flatten_sample`."""
    num_leaves, build = unflattener(data_spec)
    if len(leaves) != num_leaves:
        raise CorruptStateError(f"data_spec has {num_leaves} leaves but {len(leaves)} values were given")
    return build(iter(leaves))

"""fn's identity as a run records it (:class:`~shardwright.protocol.fn_identity.FnIdentity`):
its name, its code digest, and its configuration hashed by value where it is plain data.

Best effort, and honest about it: what is reachable from fn but cannot be hashed by value
(a model, a tokenizer, an open file, a large array) is listed in ``skipped``, and
:func:`fn_identity` callers warn about it. Modules, functions and classes are code, not
configuration: they are not followed.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import hashlib
import inspect
import struct
import types
from collections.abc import Callable
from typing import Any

from ..protocol.fn_identity import MAX_CONFIG_PARTS, FnIdentity
from .options import fn_code, fn_name

__all__ = ["fn_identity"]

MAX_ARRAY_BYTES = 1 << 20  # numpy arrays up to 1 MB are hashed by value; larger ones are skipped
MAX_VALUE_BYTES = 2 << 20  # per configuration part, all of its pieces together (8 bytes per scalar)
_MAX_DEPTH = 16
_CODE_LIKE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)


class _NotPlain(Exception):
    """The value holds something that is not plain data (or is too large): it is skipped."""


def _feed(value: Any, out: Any, budget: list[int], depth: int = 0) -> None:
    """Feed a canonical, type-tagged encoding of a plain value into ``out`` (a hash)."""
    if depth > _MAX_DEPTH:
        raise _NotPlain("nested too deeply")
    budget[0] -= 8  # every value costs something: a dict of a million ints is not "small"
    if budget[0] < 0:
        raise _NotPlain("too large to hash")
    t = type(value)
    if value is None or t is bool:
        out.update(b"N" if value is None else (b"T" if value else b"F"))
    elif t is int:
        out.update(b"i" + str(value).encode())
    elif t is float:
        out.update(b"f" + struct.pack("<d", value))
    elif t is complex:
        out.update(b"c" + struct.pack("<dd", value.real, value.imag))
    elif t is str or t is bytes:
        data = value.encode("utf-8", "surrogatepass") if t is str else value
        budget[0] -= len(data)
        if budget[0] < 0:
            raise _NotPlain("too large to hash")
        out.update((b"s" if t is str else b"b") + struct.pack("<Q", len(data)) + data)
    elif t in (tuple, list):
        out.update((b"(" if t is tuple else b"[") + struct.pack("<Q", len(value)))
        for item in value:
            _feed(item, out, budget, depth + 1)
    elif t in (set, frozenset):
        parts = []
        for item in value:
            h = hashlib.blake2b(digest_size=16)
            _feed(item, h, budget, depth + 1)
            parts.append(h.digest())
        out.update(b"{" + struct.pack("<Q", len(parts)) + b"".join(sorted(parts)))
    elif t is dict:
        out.update(b"d" + struct.pack("<Q", len(value)))
        for key, item in value.items():  # insertion order is part of a dict's behaviour
            _feed(key, out, budget, depth + 1)
            _feed(item, out, budget, depth + 1)
    elif t in _MAPPINGS:
        tag = _type_tag(t) + _factory_tag(value)
        items = _mapping_items(value)
        out.update(b"M" + struct.pack("<QQ", len(tag), len(items)) + tag)
        for key, item in items:
            _feed(key, out, budget, depth + 1)
            _feed(item, out, budget, depth + 1)
    else:
        fields = _record_fields(value)
        if fields is None:
            _feed_numpy(value, out, budget)
            return
        tag = _type_tag(t)
        out.update(b"R" + struct.pack("<QQ", len(tag), len(fields)) + tag)
        for name, item in fields:
            _feed(name, out, budget, depth + 1)
            _feed(item, out, budget, depth + 1)


#: Mapping-like containers of plain data, hashed by value like a dict (with their type): a config
#: held in one was skipped with only a warning, so a changed value resumed silently (round 6).
_MAPPINGS = (collections.OrderedDict, collections.defaultdict, types.MappingProxyType, types.SimpleNamespace)


def _mapping_items(value: Any) -> list[tuple[Any, Any]]:
    """The (key, value) pairs of one of ``_MAPPINGS``, in the order that is part of its behaviour."""
    if type(value) is types.SimpleNamespace:
        return sorted(vars(value).items())  # attributes: their order is not part of its behaviour
    return list(value.items())


def _factory_tag(value: Any) -> bytes:
    """A defaultdict's ``default_factory`` is part of what it does: a class (``list``, ``int``) by
    its name; code (a lambda) cannot be hashed by value, so the whole value is skipped."""
    if type(value) is not collections.defaultdict or value.default_factory is None:
        return b""
    if not isinstance(value.default_factory, type):
        raise _NotPlain("a defaultdict whose default_factory is not a class")
    return b":" + _type_tag(value.default_factory)


def _type_tag(t: type) -> bytes:
    return f"{t.__module__}.{t.__qualname__}".encode("utf-8", "surrogatepass")


def _record_fields(value: Any) -> list[tuple[str, Any]] | None:
    """The (name, value) fields of a configuration object held by value (an enum member, a
    namedtuple, a dataclass, an attrs class or a pydantic model instance), in declaration
    order; None for anything else. The class is part of the value (see ``_type_tag``)."""
    t = type(value)
    if isinstance(value, enum.Enum):
        return [("name", value.name), ("value", value.value)]
    if isinstance(value, tuple) and isinstance(getattr(t, "_fields", None), tuple):
        return list(zip(t._fields, value))  # a namedtuple (collections or typing)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    attrs_fields = getattr(t, "__attrs_attrs__", None)
    if isinstance(attrs_fields, tuple):
        return [(a.name, getattr(value, a.name)) for a in attrs_fields]
    model_fields = _pydantic_fields(t)
    if model_fields is not None:
        fields = [(name, getattr(value, name)) for name in model_fields]
        extra = getattr(value, "__pydantic_extra__", None)  # extra="allow" keys are configuration too
        if isinstance(extra, dict):
            fields += sorted(((str(k), v) for k, v in extra.items()), key=lambda kv: kv[0])
        return fields
    return None


def _undeclared_attributes(value: Any, declared: set[str]) -> list[tuple[str, Any]]:
    """(name, value) of a config object's instance attributes that are not declared fields,
    sorted by name: its ``__dict__`` beyond the fields and a pydantic model's private ones."""
    found: dict[str, Any] = {}
    for state in (getattr(value, "__dict__", None), getattr(value, "__pydantic_private__", None)):
        if isinstance(state, dict):
            for key, item in state.items():
                if isinstance(key, str) and key not in declared and not key.startswith("__"):
                    found.setdefault(key, item)
    return sorted(found.items())


def _pydantic_fields(t: type) -> list[str] | None:
    """A pydantic model class's field names (v2 ``model_fields``, v1 ``__fields__``), or None."""
    import sys

    pydantic = sys.modules.get("pydantic")  # only an already imported pydantic can have made t
    if pydantic is None or not issubclass(t, pydantic.BaseModel):
        return None
    fields = getattr(t, "model_fields", None)
    if fields is None:
        fields = getattr(t, "__fields__", None)
    return list(fields) if isinstance(fields, dict) else None


def _feed_numpy(value: Any, out: Any, budget: list[int]) -> None:
    np = _numpy()
    if np is None:
        raise _NotPlain(type(value).__name__)
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        out.update(b"g" + value.dtype.str.encode() + value.tobytes())
        return
    if type(value) is np.ndarray and value.dtype.kind not in "OV":
        if value.nbytes > MAX_ARRAY_BYTES:
            raise _NotPlain(f"a {value.nbytes:,}-byte array")
        budget[0] -= value.nbytes
        if budget[0] < 0:
            raise _NotPlain("too large to hash")
        out.update(b"a" + value.dtype.str.encode() + repr(value.shape).encode() + np.ascontiguousarray(value).tobytes())
        return
    raise _NotPlain(type(value).__name__)


def _numpy():
    import sys

    return sys.modules.get("numpy")  # only values of an already imported numpy can be arrays


def _digest(value: Any) -> str:
    h = hashlib.blake2b(digest_size=8)
    _feed(value, h, [MAX_VALUE_BYTES])
    return h.hexdigest()


class _Collector:
    def __init__(self) -> None:
        self.config: dict[str, str] = {}
        self.skipped: list[str] = []

    def add(self, label: str, value: Any, *, expand: bool = True) -> None:
        if isinstance(value, _CODE_LIKE) or inspect.isroutine(value):
            return  # code, not configuration: not followed
        if len(self.config) >= MAX_CONFIG_PARTS:
            label = "..."
        flat = not expand or label == "..." or isinstance(value, (enum.Enum, tuple))
        fields = None if flat else _record_fields(value)
        if fields is not None:
            # a config object (dataclass, attrs, pydantic): its class, then one part per field, so
            # a refusal names the field that changed (``partial argument config.temperature``)
            self.config[label] = _digest([_type_tag(type(value)).decode(), [name for name, _ in fields]])
            for name, item in fields:
                self.add(f"{label}.{name}", item, expand=False)  # nested objects: by value, whole
            # attributes the object carries besides its declared fields (``cfg.extra = 5`` on a
            # dataclass, a pydantic private attribute) are configuration fn can read as well:
            # left out, a change to one resumed silently with no word (trust round 6)
            for name, item in _undeclared_attributes(value, {name for name, _ in fields}):
                self.add(f"{label}.{name}", item, expand=False)
            return
        try:
            digest = _digest(value)
        except (_NotPlain, RecursionError, ValueError, TypeError) as why:
            text = str(why)
            detail = f": {text}" if text and text != type(value).__name__ else ""
            self.skipped.append(f"{label} ({type(value).__name__}{detail})")
            return
        if label == "...":
            digest = _digest([self.config.get("...", ""), digest])
        self.config[label] = digest

    def attributes(self, prefix: str, obj: Any) -> None:
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            for key in sorted(state, key=str):
                if isinstance(key, str) and not key.startswith("__"):
                    self.add(f"{prefix}.{key}", state[key])
        for slot in _slots(type(obj)):
            if hasattr(obj, slot):
                self.add(f"{prefix}.{slot}", getattr(obj, slot))


def _slots(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else [s for s in slots if s not in ("__dict__", "__weakref__")])
    return names


def _code_names(code: types.CodeType, depth: int = 0) -> set[str]:
    names = set(code.co_names)
    if depth < 20:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names |= _code_names(const, depth + 1)
    return names


def _function_config(found: _Collector, func: types.FunctionType, prefix: str) -> None:
    code = func.__code__
    if func.__closure__:
        for name, cell in zip(code.co_freevars, func.__closure__):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned after the function was made)
                continue
            found.add(f"{prefix}closure {name}", value)
    for i, value in enumerate(func.__defaults__ or ()):
        found.add(f"{prefix}default {code.co_varnames[code.co_argcount - len(func.__defaults__ or ()) + i]}", value)
    for name, value in sorted((func.__kwdefaults__ or {}).items()):
        found.add(f"{prefix}default {name}", value)
    module_globals = func.__globals__
    builtins = module_globals.get("__builtins__")
    for name in sorted(_code_names(code)):
        if name in module_globals and not name.startswith("__"):
            value = module_globals[name]
            if builtins is not None and value is getattr(builtins, name, None):
                continue
            found.add(f"{prefix}global {name}", value)


def _collect(found: _Collector, fn: Callable, prefix: str = "", depth: int = 0) -> None:
    if depth > 4:
        return
    wrapped = getattr(fn, "__wrapped__", None)
    if callable(wrapped) and not isinstance(fn, types.FunctionType):
        _collect(found, wrapped, prefix, depth + 1)  # a wrapper object (map's) is identified by what it wraps
        return
    if isinstance(fn, functools.partial):
        for i, arg in enumerate(fn.args):
            found.add(f"{prefix}partial argument {i}", arg)
        for key, arg in sorted(fn.keywords.items()):
            found.add(f"{prefix}partial argument {key}", arg)
        _collect(found, fn.func, prefix, depth + 1)
    elif isinstance(fn, types.MethodType):
        found.attributes(f"{prefix}self", fn.__self__)
        _collect(found, fn.__func__, prefix, depth + 1)
    elif isinstance(fn, types.FunctionType):
        _function_config(found, fn, prefix)
    elif not isinstance(fn, (type, types.BuiltinFunctionType)) and callable(fn):
        found.attributes(f"{prefix}self", fn)  # a callable instance: its attributes
        call = inspect.getattr_static(type(fn), "__call__", None)
        if isinstance(call, types.FunctionType):
            _function_config(found, call, prefix)


def fn_identity(fn: Callable) -> FnIdentity:
    """fn's :class:`FnIdentity`: name, code digest, plain-data configuration and what was skipped."""
    found = _Collector()
    try:
        _collect(found, fn)
    except Exception as exc:  # arbitrary objects' attributes: never fail a run over identity
        found.skipped.append(f"the rest ({type(exc).__name__})")
    return FnIdentity(name=fn_name(fn), code=fn_code(fn), config=found.config, skipped=tuple(found.skipped))

"""Pipelines: the public top-level functions of the operator's module.

A pipeline is ``fn(input)`` or ``fn(input, config)`` where ``config`` is annotated with a
pydantic model; API callers name a pipeline, they never send code.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sysconfig
import typing
from dataclasses import dataclass

from pydantic import BaseModel

from ..errors import UsageError


@dataclass(frozen=True, eq=False)
class Pipeline:
    name: str
    fn: typing.Callable
    description: str
    config_model: type[BaseModel] | None  # None for fn(input)

    def config_schema(self) -> dict | None:
        return self.strict_model.model_json_schema() if self.config_model else None

    @functools.cached_property
    def strict_model(self) -> type[BaseModel]:
        """The config model refusing keys it does not know (a typo must not be ignored silently)."""
        assert self.config_model is not None
        config = {**self.config_model.model_config, "extra": "forbid"}
        return type(
            self.config_model.__name__,
            (self.config_model,),
            {"model_config": config, "__doc__": self.config_model.__doc__},
        )

    def validate_config(self, config: dict | None) -> dict:
        """The job's config as stored (JSON); raises pydantic's ValidationError."""
        if self.config_model is None:
            return {}
        return self.strict_model.model_validate(config or {}).model_dump(mode="json")

    def bound(self, config: dict | None):
        """The function optimize() calls: ``fn`` with its validated config bound."""
        if self.config_model is None:
            return self.fn
        return functools.partial(self.fn, config=self.config_model.model_validate(config or {}))


def _config_model(fn) -> tuple[bool, type[BaseModel] | None]:
    """(usable, config model) of a function's signature."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False, None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(positional) == 1 and len(required) <= 1:
        return True, None
    if len(positional) == 2 and positional[1].name == "config" and len(required) <= 2:
        try:
            hints = typing.get_type_hints(fn)
        except Exception:
            return False, None
        model = hints.get("config")
        if isinstance(model, type) and issubclass(model, BaseModel):
            return True, model
    return False, None


def _installed(module) -> bool:
    """A standard-library or installed module (its functions were not written as pipelines)."""
    path = getattr(module, "__file__", None)
    if not path:
        return True  # built into the interpreter
    path = os.path.realpath(path)
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(path.startswith(os.path.realpath(r) + os.sep) for r in roots if r)


def parse_spec(spec: str) -> tuple[str, tuple[str, ...] | None]:
    """``MODULE`` or ``MODULE:fn1,fn2`` -> (module, names or None)."""
    module, _, names = spec.partition(":")
    listed = tuple(n.strip() for n in names.split(",") if n.strip()) if names else None
    return module, listed


def load_pipelines(module_name: str, names: tuple[str, ...] | list[str] | None = None) -> dict[str, Pipeline]:
    """Import the operator's module and collect its pipelines (one line per problem): every public
    top-level function it defines, or only ``names``."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"--pipelines {module_name}: cannot import it ({exc}); put its directory on "
            "PYTHONPATH or run `shardwright serve` from there"
        ) from None
    if names is None and _installed(module):
        raise UsageError(
            f"--pipelines {module_name}: it is a standard-library or installed module, whose functions were not "
            f"written as pipelines; name the ones to serve: --pipelines {module_name}:fn1,fn2"
        )
    found: dict[str, Pipeline] = {}
    for name, obj in vars(module).items():
        if names is not None and name not in names:
            continue
        if name.startswith("_") or not inspect.isfunction(obj) or obj.__module__ != module.__name__:
            continue
        usable, model = _config_model(obj)
        if usable:
            found[name] = Pipeline(name, obj, inspect.getdoc(obj) or "", model)
    missing = sorted(set(names or ()) - set(found))
    if missing:
        raise UsageError(
            f"--pipelines {module_name}: {', '.join(missing)} not public top-level function(s) fn(input) or "
            f"fn(input, config: SomePydanticModel) of it"
        )
    if not found:
        raise UsageError(
            f"--pipelines {module_name}: no pipeline in it; define public top-level functions "
            "fn(input) or fn(input, config: SomePydanticModel)"
        )
    return found

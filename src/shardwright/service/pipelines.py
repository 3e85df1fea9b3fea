"""Pipelines: the public top-level functions of the operator's module.

A pipeline is ``fn(input)`` or ``fn(input, config)`` where ``config`` is annotated with a
pydantic model; API callers name a pipeline, they never send code.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import typing
from dataclasses import dataclass

from pydantic import BaseModel

from ..errors import UsageError


@dataclass(frozen=True)
class Pipeline:
    name: str
    fn: typing.Callable
    description: str
    config_model: type[BaseModel] | None  # None for fn(input)

    def config_schema(self) -> dict | None:
        return self.config_model.model_json_schema() if self.config_model else None

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


def load_pipelines(module_name: str) -> dict[str, Pipeline]:
    """Import the operator's module and collect its pipelines (one line per problem)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"--pipelines {module_name}: cannot import it ({exc}); put its directory on "
            "PYTHONPATH or run `shardwright serve` from there"
        ) from None
    found: dict[str, Pipeline] = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or not inspect.isfunction(obj) or obj.__module__ != module.__name__:
            continue
        usable, model = _config_model(obj)
        if usable:
            found[name] = Pipeline(name, obj, inspect.getdoc(obj) or "", model)
    if not found:
        raise UsageError(
            f"--pipelines {module_name}: no pipeline in it; define public top-level functions "
            "fn(input) or fn(input, config: SomePydanticModel)"
        )
    return found

"""The engine: optimize() and the worker processes that carry out the commit protocol."""

from .result import OptimizeResult
from .run import optimize

__all__ = ["OptimizeResult", "optimize"]

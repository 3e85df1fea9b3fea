"""Checks for new-user mistakes that only show up in a worker process, caught in the main
process before anything is written (or, where that is impossible, explained when they happen)."""

from __future__ import annotations

import multiprocessing
import re
import sys
from collections.abc import Callable

from ..errors import UsageError

__all__ = ["DAEMONIC_HINT", "check_main_guard", "check_not_bootstrapping", "explain_fn_error"]

_GUARD = re.compile(r"""^if\s+__name__\s*==\s*['"]__main__['"]\s*:""", re.M)
DAEMONIC_HINT = (
    " (shardwright runs fn in daemonic worker processes, which cannot start processes of their own: "
    "let num_workers= parallelise over inputs instead of a multiprocessing.Pool inside fn, or use a "
    "thread pool (concurrent.futures.ThreadPoolExecutor) inside fn)"
)


def check_not_bootstrapping() -> None:
    """optimize() called while a spawned worker imports the user's script: the script has no
    ``if __name__ == "__main__":`` guard, so every worker would start a run of its own."""
    if (
        multiprocessing.current_process().name != "MainProcess"
        and getattr(sys.modules.get("__main__"), "__name__", "") == "__mp_main__"
    ):
        raise UsageError(
            "optimize() was called while a worker process was importing your script (start_method 'spawn' or "
            "'forkserver' re-imports it): put the call under `if __name__ == \"__main__\":`"
        )


def check_main_guard(fn: Callable, start_method: str) -> None:
    """Under spawn/forkserver, a fn defined in a script without the guard makes every worker
    rerun the script's top level: refuse before starting them."""
    if start_method == "fork" or getattr(fn, "__module__", None) != "__main__":
        return
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not str(path).endswith(".py"):
        return  # a notebook or the REPL: nothing is re-imported from a file
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            source = f.read()
    except OSError:
        return
    if not _GUARD.search(source):
        raise UsageError(
            f"{path} calls optimize() at its top level and start_method={start_method!r} re-imports it in every "
            'worker, which would run it again: put the call under `if __name__ == "__main__":`'
        )


def explain_fn_error(message: str) -> str:
    """fn's error message with the why and the fix for mistakes that look obscure in it."""
    if "daemonic processes are not allowed to have children" in message:
        return message + DAEMONIC_HINT
    return message

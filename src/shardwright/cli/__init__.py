"""The ``shardwright`` command line (see :func:`shardwright.cli.main.main`)."""

from .main import main

__all__ = ["main"]

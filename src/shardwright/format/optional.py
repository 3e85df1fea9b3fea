"""Optional libraries (Pillow, tifffile, pdfplumber, nibabel, trimesh, torch_geometric,
torchcodec): imported on first use, or one line naming the package to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import UnsupportedFormatError

__all__ = ["available", "require"]


def require(module: str, package: str, what: str) -> ModuleType:
    """``module``, imported; raises UnsupportedFormatError (an ImportError's message) naming
    ``package`` when it is not installed or does not load."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # an installed wheel that does not load (torchvision here) counts as absent
        raise UnsupportedFormatError(
            f"{what} need the '{package}' package ({type(exc).__name__}: {exc}); install it: pip install {package}"
        ) from None


def available(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True

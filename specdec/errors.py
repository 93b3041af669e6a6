"""The library's one error base class.

Every error specdec raises on purpose derives from :class:`SpecdecError`, so a caller can catch all of them in one
``except`` clause (the command line does, and prints one line). Each concrete error also derives from the builtin
it refines (``ValueError``, ``FileNotFoundError``, ...), so code written against the builtins keeps working.
"""

from __future__ import annotations

__all__ = ["SpecdecError"]


class SpecdecError(Exception):
    """Base class of every error specdec raises on purpose: bad input, an unsupported model, a missing asset."""

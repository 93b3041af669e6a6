"""The library's one error base class, and how an error becomes the command line's one line.

Every error specdec raises on purpose derives from :class:`SpecdecError`, so a caller can catch all of them in one
``except`` clause (the command line does, and prints one line: :func:`error_exit`). Each concrete error also derives
from the builtin it refines (``ValueError``, ``FileNotFoundError``, ...), so code written against the builtins keeps
working.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "EXIT_USAGE",
    "BackendError",
    "IncompatibleVerifierError",
    "SpecdecError",
    "UnservableDrafterError",
    "UsageError",
    "VocabMismatchError",
    "error_exit",
    "print_error",
    "user_message",
]

#: The exit code of a user mistake.
EXIT_USAGE = 2


class SpecdecError(Exception):
    """Base class of every error specdec raises on purpose: bad input, an unsupported model, a missing asset.

    Attributes:
        command_lines: the command line's line for this error, by command (``"generate"``, ``"bench"``), where the
            library's own message names a Python fix (a target's ``max_len``) that has an option instead;
            ``{problem}`` stands for the message up to its first ``"; "`` (library messages state the problem
            first and its fix after).
    """

    command_lines: ClassVar[Mapping[str, str]] = {}


class BackendError(SpecdecError, ValueError):
    """A backend choice that cannot serve a model exactly (or is not a choice at all)."""


class VocabMismatchError(SpecdecError, ValueError):
    """Drafter and target disagree on the vocabulary size."""


class UnservableDrafterError(SpecdecError, ValueError):
    """A drafter cannot serve where it is used: a part of a composite drafter (its vocabulary, hidden states the
    target lacks, a proposer without ``propose``), or a drafter without proposals under a policy of proposals only."""


class IncompatibleVerifierError(SpecdecError, ValueError):
    """A verifier pinned by the user cannot verify the trees a policy grows at the requested sampling settings."""


class UsageError(SpecdecError):
    """A user error reported as one line with exit code 2 (the message is the line)."""


def user_message(error: SpecdecError, command: str | None = None) -> str:
    """The ``specdec: error:`` line of an error the library raised on purpose, in the command line's terms: the
    error class's :attr:`~SpecdecError.command_lines` entry for ``command``, else the message itself (which already
    says what to change)."""
    line = type(error).command_lines.get(command) if command else None
    return str(error) if line is None else line.format(problem=str(error).split("; ")[0])


def error_exit(error: SpecdecError, command: str | None = None) -> int:
    """Print an error the library raised on purpose as one ``specdec: error:`` line; returns the usage exit code
    (shared by ``specdec`` and ``python -m specdec.train.cli``, the entry point ``accelerate launch`` runs)."""
    return print_error(user_message(error, command))


def print_error(message: str) -> int:
    """Print ``message`` as one ``specdec: error:`` line (the lines of a multi-line message, a list of problems,
    joined by ``"; "``, or by a space after a line that ends in a colon); returns :data:`EXIT_USAGE`."""
    parts = [part.strip() for part in message.splitlines() if part.strip()]
    line = parts[0] if parts else ""
    for part in parts[1:]:
        line += (" " if line.endswith(":") else "; ") + part
    print(f"specdec: error: {line}", file=sys.stderr)
    return EXIT_USAGE

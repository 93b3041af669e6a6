"""A verifier around another one: the testing tools that record, script or break a verifier start here."""

from __future__ import annotations

from specdec.interfaces import TreeKind, Verifier
from specdec.sampling import SamplingParams

__all__ = ["WrappedVerifier"]


class WrappedVerifier(Verifier):
    """Serves and reads what ``inner`` does (its refusals and whether it reads point masses); subclasses change
    :meth:`verify` (or the plan) and nothing about which trees they accept."""

    def __init__(self, inner: Verifier) -> None:
        self.inner = inner

    @property
    def reads_point_masses(self) -> bool:
        return self.inner.reads_point_masses

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        return self.inner.refuses(kind, sampling)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

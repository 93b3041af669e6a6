"""specdec: lossless speculative decoding (EAGLE family) as small, swappable parts."""

from specdec.interfaces import (
    Drafter,
    HiddenRequest,
    Target,
    TargetHidden,
    TargetStep,
    TreePolicy,
    Verdict,
    Verifier,
    VocabMismatchError,
)
from specdec.sampling import NonFiniteLogitsError, SamplingParams, sample, warp
from specdec.tree import DraftTree, PartialTree

__version__ = "0.1.0"

__all__ = [
    "Drafter",
    "DraftTree",
    "HiddenRequest",
    "NonFiniteLogitsError",
    "PartialTree",
    "SamplingParams",
    "Target",
    "TargetHidden",
    "TargetStep",
    "TreePolicy",
    "Verdict",
    "Verifier",
    "VocabMismatchError",
    "sample",
    "warp",
]

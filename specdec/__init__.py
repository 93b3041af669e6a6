"""specdec: lossless speculative decoding (EAGLE family) as small, swappable parts.

Everything a pipeline needs is importable from here::

    from specdec import HFTarget, SamplingParams, build_method, chat_ids, load_smollm2

The roles (:class:`Drafter`, :class:`TreePolicy`, :class:`Verifier`, :class:`Target`) and their carriers load
eagerly; the parts that need transformers (targets, drafters, methods, models) load on first use.
"""

from __future__ import annotations

import importlib

from specdec.errors import SpecdecError
from specdec.interfaces import (
    Drafter,
    HiddenRequest,
    IncompatibleVerifierError,
    Target,
    TargetHidden,
    TargetStep,
    TreeKind,
    TreePolicy,
    Verdict,
    Verifier,
    VocabMismatchError,
)
from specdec.sampling import NonFiniteLogitsError, SamplingParams, sample, warp
from specdec.tree import DraftTree, PartialTree

__version__ = "0.1.0"

#: Public names loaded on first use: name -> module.
_LAZY = {
    "HFTarget": "specdec.target",
    "CacheFullError": "specdec.kvcache",
    "EmptyPromptError": "specdec.target",
    "UnsupportedModelError": "specdec.attention",
    "DrafterOutputError": "specdec.tree_checks",
    "InvalidTreeError": "specdec.tree_checks",
    "SpeculativeGenerator": "specdec.generate",
    "VanillaGenerator": "specdec.generate",
    "StopCondition": "specdec.generate",
    "GenerationResult": "specdec.generate",
    "BatchRowError": "specdec.batched",
    "RowEvent": "specdec.batched",
    "build_method": "specdec.methods",
    "MethodOptions": "specdec.methods",
    "method_names": "specdec.methods",
    "load_smollm2": "specdec.models",
    "load_model": "specdec.models",
    "MissingAssetError": "specdec.models",
    "chat_ids": "specdec.assets",
    "NGramDrafter": "specdec.drafters",
    "RetrievalDrafter": "specdec.drafters",
    "CompositeDrafter": "specdec.drafters",
    "SmallLMDrafter": "specdec.drafters",
    "EagleDrafter": "specdec.drafters",
    "Eagle3Drafter": "specdec.drafters",
    "AdaptiveTreePolicy": "specdec.trees",
    "ByTemperature": "specdec.trees",
    "CompositeTreePolicy": "specdec.trees",
    "DynamicTreePolicy": "specdec.trees",
    "StaticTreePolicy": "specdec.trees",
    "StochasticTreePolicy": "specdec.trees",
    "verifier_for": "specdec.verify",
    "load_eagle_head": "specdec.checkpoints",
    "CheckpointError": "specdec.checkpoints",
    "TargetTakenError": "specdec.calls",
}

__all__ = [
    "DraftTree",
    "Drafter",
    "HiddenRequest",
    "IncompatibleVerifierError",
    "NonFiniteLogitsError",
    "PartialTree",
    "SamplingParams",
    "SpecdecError",
    "Target",
    "TargetHidden",
    "TargetStep",
    "TreeKind",
    "TreePolicy",
    "Verdict",
    "Verifier",
    "VocabMismatchError",
    "sample",
    "warp",
    *_LAZY,
]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specdec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)

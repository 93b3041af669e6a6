"""The planted bugs of :mod:`specdec.testing.broken` as transformations of a user's pipeline.

A :class:`Control` says which pipelines a bug can be planted in (the kind of tree the policy grows and the sampling)
and builds the same pipeline with the bug: the same target, drafter and policy (a copy: what a broken run teaches
an adaptive policy stays out of the user's) with a broken verifier, or a target that compacts its cache wrongly.
:func:`applicable_controls` lists those that apply; :mod:`specdec.testing.power` runs the user's check on each.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from specdec.generate import SpeculativeGenerator
from specdec.interfaces import TreeKind
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing import broken
from specdec.testing.pipeline import policy_copy
from specdec.verify import verifier_for

__all__ = ["CONTROLS", "Control", "applicable_controls"]


def _warps(s: SamplingParams) -> bool:
    return s.temperature != 1.0 or bool(s.top_k) or s.top_p < 1.0


@dataclass(frozen=True)
class Control:
    """One planted bug.

    Attributes:
        name: the class in :mod:`specdec.testing.broken` (the name a report uses).
        bug: what is wrong, in a few words.
        path: the :data:`~specdec.testing.coverage.EVENTS` key of the walk's path the bug lives on.
        hint: what exercises that path, for a report that found no power.
        applies: ``(kind, sampling) -> bool``: the pipelines it can be planted in.
        build: ``(decoder, kind, sampling) -> decoder``: the same pipeline with the bug.
    """

    name: str
    bug: str
    path: str
    hint: str
    applies: Callable[[TreeKind, SamplingParams], bool]
    build: Callable[[SpeculativeGenerator, TreeKind, SamplingParams], SpeculativeGenerator]


def _with_verifier(make) -> Callable[[SpeculativeGenerator, TreeKind, SamplingParams], SpeculativeGenerator]:
    def build(decoder: SpeculativeGenerator, kind: TreeKind, sampling: SamplingParams) -> SpeculativeGenerator:
        return SpeculativeGenerator(decoder.target, decoder.drafter, policy_copy(decoder), make(kind, sampling))

    return build


def _index_order_compaction(decoder: SpeculativeGenerator, kind: TreeKind, s: SamplingParams) -> SpeculativeGenerator:
    target = copy.copy(decoder.target)  # same model and cache objects; only ``commit`` differs
    target.__class__ = broken.IndexOrderCompactionTarget
    return SpeculativeGenerator(target, decoder.drafter, policy_copy(decoder), decoder.verifier)


def _deterministic_tree(k: TreeKind, s: SamplingParams) -> bool:
    return not s.greedy and not k.sampled and not k.chain


def _sampled_tree(k: TreeKind, s: SamplingParams) -> bool:
    return not s.greedy and k.sampled and not k.point_masses and not k.chain


_SIBLINGS = "a tree with two or more candidates per node whose target probabilities are both > 0 (no top-k cut)"
CONTROLS: tuple[Control, ...] = (
    Control(
        "ResidualNotRenormalisedVerifier",
        "later siblings accepted with the raw p, not renormalised",
        "later_siblings",
        _SIBLINGS,
        _deterministic_tree,
        _with_verifier(lambda k, s: broken.ResidualNotRenormalisedVerifier()),
    ),
    Control(
        "OneSidedWarpVerifier",
        "acceptance from softmax(logits), residual from the warped p",
        "cycles",
        "sampling that warps (temperature != 1, top-k or top-p)",
        lambda k, s: _deterministic_tree(k, s) and _warps(s),
        _with_verifier(lambda k, s: broken.OneSidedWarpVerifier()),
    ),
    Control(
        "GreedyBonusOffByOneVerifier",
        "greedy bonus token off by one",
        "cycles",
        "temperature 0",
        lambda k, s: s.greedy,
        _with_verifier(lambda k, s: broken.GreedyBonusOffByOneVerifier()),
    ),
    Control(
        "StaleQVerifier",
        "siblings judged against q with no draw removed",
        "later_siblings",
        "a sampled tree with two or more children per node",
        _sampled_tree,
        _with_verifier(lambda k, s: broken.StaleQVerifier(max_children=k.max_children)),
    ),
    Control(
        "IgnoresQVerifier",
        "sampled candidates accepted as if q were one-hot",
        "cycles",
        "a sampled tree",
        _sampled_tree,
        _with_verifier(lambda k, s: broken.IgnoresQVerifier(max_children=k.max_children)),
    ),
    Control(
        "OnlyZeroRejectedResidualVerifier",
        "residual zeroes the rejected token instead of max(0, p - q)",
        "residual_bonuses",
        "a sampled tree whose draws get rejected",
        _sampled_tree,
        _with_verifier(lambda k, s: broken.OnlyZeroRejectedResidualVerifier(max_children=k.max_children)),
    ),
    Control(
        "WrongTemperatureQVerifier",
        "q recorded at temperature 1, draws made at T",
        "cycles",
        "a sampled tree at temperature != 1",
        lambda k, s: _sampled_tree(k, s) and s.temperature != 1.0,
        _with_verifier(lambda k, s: broken.WrongTemperatureQVerifier(max_children=k.max_children)),
    ),
    Control(
        "PointMassAsDrawVerifier",
        "a point-mass child judged as a draw from q",
        "cycles",
        "a composite drafter whose proposals enter the tree",
        lambda k, s: not s.greedy and k.point_masses,
        _with_verifier(lambda k, s: broken.PointMassAsDrawVerifier(max_children=k.max_children)),
    ),
    Control(
        "BlockFirstFailureVerifier",
        "block verification stops at the first failing position",
        "multi_tests",
        "chains of depth 2 or more whose drafts get accepted",
        lambda k, s: not s.greedy and k.chain,
        _with_verifier(lambda k, s: broken.BlockFirstFailureVerifier()),
    ),
    Control(
        "BlockTokenResidualVerifier",
        "block verification with token-level residuals",
        "residual_bonuses",
        "chains of depth 2 or more whose drafts get accepted",
        lambda k, s: not s.greedy and k.chain,
        _with_verifier(lambda k, s: broken.BlockTokenResidualVerifier()),
    ),
    Control(
        "SharedCoinsVerifier",
        "one coin per cycle for every acceptance test",
        "multi_tests",
        "trees where a cycle makes two or more acceptance tests",
        lambda k, s: not s.greedy,
        _with_verifier(lambda k, s: broken.SharedCoinsVerifier(verifier_for(k, s))),
    ),
    Control(
        "ReversedSiblingsVerifier",
        "siblings judged in reverse order, tried in index order",
        "later_siblings",
        _SIBLINGS,
        lambda k, s: not s.greedy and not k.chain,
        _with_verifier(lambda k, s: broken.ReversedSiblingsVerifier(verifier_for(k, s))),
    ),
    Control(
        "BonusFromParentRowVerifier",
        "bonus drawn from the parent's residual row",
        "deep_stops",
        "drafts that get accepted",
        lambda k, s: True,
        _with_verifier(lambda k, s: broken.BonusFromParentRowVerifier(verifier_for(k, s))),
    ),
    Control(
        "IndexOrderCompactionTarget",
        "cache compacted in index order, not along the accepted path",
        "off_index_paths",
        "more tokens per run (a cycle must follow one that accepted a later sibling) and trees with siblings",
        lambda k, s: not k.chain,
        _index_order_compaction,
    ),
)


def applicable_controls(
    decoder: SpeculativeGenerator, sampling: SamplingParams, names: tuple[str, ...] | None = None
) -> list[Control]:
    """The controls that can be planted in ``decoder`` at ``sampling`` (``names``: only those)."""
    if names is not None:
        unknown = set(names) - {c.name for c in CONTROLS}
        if unknown:
            raise ValueError(f"unknown controls {sorted(unknown)}; known: {[c.name for c in CONTROLS]}")
    kind = decoder.policy.for_sampling(sampling).kind(sampling)
    out = [c for c in CONTROLS if (names is None or c.name in names) and c.applies(kind, sampling)]
    if not isinstance(decoder.target, HFTarget):
        out = [c for c in out if c.name != "IndexOrderCompactionTarget"]
    return out

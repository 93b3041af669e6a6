"""The settings of the named methods (:mod:`specdec.methods`), validated once.

:class:`MethodOptions` is a pydantic model like :class:`~specdec.sampling.SamplingParams`: an invalid value or a
combination in which one option would change another's meaning is refused where it is built, and
:attr:`MethodOptions.given` (the fields the caller set) lets :func:`specdec.methods.build_method` refuse an option
the chosen method does not read, instead of ignoring it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specdec.trees.dynamic import DEFAULT_DEPTH, DEFAULT_TOPK
from specdec.trees.stochastic import check_draft_temperature_ratio

__all__ = [
    "ADAPTIVE_OPTIONS",
    "HEAD_OPTIONS",
    "RETRIEVAL_OPTIONS",
    "SAMPLED_MENU",
    "SAMPLED_OPTIONS",
    "SAMPLED_RANKED",
    "SAMPLED_SHAPES",
    "SHORTLIST_OPTIONS",
    "TREE_OPTIONS",
    "MethodOptions",
    "check_sampled_tree",
]

#: Shapes of sampled trees (``MethodOptions.sampled_tree``): rank paths whose children are draws without replacement
#: from the draft distribution (:class:`~specdec.trees.stochastic.StochasticTreePolicy`).
SAMPLED_SHAPES: dict[str, tuple[tuple[int, ...], ...]] = {
    "chain2": ((0,), (0, 0)),
    "r3": ((0,), (1,), (2,)),
    "r3d": ((0,), (1,), (2,), (0, 0), (1, 0)),
    "t6": ((0,), (1,), (0, 0), (1, 0), (0, 0, 0)),
}
#: ``MethodOptions.sampled_tree`` value for a shape chosen per cycle from a menu by measured rate
#: (:class:`~specdec.trees.menu.SampledMenuPolicy`: the root alone up to ``r3d``).
SAMPLED_MENU = "menu"
#: ``MethodOptions.sampled_tree`` value for a tree shaped each cycle from measured acceptance per draw rank and the cost
#: curve (:class:`~specdec.trees.ranked.RankedSampledPolicy`: up to 16 nodes).
SAMPLED_RANKED = "ranked"


def check_sampled_tree(name: str) -> None:
    """Refuse a sampled tree that is not a :data:`SAMPLED_SHAPES` name, :data:`SAMPLED_MENU` or :data:`SAMPLED_RANKED`
    (ValueError)."""
    names = (*SAMPLED_SHAPES, SAMPLED_MENU, SAMPLED_RANKED)
    if name not in names:
        raise ValueError(f"unknown sampled tree {name!r}; choose from {', '.join(names)}")


#: Options of the adaptive budget (a fixed ``total_tokens`` has none).
ADAPTIVE_OPTIONS = ("max_total_tokens", "adapt_depth", "deferred_budget")
#: Options read by a method whose tree at T = 0 is the dynamic (EAGLE-2) tree.
TREE_OPTIONS = ("topk", "depth", "total_tokens", *ADAPTIVE_OPTIONS)
#: Options read by a method that drafts with an EAGLE head.
HEAD_OPTIONS = ("head_dir", "draft_weights")
#: Options read by a method whose EAGLE-1 head may draft over a shortlist (EAGLE-3 heads carry their own vocabulary).
SHORTLIST_OPTIONS = ("draft_shortlist",)
#: Options read by a method that drafts by retrieval.
RETRIEVAL_OPTIONS = ("corpus",)
#: Options read by a method that draws a sampled tree at T > 0.
SAMPLED_OPTIONS = ("sampled_tree", "draft_temperature_ratio", "sampled_level_gate")


class MethodOptions(BaseModel):
    """Tree and drafter settings of the named methods (CPU-sized defaults); each method reads some of them
    (:attr:`specdec.methods.Method.reads`) and :func:`~specdec.methods.build_method` refuses one it does not read.

    Dynamic-tree methods size their tree per cycle by default (:class:`~specdec.trees.adaptive.AdaptiveTreePolicy`:
    the target's forward cost is measured once per machine and thread count, then cached). ``total_tokens``
    forces a fixed size. The tree defaults are the library's one set (:mod:`specdec.trees.dynamic`). No option
    changes another's meaning: where two would (an adaptive-budget option beside a fixed ``total_tokens``, a
    sampled-tree option without a sampled tree), the pair is refused.

    Attributes:
        topk: children per expanded node of the dynamic tree.
        depth: expansion levels of the dynamic tree.
        total_tokens: a fixed size of the dynamic tree (root included), the whole tree for ``composite`` (the EAGLE
            tree is grown smaller by the room kept for retrieval); None (default): chosen per cycle from measured
            costs.
        max_total_tokens: the largest tree the adaptive budget may choose (the whole tree for ``composite``).
        adapt_depth: let the adaptive budget shorten the expansion depth when deep levels do not pay.
        deferred_budget: the adaptive budget sizes each tree from the previous cycle's draft values, which ride on
            the decoding loop's one host sync, instead of reading this cycle's values (one more sync per cycle).
            None (default): deferred on a static-shape target on CUDA, where one sync per cycle is the point (a
            CPU never waits for a sync, and the level-by-level choice drafts fewer levels: on the ahead-of-time
            package path of AMD Zen 3, EAGLE-3 ran 0.90x its vanilla level by level against 0.83x deferred, one
            process: ``docs/results/2026-11-28-aot-zen3/deferred_ab.py``).
        draft_weights: how EAGLE heads' weights run (:mod:`specdec.backends`; ``"auto"``: int8 on a CPU, eager
            steps there even on a static-shape target, :func:`specdec.drafters.eagle_steps.draft_backend`). Static
            shapes otherwise, and the small-LM drafter's layers (the target's own), follow the target.
        small_lm_layers: decoder layers of the ``small-lm`` drafter cut from the target (default: a fifth of them,
            at least one; 6 of SmolLM2's 30).
        head_dir: the EAGLE head folder of the eagle methods (default: the head shipped for SmolLM2).
        draft_shortlist: EAGLE-1/HASS heads draft over the shortlist shipped beside the head
            (``draft_vocab.safetensors``) when there is one, instead of the full vocabulary.
        sampled_tree: at temperature > 0, the methods that sample (``Method.sampled_tree``) draw a static tree of
            this :data:`SAMPLED_SHAPES` shape with children sampled from the draft distribution, verified by
            stochastic multi-round verification, instead of the dynamic tree of top-k children (measured: more
            tokens per target forward at T = 1, see the results page). ``"menu"`` (:data:`SAMPLED_MENU`) chooses
            each cycle's shape from the root alone up to ``r3d`` by the measured cost curve and accepted lengths
            (:class:`~specdec.trees.menu.SampledMenuPolicy`); ``"ranked"`` (:data:`SAMPLED_RANKED`) shapes each
            cycle's tree, up to 16 nodes, from the measured acceptance per draw rank and the cost curve
            (:class:`~specdec.trees.ranked.RankedSampledPolicy`). None keeps the dynamic tree at every temperature.
            Temperature 0 always uses the dynamic tree.
        draft_temperature_ratio: the sampled tree's children are drawn at this multiple of the call's temperature
            (lossless for any value: the verifier reads the q they were drawn from,
            :class:`~specdec.trees.stochastic.StochasticTreePolicy`). Default 0.7, measured with the shipped EAGLE-3
            head on AMD Zen 3 (16 MT-bench prompts x 96 tokens, interleaved): τ 1.53 -> 1.57 at T = 1 and 1.67 ->
            1.69 at T = 0.7 with top-p 0.9; one draw at the root is accepted with probability 0.256 at ratio 1 and
            0.292 at 0.7 (``benchmarks/draft_temperature.py``); at 0.5 τ fell (1.50 -> 1.47 in a 10-prompt run).
        sampled_level_gate: the sampled tree draws each level after the root's only where this cycle's draws say it
            pays (:class:`~specdec.trees.level_gate.LevelGate`, priced by the target's cost curve).
        corpus: retrieval (``retrieval``, ``composite``) also continues from this corpus of earlier text where the
            context has no match of its own (:class:`~specdec.drafters.retrieval.RetrievalCorpus`, a file written by
            ``specdec data corpus``, e.g. of the target's own greedy responses; indexed once per process: 3-6 s and
            0.8 GB for SmolLM2's 1.4 M tokens). None (default): the context alone. Measured on Spec-Bench 30 at
            T = 0 (docs/results.md): retrieval alone τ 1.51 -> 1.64, 1.18x -> 1.20x vanilla; the composite
            unchanged (its EAGLE-3 head learnt the same responses).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    topk: int = Field(DEFAULT_TOPK, ge=1)
    depth: int = Field(DEFAULT_DEPTH, ge=1)
    total_tokens: int | None = Field(None, ge=2)  # a tree size counts the root
    max_total_tokens: int = Field(64, ge=1)
    adapt_depth: bool = True
    deferred_budget: bool | None = None
    small_lm_layers: int | None = Field(None, ge=1)
    head_dir: Path | None = None
    draft_weights: str = "auto"
    draft_shortlist: bool = True
    sampled_tree: str | None = "r3d"
    draft_temperature_ratio: float = 0.7
    sampled_level_gate: bool = False
    corpus: Path | None = None

    @field_validator("draft_temperature_ratio")
    @classmethod
    def _ratio(cls, v: float) -> float:
        check_draft_temperature_ratio(v)
        return v

    @field_validator("sampled_tree")
    @classmethod
    def _shape(cls, v: str | None) -> str | None:
        if v is not None:
            check_sampled_tree(v)
        return v

    @model_validator(mode="after")
    def _independent(self) -> MethodOptions:
        """Refuse pairs in which one option would silently change or void another."""
        given = self.model_fields_set
        if self.total_tokens is not None:
            adaptive = [name for name in ADAPTIVE_OPTIONS if name in given]
            if adaptive:
                raise ValueError(
                    f"{', '.join(adaptive)} set the adaptive budget, and total_tokens={self.total_tokens} fixes the "
                    "tree's size: pass one or the other"
                )
        if self.sampled_level_gate and self.sampled_tree in (None, SAMPLED_MENU, SAMPLED_RANKED):
            raise ValueError(f"sampled_level_gate gates a sampled tree of a fixed shape, not {self.sampled_tree!r}")
        if self.sampled_tree is None and "draft_temperature_ratio" in given:
            raise ValueError("draft_temperature_ratio sets the sampled tree's draws, and sampled_tree=None draws none")
        return self

    @property
    def given(self) -> frozenset[str]:
        """The fields the caller set (the rest hold their defaults)."""
        return frozenset(self.model_fields_set)

    def replace(self, **changes: Any) -> MethodOptions:
        """A validated copy with ``changes``; its :attr:`given` fields are this one's and the changed ones."""
        return type(self)(**{**{name: getattr(self, name) for name in self.model_fields_set}, **changes})

    def only(self, names: frozenset[str] | set[str]) -> MethodOptions:
        """A copy that keeps the given fields among ``names`` (the others at their defaults)."""
        return type(self)(**{name: getattr(self, name) for name in self.model_fields_set if name in names})

"""Named decoding methods for the demo, the command line and the benchmark.

A method is a small function that composes parts around one target; nothing in the library's hot path
looks names up. ``build_method("eagle3", target)`` returns a generator (``generate``/``stream``) that serves any
sampling setting per call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec.generate import SpeculativeGenerator, VanillaGenerator
from specdec.interfaces import Drafter, TreePolicy
from specdec.models import MissingAssetError
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import ByTemperature, DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy
from specdec.trees.dynamic import DEFAULT_DEPTH, DEFAULT_TOPK
from specdec.trees.stochastic import check_draft_temperature_ratio

__all__ = [
    "DYNAMIC_TREE_METHODS",
    "HEAD_KINDS",
    "METHODS",
    "SAMPLED_MENU",
    "SAMPLED_SHAPES",
    "SAMPLED_TREE_METHODS",
    "MethodOptions",
    "build_method",
    "eagle_drafter",
    "shipped_head_dir",
    "method_names",
    "sampled_tree_of",
]

HEADS_DIR = Path(__file__).parent / "heads" / "smollm2-135m-instruct"

#: The EAGLE methods and the kind of shipped head each drafts with (:func:`shipped_head_dir`); a ``head_dir`` of
#: their own must have the same architecture: EAGLE-1 for ``eagle1`` and ``hass`` (HASS trains an EAGLE-1 head),
#: EAGLE-3 for ``eagle3``.
HEAD_KINDS: dict[str, str] = {
    "eagle2": "eagle1",
    "eagle1-static": "eagle1",
    "hass": "hass",
    "eagle3": "eagle3",
    "composite": "eagle3",
}

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


@dataclass(frozen=True)
class MethodOptions:
    """Tree and drafter settings shared by the named methods (CPU-sized defaults).

    Dynamic-tree methods size their tree per cycle by default (:class:`~specdec.trees.adaptive.AdaptiveTreePolicy`:
    the target's forward cost is measured once per machine and thread count, then cached). ``total_tokens``
    forces a fixed size. The tree defaults are the library's one set (:mod:`specdec.trees.dynamic`).

    Attributes:
        total_tokens: a fixed tree size (root included); None (default): chosen per cycle from measured costs.
        max_total_tokens: the largest tree the adaptive budget may choose.
        adapt_depth: let the adaptive budget shorten the expansion depth when deep levels do not pay.
        deferred_budget: the adaptive budget sizes each tree from the previous cycle's draft values, which ride on
            the decoding loop's one host sync, instead of reading this cycle's values (one more sync per cycle).
            None (default): deferred on a static (``"compile"``) target, where one sync per cycle is the point.
        draft_weights: how EAGLE heads' weights run (:mod:`specdec.backends`; ``"auto"``: int8 on a CPU). Static
            shapes, and the small-LM drafter's layers (the target's own), follow the target.
        small_lm_layers: decoder layers of the ``small-lm`` drafter cut from the target (default: a fifth of them,
            at least one; 6 of SmolLM2's 30).
        head_dir: the EAGLE head folder of the eagle methods (default: the head shipped for SmolLM2).
        draft_shortlist: EAGLE-1/HASS heads draft over the shortlist shipped beside the head
            (``draft_vocab.safetensors``) when there is one, instead of the full vocabulary.
        sampled_tree: at temperature > 0, the methods of :data:`SAMPLED_TREE_METHODS` draw a static tree of this
            :data:`SAMPLED_SHAPES` shape with children sampled from the draft distribution, verified by stochastic
            multi-round verification, instead of the dynamic tree of top-k children (measured: more tokens per
            target forward at T = 1, see the results page). ``"menu"`` (:data:`SAMPLED_MENU`) chooses each cycle's
            shape from the root alone up to ``r3d`` by the measured cost curve and accepted lengths
            (:class:`~specdec.trees.menu.SampledMenuPolicy`). None keeps the dynamic tree at every temperature.
            Temperature 0 and a fixed ``total_tokens`` always use the dynamic tree.
        draft_temperature_ratio: the sampled tree's children are drawn at this multiple of the call's temperature
            (lossless for any value: the verifier reads the q they were drawn from,
            :class:`~specdec.trees.stochastic.StochasticTreePolicy`). Default 0.7, measured with the shipped EAGLE-3
            head on AMD Zen 3 (16 MT-bench prompts x 96 tokens, interleaved): τ 1.53 -> 1.57 at T = 1 and 1.67 ->
            1.69 at T = 0.7 with top-p 0.9; one draw at the root is accepted with probability 0.256 at ratio 1 and
            0.292 at 0.7 (``benchmarks/draft_temperature.py``); at 0.5 τ fell (1.50 -> 1.47 in a 10-prompt run).
        sampled_level_gate: the sampled tree draws each level after the root's only where this cycle's draws say it
            pays (:class:`~specdec.trees.level_gate.LevelGate`, priced by the target's cost curve).
    """

    topk: int = DEFAULT_TOPK
    depth: int = DEFAULT_DEPTH
    total_tokens: int | None = None
    max_total_tokens: int = 64
    adapt_depth: bool = True
    deferred_budget: bool | None = None
    small_lm_layers: int | None = None
    head_dir: Path | None = None
    draft_weights: str = "auto"
    draft_shortlist: bool = True
    sampled_tree: str | None = "r3d"
    draft_temperature_ratio: float = 0.7
    sampled_level_gate: bool = False

    def __post_init__(self) -> None:
        check_draft_temperature_ratio(self.draft_temperature_ratio)
        if self.sampled_level_gate and self.sampled_tree in (None, SAMPLED_MENU):
            raise ValueError(f"sampled_level_gate gates a sampled tree of a fixed shape, not {self.sampled_tree!r}")
        if self.sampled_tree is not None and self.sampled_tree not in (*SAMPLED_SHAPES, SAMPLED_MENU):
            names = ", ".join((*SAMPLED_SHAPES, SAMPLED_MENU))
            raise ValueError(f"unknown sampled tree {self.sampled_tree!r}; choose from {names}")


def shipped_head_dir(kind: str) -> Path:
    """Folder of a head shipped for SmolLM2-135M-Instruct (``eagle1``, ``hass`` or ``eagle3``)."""
    path = HEADS_DIR / kind
    if not (path / "config.json").is_file():
        raise MissingAssetError(f"no shipped {kind} head at {path}; train one with `specdec train {kind}`")
    return path


def sampled_tree_of(method: str, sampling: SamplingParams, options: MethodOptions) -> str | None:
    """The :data:`SAMPLED_SHAPES` name ``method`` draws at ``sampling`` (None: its dynamic tree, or not a tree
    method): a method of :data:`SAMPLED_TREE_METHODS` at T > 0 with ``options.sampled_tree``, unless the options fix
    the dynamic tree's size (``total_tokens``)."""
    return None if sampling.greedy else _sampled_shape(method, options)


def _sampled_shape(method: str, options: MethodOptions) -> str | None:
    """The :data:`SAMPLED_SHAPES` name ``method`` draws at T > 0 (None: its dynamic tree at every temperature)."""
    fixed = options.total_tokens is not None  # a dynamic tree of a size the caller chose
    return options.sampled_tree if method in SAMPLED_TREE_METHODS and not fixed else None


def _dynamic(target: HFTarget, o: MethodOptions, method: str) -> TreePolicy:
    """The tree policy of a dynamic-tree ``method``: the dynamic tree of ``o`` (adaptive or fixed) at T = 0, and at
    T > 0 the sampled static tree where :func:`sampled_tree_of` names one (:class:`~specdec.trees.ByTemperature`)."""
    greedy = _dynamic_tree(target, o)
    shape = _sampled_shape(method, o)
    if shape is None:
        return greedy
    if shape == SAMPLED_MENU:
        from specdec.budget import forward_cost_curve
        from specdec.trees.menu import SampledMenuPolicy

        menu = SampledMenuPolicy(forward_cost_curve(target), draft_temperature_ratio=o.draft_temperature_ratio)
        return ByTemperature(greedy, menu)
    gate = None
    if o.sampled_level_gate:
        from specdec.budget import forward_cost_curve
        from specdec.trees.level_gate import LevelGate

        gate = LevelGate(forward_cost_curve(target))
    return ByTemperature(greedy, StochasticTreePolicy(SAMPLED_SHAPES[shape], o.draft_temperature_ratio, gate))


def _dynamic_tree(target: HFTarget, o: MethodOptions) -> TreePolicy:
    if o.total_tokens is not None:
        return DynamicTreePolicy(topk=o.topk, depth=o.depth, total_tokens=o.total_tokens)
    from specdec.budget import forward_cost_curve
    from specdec.trees.adaptive import AdaptiveTreePolicy

    # Measured on first use for this model, device and thread count (seconds), then read from the cache.
    curve = forward_cost_curve(target)
    return AdaptiveTreePolicy(
        o.topk,
        o.depth,
        o.max_total_tokens,
        curve,
        adapt_depth=o.adapt_depth,
        deferred=target.static if o.deferred_budget is None else o.deferred_budget,
    )


def eagle_drafter(target: HFTarget, kind: str, o: MethodOptions | None = None) -> Drafter:
    """The drafter of an EAGLE head for ``target`` (``eagle1``, ``hass`` or ``eagle3``; ``o.head_dir`` or the
    shipped head), its head on ``o.draft_weights``, EAGLE-1/HASS over the head's shortlist when
    ``o.draft_shortlist``."""
    o = o or MethodOptions()
    from specdec.drafters import Eagle3Drafter, EagleDrafter

    head_dir = o.head_dir or shipped_head_dir(kind)
    if kind == "eagle3":
        return Eagle3Drafter.from_target(target, head_dir, o.draft_weights)
    return EagleDrafter.from_target(target, head_dir, o.draft_shortlist, o.draft_weights)


def _vanilla(target, o):
    return VanillaGenerator(target)


def _ngram(target, o):
    from specdec.drafters import NGramDrafter

    return SpeculativeGenerator(target, NGramDrafter.from_target(target), _dynamic(target, o, "ngram"))


def _small_lm(target, o):
    from specdec.drafters import SmallLMDrafter

    return SpeculativeGenerator(
        target, SmallLMDrafter.from_target(target, o.small_lm_layers), _dynamic(target, o, "small-lm")
    )


def _eagle1_static(target, o):
    return SpeculativeGenerator(
        target, eagle_drafter(target, HEAD_KINDS["eagle1-static"], o), StaticTreePolicy.eagle1_default()
    )


def _eagle2(target, o):
    return SpeculativeGenerator(target, eagle_drafter(target, HEAD_KINDS["eagle2"], o), _dynamic(target, o, "eagle2"))


def _hass(target, o):
    return SpeculativeGenerator(target, eagle_drafter(target, HEAD_KINDS["hass"], o), _dynamic(target, o, "hass"))


def _eagle3(target, o):
    return SpeculativeGenerator(target, eagle_drafter(target, HEAD_KINDS["eagle3"], o), _dynamic(target, o, "eagle3"))


def _composed(target: HFTarget, tree_drafter: Drafter | None, base: TreePolicy | None) -> SpeculativeGenerator:
    """A generator whose tree holds ``tree_drafter``'s tree (grown by ``base``) and a retrieval drafter's
    continuation where it pays (:class:`~specdec.trees.CompositeTreePolicy`, priced by the target's cost curve)."""
    from specdec.budget import forward_cost_curve
    from specdec.drafters import CompositeDrafter, RetrievalDrafter
    from specdec.trees import CompositeTreePolicy

    drafter = CompositeDrafter.for_target(target, tree_drafter, [RetrievalDrafter.from_target(target)])
    return SpeculativeGenerator(target, drafter, CompositeTreePolicy(base, curve=forward_cost_curve(target)))


def _retrieval(target, o):
    return _composed(target, None, None)


def _composite(target, o):
    return _composed(target, eagle_drafter(target, HEAD_KINDS["composite"], o), _dynamic(target, o, "composite"))


METHODS: dict[str, Callable] = {
    "vanilla": _vanilla,
    "ngram": _ngram,
    "small-lm": _small_lm,
    "eagle1-static": _eagle1_static,
    "eagle2": _eagle2,
    "hass": _hass,
    "eagle3": _eagle3,
    "retrieval": _retrieval,
    "composite": _composite,
}


#: Methods whose tree is the dynamic (EAGLE-2) tree, so ``MethodOptions`` tree sizes apply to them.
DYNAMIC_TREE_METHODS = ("ngram", "small-lm", "eagle2", "hass", "eagle3", "composite")
#: Methods that draw ``MethodOptions.sampled_tree`` at temperature > 0: drafters with a real draft distribution (an
#: n-gram's q is a point mass, so sampling from it would only draw its top candidate).
SAMPLED_TREE_METHODS = ("small-lm", "eagle2", "hass", "eagle3", "composite")


def method_names() -> list[str]:
    return list(METHODS)


def build_method(
    name: str, target: HFTarget, options: MethodOptions | None = None
) -> SpeculativeGenerator | VanillaGenerator:
    """Compose the named method around ``target``: one generator that serves any sampling setting per call (its
    tree and verifier follow each call's temperature). Raises ``ValueError`` for unknown names."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name](target, options or MethodOptions())

"""Named decoding methods for the demo, the command line and the benchmark.

A method is a small function that composes parts around one target; nothing in the library's hot path
looks names up. ``build_method("eagle3", target)`` returns an object with ``generate``/``stream``.
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
from specdec.trees import DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy
from specdec.verify import default_verifier

__all__ = [
    "DYNAMIC_TREE_METHODS",
    "METHODS",
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

#: Shapes of sampled trees (``MethodOptions.sampled_tree``): rank paths whose children are draws without replacement
#: from the draft distribution (:class:`~specdec.trees.stochastic.StochasticTreePolicy`).
SAMPLED_SHAPES: dict[str, tuple[tuple[int, ...], ...]] = {
    "chain2": ((0,), (0, 0)),
    "r3": ((0,), (1,), (2,)),
    "r3d": ((0,), (1,), (2,), (0, 0), (1, 0)),
    "t6": ((0,), (1,), (0, 0), (1, 0), (0, 0, 0)),
}


@dataclass(frozen=True)
class MethodOptions:
    """Tree and drafter settings shared by the named methods (CPU-sized defaults).

    Dynamic-tree methods size their tree per cycle by default (:class:`~specdec.trees.adaptive.AdaptiveTreePolicy`:
    the target's forward cost is measured once per machine and thread count, then cached). ``total_tokens``
    forces a fixed size; ``adaptive=False`` without ``total_tokens`` uses ``FIXED_TOTAL_TOKENS``.

    Attributes:
        adaptive: choose the tree size per cycle from measured costs (dynamic-tree methods).
        total_tokens: a fixed tree size (root included); None lets ``adaptive`` decide.
        max_total_tokens: the largest tree the adaptive budget may choose.
        adapt_depth: let the adaptive budget shorten the expansion depth when deep levels do not pay.
        deferred_budget: the adaptive budget sizes each tree from the previous cycle's draft values, which ride on
            the decoding loop's one host sync, instead of reading this cycle's values (one more sync per cycle).
            None (default): deferred on a static (``"compile"``) target, where one sync per cycle is the point.
        backend: execution backend of the drafters' models (:mod:`specdec.fastpath`); the target's is set on
            :class:`~specdec.target.HFTarget`.
        small_lm_layers: decoder layers of the ``small-lm`` drafter cut from the target (default: a fifth of them,
            at least one; 6 of SmolLM2's 30).
        head_dir: the EAGLE head folder of the eagle methods (default: the head shipped for SmolLM2).
        draft_shortlist: EAGLE-1/HASS heads draft over the shortlist shipped beside the head
            (``draft_vocab.safetensors``) when there is one, instead of the full vocabulary.
        sampled_tree: at temperature > 0, the methods of :data:`SAMPLED_TREE_METHODS` draw a static tree of this
            :data:`SAMPLED_SHAPES` shape with children sampled from the draft distribution, verified by stochastic
            multi-round verification, instead of the dynamic tree of top-k children (measured: more tokens per
            target forward at T = 1, see the results page). None keeps the dynamic tree at every temperature.
            Temperature 0, a fixed ``total_tokens`` and ``adaptive=False`` always use the dynamic tree.
    """

    topk: int = 8
    depth: int = 5
    adaptive: bool = True
    total_tokens: int | None = None
    max_total_tokens: int = 64
    adapt_depth: bool = True
    deferred_budget: bool | None = None
    small_lm_layers: int | None = None
    head_dir: Path | None = None
    backend: str = "auto"
    draft_shortlist: bool = True
    sampled_tree: str | None = "r3d"

    def __post_init__(self) -> None:
        if self.sampled_tree is not None and self.sampled_tree not in SAMPLED_SHAPES:
            raise ValueError(f"unknown sampled tree {self.sampled_tree!r}; choose from {', '.join(SAMPLED_SHAPES)}")


FIXED_TOTAL_TOKENS = 24


def shipped_head_dir(kind: str) -> Path:
    """Folder of a head shipped for SmolLM2-135M-Instruct (``eagle1``, ``hass`` or ``eagle3``)."""
    path = HEADS_DIR / kind
    if not (path / "config.json").is_file():
        raise MissingAssetError(f"no shipped {kind} head at {path}; train one with `specdec train {kind}`")
    return path


def sampled_tree_of(method: str, sampling: SamplingParams, options: MethodOptions) -> str | None:
    """The :data:`SAMPLED_SHAPES` name ``method`` draws at ``sampling`` (None: its dynamic tree, or not a tree
    method): a method of :data:`SAMPLED_TREE_METHODS` at T > 0 with ``options.sampled_tree``, unless the options fix
    the dynamic tree's size (``total_tokens``, or ``adaptive=False``)."""
    fixed = options.total_tokens is not None or not options.adaptive  # a dynamic tree of a size the caller chose
    sampled = method in SAMPLED_TREE_METHODS and not fixed and not sampling.greedy
    return options.sampled_tree if sampled else None


def _dynamic(target: HFTarget, o: MethodOptions, sampling: SamplingParams, method: str) -> TreePolicy:
    """The tree policy of a dynamic-tree ``method``: the sampled static tree where :func:`sampled_tree_of` names
    one, else the dynamic tree of ``o`` (adaptive or fixed)."""
    shape = sampled_tree_of(method, sampling, o)
    if shape is not None:
        return StochasticTreePolicy(SAMPLED_SHAPES[shape])
    if o.total_tokens is not None or not o.adaptive:
        return DynamicTreePolicy(topk=o.topk, depth=o.depth, total_tokens=o.total_tokens or FIXED_TOTAL_TOKENS)
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


def _speculative(target: HFTarget, drafter, policy, sampling: SamplingParams) -> SpeculativeGenerator:
    stochastic = isinstance(policy, StochasticTreePolicy) and not sampling.greedy
    # Widest sibling group of the shape (its ranks are consecutive draws), so the verifier runs that many rounds.
    max_children = max(level.width for level in policy.shape.levels) if stochastic else None
    chain = isinstance(policy, (StaticTreePolicy, StochasticTreePolicy)) and policy.is_chain
    verifier = default_verifier(stochastic, sampling.temperature, max_children, chain=chain)
    return SpeculativeGenerator(target, drafter, policy, verifier)


def eagle_drafter(target: HFTarget, kind: str, o: MethodOptions | None = None) -> Drafter:
    """The drafter of an EAGLE head for ``target`` (``eagle1``, ``hass`` or ``eagle3``; ``o.head_dir`` or the
    shipped head), on ``o.backend``, EAGLE-1/HASS over the head's shortlist when ``o.draft_shortlist``."""
    o = o or MethodOptions()
    from specdec.checkpoints import load_draft_vocab, load_eagle_head
    from specdec.drafters import Eagle3Drafter, EagleDrafter

    head_dir = o.head_dir or shipped_head_dir(kind)
    head = load_eagle_head(head_dir, target_model=target.model)
    head = head.to(device=target.device, dtype=target.dtype).eval()
    if kind == "eagle3":
        return Eagle3Drafter(head, target.model, max_len=target.max_len, backend=o.backend)
    vocab = load_draft_vocab(head_dir, target.vocab_size) if o.draft_shortlist else None
    return EagleDrafter(head, target.model, max_len=target.max_len, draft_vocab=vocab, backend=o.backend)


def _vanilla(target, sampling, o):
    return VanillaGenerator(target)


def _ngram(target, sampling, o):
    from specdec.drafters import NGramDrafter

    return _speculative(target, NGramDrafter(target.vocab_size), _dynamic(target, o, sampling, "ngram"), sampling)


def _small_lm(target, sampling, o):
    from specdec.drafters import SmallLMDrafter

    layers = o.small_lm_layers or max(1, target.num_layers // 5)
    drafter = SmallLMDrafter.from_target_layers(
        target.model, layers, target.max_len, backend=o.backend, buckets=target.buckets
    )
    return _speculative(target, drafter, _dynamic(target, o, sampling, "small-lm"), sampling)


def _eagle1_static(target, sampling, o):
    return _speculative(target, eagle_drafter(target, "eagle1", o), StaticTreePolicy.eagle1_default(), sampling)


def _eagle2(target, sampling, o):
    return _speculative(target, eagle_drafter(target, "eagle1", o), _dynamic(target, o, sampling, "eagle2"), sampling)


def _hass(target, sampling, o):
    return _speculative(target, eagle_drafter(target, "hass", o), _dynamic(target, o, sampling, "hass"), sampling)


def _eagle3(target, sampling, o):
    return _speculative(target, eagle_drafter(target, "eagle3", o), _dynamic(target, o, sampling, "eagle3"), sampling)


METHODS: dict[str, Callable] = {
    "vanilla": _vanilla,
    "ngram": _ngram,
    "small-lm": _small_lm,
    "eagle1-static": _eagle1_static,
    "eagle2": _eagle2,
    "hass": _hass,
    "eagle3": _eagle3,
}


#: Methods whose tree is the dynamic (EAGLE-2) tree, so ``MethodOptions`` tree sizes apply to them.
DYNAMIC_TREE_METHODS = ("ngram", "small-lm", "eagle2", "hass", "eagle3")
#: Methods that draw ``MethodOptions.sampled_tree`` at temperature > 0: drafters with a real draft distribution (an
#: n-gram's q is a point mass, so sampling from it would only draw its top candidate).
SAMPLED_TREE_METHODS = ("small-lm", "eagle2", "hass", "eagle3")


def method_names() -> list[str]:
    return list(METHODS)


def build_method(
    name: str, target: HFTarget, sampling: SamplingParams, options: MethodOptions | None = None
) -> SpeculativeGenerator | VanillaGenerator:
    """Compose the named method around ``target``. Raises ``ValueError`` for unknown names."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name](target, sampling, options or MethodOptions())

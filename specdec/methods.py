"""Named decoding methods for the demo, the command line and the benchmark: one :class:`Method` record each.

A method is a small function that composes parts around one target; nothing in the library's hot path
looks names up. ``build_method("eagle3", target)`` returns a generator (``generate``/``stream``) that serves any
sampling setting per call. Everything else that names methods (the command line's choices and checks, the demo's
and the bench's default, the bench's rows) reads the records in :data:`METHODS`, so a new method is one
:func:`register` call with its builder.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specdec.errors import SpecdecError
from specdec.generate import SpeculativeGenerator, VanillaGenerator
from specdec.interfaces import Drafter, TreePolicy
from specdec.method_options import (
    HEAD_OPTIONS,
    RETRIEVAL_OPTIONS,
    SAMPLED_MENU,
    SAMPLED_OPTIONS,
    SAMPLED_RANKED,
    SAMPLED_SHAPES,
    SHORTLIST_OPTIONS,
    TREE_OPTIONS,
    MethodOptions,
)
from specdec.models import MissingAssetError
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import ByTemperature, DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy

if TYPE_CHECKING:
    from specdec.drafters.retrieval import RetrievalCorpus

__all__ = [
    "METHODS",
    "SAMPLED_MENU",
    "SAMPLED_RANKED",
    "SAMPLED_SHAPES",
    "Method",
    "MethodOptionError",
    "MethodOptions",
    "build_method",
    "default_method",
    "eagle_drafter",
    "load_corpus",
    "method",
    "method_names",
    "preference",
    "register",
    "sampled_tree_of",
    "shipped_head_dir",
    "unregister",
]

HEADS_DIR = Path(__file__).parent / "heads" / "smollm2-135m-instruct"

Generator = SpeculativeGenerator | VanillaGenerator


class MethodOptionError(SpecdecError, ValueError):
    """An option was set that the chosen method does not read (it would be ignored)."""


@dataclass(frozen=True)
class Method:
    """What a named method is.

    Attributes:
        name: the name the command line, the demo and the bench use.
        build: ``(target, options) -> generator``.
        head_kind: the kind of EAGLE head it drafts with (:func:`shipped_head_dir`: ``eagle1``, ``hass`` or
            ``eagle3``; a ``head_dir`` of its own must have the same architecture: EAGLE-1 for ``eagle1`` and
            ``hass``, since HASS trains an EAGLE-1 head), None for methods without a head.
        dynamic_tree: its tree at T = 0 is the dynamic (EAGLE-2) tree, sized by the tree options.
        sampled_tree: at T > 0 it draws ``MethodOptions.sampled_tree`` (drafters with a real draft distribution; an
            n-gram's q is a point mass, so sampling from it would only draw its top candidate).
        rank: its place in the default choice (lower first, measured on the results page); None: never the default.
        extra_reads: options it reads besides those its kind implies (:attr:`reads`).
        summary: one line for ``--help`` and the docs.
    """

    name: str
    build: Callable[[HFTarget, MethodOptions], Generator]
    head_kind: str | None = None
    dynamic_tree: bool = False
    sampled_tree: bool = False
    rank: int | None = None
    extra_reads: tuple[str, ...] = ()
    summary: str = ""

    @property
    def reads(self) -> frozenset[str]:
        """The :class:`MethodOptions` fields this method reads."""
        names = set(self.extra_reads)
        if self.dynamic_tree:
            names.update(TREE_OPTIONS)
        if self.head_kind is not None:
            names.update(HEAD_OPTIONS)
            if self.head_kind != "eagle3":
                names.update(SHORTLIST_OPTIONS)
        if self.sampled_tree:
            names.update(SAMPLED_OPTIONS)
        return frozenset(names)

    def available(self) -> bool:
        """Its assets are present (the shipped head of its kind, if it drafts with one)."""
        if self.head_kind is None:
            return True
        try:
            shipped_head_dir(self.head_kind)
        except MissingAssetError:
            return False
        return True

    def check(self, options: MethodOptions) -> None:
        """Refuse the options set in ``options`` that this method does not read (:class:`MethodOptionError`)."""
        unread = sorted(options.given - self.reads)
        if unread:
            reads = ", ".join(sorted(self.reads)) or "none"
            them = "it" if len(unread) == 1 else "them"
            raise MethodOptionError(
                f"method {self.name!r} does not read {', '.join(unread)} (it reads: {reads}); "
                f"drop {them} or choose a method that reads {them}"
            )

    def narrow(self, options: MethodOptions) -> MethodOptions:
        """``options`` less the ones this method does not read: for a caller that applies one set of options to
        several methods (the bench) and has refused, itself, an option that none of them reads."""
        return options.only(self.reads)


#: The registered methods by name, in the order the command line lists them.
METHODS: dict[str, Method] = {}


def register(record: Method) -> Method:
    """Add ``record`` to :data:`METHODS` (a name already there is refused: :func:`unregister` it first)."""
    if record.name in METHODS:
        raise ValueError(f"a method named {record.name!r} is already registered")
    METHODS[record.name] = record
    return record


def unregister(name: str) -> Method:
    """Remove and return the method ``name``."""
    return METHODS.pop(method(name).name)


def method(name: str) -> Method:
    """The record of ``name`` (``ValueError`` naming the choices for an unknown one)."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}") from None


def method_names() -> list[str]:
    return list(METHODS)


def preference() -> list[str]:
    """The ranked methods, best first (measured: the results page)."""
    ranked = sorted((m for m in METHODS.values() if m.rank is not None), key=lambda m: m.rank)
    return [m.name for m in ranked]


def default_method() -> str:
    """The best-ranked method whose assets are present: shipped EAGLE heads first, then prompt lookup."""
    for name in preference():
        if METHODS[name].available():
            return name
    return "ngram"


@functools.lru_cache(maxsize=2)
def load_corpus(path: Path, vocab_size: int) -> RetrievalCorpus:
    """The corpus file ``MethodOptions.corpus`` names, indexed once per process (the suffix automaton; a file
    rewritten at the same path is not read again by this process).

    Raises:
        MissingAssetError: no such file.
        CorpusError: a file that is not a corpus, is corrupt, or was built for another vocabulary size.
    """
    from specdec.drafters.retrieval import RetrievalCorpus

    if not Path(path).is_file():
        raise MissingAssetError(f"no retrieval corpus at {path}; build one with `specdec data corpus`")
    return RetrievalCorpus.load(path, vocab_size=vocab_size)


def shipped_head_dir(kind: str) -> Path:
    """Folder of a head shipped for SmolLM2-135M-Instruct (``eagle1``, ``hass`` or ``eagle3``)."""
    path = HEADS_DIR / kind
    if not (path / "config.json").is_file():
        raise MissingAssetError(f"no shipped {kind} head at {path}; train one with `specdec train {kind}`")
    return path


def sampled_tree_of(name: str, sampling: SamplingParams, options: MethodOptions) -> str | None:
    """The :data:`SAMPLED_SHAPES` name (or ``"menu"``, ``"ranked"``) method ``name`` draws at ``sampling``; None: its
    dynamic tree (T = 0, ``options.sampled_tree`` None) or a method without a sampled tree."""
    if sampling.greedy or name not in METHODS or not METHODS[name].sampled_tree:
        return None
    return options.sampled_tree


def _dynamic(target: HFTarget, o: MethodOptions, sampled: bool, reserve: int = 0) -> TreePolicy:
    """The tree policy of a dynamic-tree method: the dynamic tree of ``o`` (adaptive or fixed; ``reserve`` nodes
    fewer, kept for a composite's retrieval) at T = 0, and at T > 0 the sampled static tree of ``o.sampled_tree``
    where the method samples (:class:`~specdec.trees.ByTemperature`)."""
    greedy = _dynamic_tree(target, o, reserve)
    shape = o.sampled_tree if sampled else None
    if shape is None:
        return greedy
    from specdec.budget import forward_cost_curve

    if shape == SAMPLED_MENU:
        from specdec.trees.menu import SampledMenuPolicy

        menu = SampledMenuPolicy(forward_cost_curve(target), draft_temperature_ratio=o.draft_temperature_ratio)
        return ByTemperature(greedy, menu)
    if shape == SAMPLED_RANKED:
        from specdec.trees.ranked import RankedSampledPolicy

        ranked = RankedSampledPolicy(forward_cost_curve(target), draft_temperature_ratio=o.draft_temperature_ratio)
        return ByTemperature(greedy, ranked)
    gate = None
    if o.sampled_level_gate:
        from specdec.trees.level_gate import LevelGate

        gate = LevelGate(forward_cost_curve(target))
    return ByTemperature(greedy, StochasticTreePolicy(SAMPLED_SHAPES[shape], o.draft_temperature_ratio, gate))


def _dynamic_tree(target: HFTarget, o: MethodOptions, reserve: int = 0) -> TreePolicy:
    """The dynamic tree of ``o`` with ``reserve`` nodes fewer than its fixed size or adaptive cap (at least 2)."""
    if o.total_tokens is not None:
        return DynamicTreePolicy(topk=o.topk, depth=o.depth, total_tokens=max(2, o.total_tokens - reserve))
    from specdec.budget import forward_cost_curve
    from specdec.trees.adaptive import AdaptiveTreePolicy

    # Measured on first use for this model, device and thread count (seconds), then read from the cache.
    curve = forward_cost_curve(target)
    return AdaptiveTreePolicy(
        o.topk,
        o.depth,
        max(2, o.max_total_tokens - reserve),
        curve,
        adapt_depth=o.adapt_depth,
        # one host sync per cycle matters where the device runs ahead of the host (CUDA); a CPU never waits
        deferred=(target.static and target.device.type == "cuda") if o.deferred_budget is None else o.deferred_budget,
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


def _vanilla(target: HFTarget, o: MethodOptions) -> Generator:
    return VanillaGenerator(target)


def _ngram(target: HFTarget, o: MethodOptions) -> Generator:
    from specdec.drafters import NGramDrafter

    return SpeculativeGenerator(target, NGramDrafter.from_target(target), _dynamic(target, o, sampled=False))


def _small_lm(target: HFTarget, o: MethodOptions) -> Generator:
    from specdec.drafters import SmallLMDrafter

    drafter = SmallLMDrafter.from_target(target, o.small_lm_layers)
    return SpeculativeGenerator(target, drafter, _dynamic(target, o, sampled=True))


Builder = Callable[[HFTarget, MethodOptions], Generator]


def _eagle1_static(kind: str) -> Builder:
    """The builder of a head of ``kind`` on EAGLE-1's static tree."""

    def build(target: HFTarget, o: MethodOptions) -> Generator:
        return SpeculativeGenerator(target, eagle_drafter(target, kind, o), StaticTreePolicy.eagle1_default())

    return build


def _eagle(kind: str) -> Builder:
    """The builder of an EAGLE method with a head of ``kind``: its dynamic tree, sampled at T > 0."""

    def build(target: HFTarget, o: MethodOptions) -> Generator:
        return SpeculativeGenerator(target, eagle_drafter(target, kind, o), _dynamic(target, o, sampled=True))

    return build


#: Nodes of a composite tree kept for retrieval: one continuation of up to this many tokens per cycle
#: (:class:`~specdec.trees.CompositeTreePolicy`'s defaults); the EAGLE tree gets the rest of the budget.
RETRIEVAL_NODES = 8


def _composed(
    target: HFTarget,
    o: MethodOptions,
    tree_drafter: Drafter | None,
    base: TreePolicy | None,
    max_total: int | None = None,
) -> SpeculativeGenerator:
    """A generator whose tree holds ``tree_drafter``'s tree (grown by ``base``) and a retrieval drafter's
    continuation (from ``o.corpus`` too, if set) where it pays (:class:`~specdec.trees.CompositeTreePolicy`, priced
    by the target's cost curve), the whole tree at most ``max_total`` nodes."""
    from specdec.budget import forward_cost_curve
    from specdec.drafters import CompositeDrafter, RetrievalDrafter
    from specdec.trees import CompositeTreePolicy

    corpus = None if o.corpus is None else load_corpus(o.corpus, target.vocab_size)
    drafter = CompositeDrafter.for_target(target, tree_drafter, [RetrievalDrafter.from_target(target, corpus=corpus)])
    policy = CompositeTreePolicy(base, forward_cost_curve(target), RETRIEVAL_NODES, max_total=max_total)
    return SpeculativeGenerator(target, drafter, policy)


def _retrieval(target: HFTarget, o: MethodOptions) -> Generator:
    return _composed(target, o, None, None)


def _composite(kind: str) -> Builder:
    """The builder of a head of ``kind`` and retrieval in one tree; ``total_tokens`` (or the adaptive cap) bounds
    the whole tree."""

    def build(target: HFTarget, o: MethodOptions) -> Generator:
        whole = o.total_tokens if o.total_tokens is not None else o.max_total_tokens
        base = _dynamic(target, o, sampled=True, reserve=RETRIEVAL_NODES)
        return _composed(target, o, eagle_drafter(target, kind, o), base, max_total=whole)

    return build


def _headed(name: str, builder: Callable[[str], Builder], kind: str, **record: object) -> Method:
    """The record of a method that drafts with a head of ``kind`` (stated once: its builder gets the same kind)."""
    return Method(name, builder(kind), head_kind=kind, **record)


_SAMPLED_DYNAMIC = {"dynamic_tree": True, "sampled_tree": True}  # the EAGLE-2 tree at T = 0, sampled at T > 0

#: Ranks best first (measured, docs/results.md): EAGLE-3 with retrieval in one tree (1.61x vanilla on Spec-Bench at
#: T = 0 against EAGLE-3's 1.24x, on par at T = 1), then the EAGLE heads alone, then prompt lookup.
for _record in (
    Method("vanilla", _vanilla, summary="one target forward per token (the baseline)"),
    Method("ngram", _ngram, dynamic_tree=True, rank=4, summary="prompt lookup: n-gram matches of the context"),
    Method(
        "small-lm",
        _small_lm,
        dynamic_tree=True,
        sampled_tree=True,
        extra_reads=("small_lm_layers",),
        summary="the target's first layers and its head as the draft model",
    ),
    _headed("eagle1-static", _eagle1_static, "eagle1", summary="an EAGLE-1 head on EAGLE-1's static tree"),
    _headed("eagle2", _eagle, "eagle1", **_SAMPLED_DYNAMIC, rank=3, summary="an EAGLE-1 head, EAGLE-2's dynamic tree"),
    _headed("hass", _eagle, "hass", **_SAMPLED_DYNAMIC, rank=2, summary="a HASS-trained EAGLE-1 head, dynamic tree"),
    _headed("eagle3", _eagle, "eagle3", **_SAMPLED_DYNAMIC, rank=1, summary="an EAGLE-3 head, dynamic tree"),
    Method(
        "retrieval",
        _retrieval,
        extra_reads=RETRIEVAL_OPTIONS,
        summary="continuations of earlier text (suffix automaton) as a chain",
    ),
    _headed(
        "composite",
        _composite,
        "eagle3",
        **_SAMPLED_DYNAMIC,
        rank=0,
        extra_reads=RETRIEVAL_OPTIONS,
        summary="EAGLE-3 and retrieval in one tree, each node judged against its own law",
    ),
):
    register(_record)


def build_method(name: str, target: HFTarget, options: MethodOptions | None = None) -> Generator:
    """Compose the named method around ``target``: one generator that serves any sampling setting per call (its
    tree and verifier follow each call's temperature).

    Raises:
        ValueError: an unknown name.
        MethodOptionError: ``options`` sets an option the method does not read (:attr:`Method.reads`).
    """
    record = method(name)
    options = options or MethodOptions()
    record.check(options)
    return record.build(target, options)

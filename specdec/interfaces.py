"""The four roles of one speculative cycle and the small carriers that flow between them.

One cycle (see ``docs/concepts.md``)::

    tree    = policy.grow(drafter, root, sampling, generator)   # drafter proposes, policy shapes
    step    = target.forward_tree(tree)                         # one forward over root + tree
    verdict = verifier.verify(tree, step.logits, sampling, generator)
    target.commit(verdict.accepted, n)                          # keep the accepted path's cache entries
    drafter.commit(accepted tokens, step.hidden rows)           # drafter learns what was accepted

Data flows one way. The verifier never calls the drafter or a model; the policy drives the drafter only
through :meth:`Drafter.expand` (the whole q) or :meth:`Drafter.expand_topk` (its top-k, for top-k policies).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from specdec.errors import IncompatibleVerifierError, UnservableDrafterError, VocabMismatchError
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree, PartialTree

__all__ = [
    "HiddenRequest",
    "IncompatibleVerifierError",
    "TargetHidden",
    "TreeKind",
    "TargetStep",
    "Verdict",
    "Drafter",
    "TreePolicy",
    "UnservableDrafterError",
    "Verifier",
    "Target",
    "VocabMismatchError",
    "top_children",
]


@dataclass(frozen=True)
class TreeKind:
    """What a verifier must know about the trees a policy grows at one sampling setting (no tree needed).

    Attributes:
        sampled: children are draws from the draft distribution, recorded in ``DraftTree.q_dist`` / ``q_cond``
            (contract: each child's recorded q is the distribution it was drawn from). False: deterministic
            candidates (a function of the context; q is one-hot for the verifier).
        chain: every tree is a chain (at most one child per node).
        max_children: for sampled trees, the widest sibling group (consecutive draws), or None (read from each
            tree).
        point_masses: sampled trees only: some children are point masses beside the draws (``DraftTree.point_mass``,
            e.g. a retrieval chain in an EAGLE sample), so only a verifier that reads each child's own q serves it.
    """

    sampled: bool = False
    chain: bool = False
    max_children: int | None = None
    point_masses: bool = False

    def describe(self) -> str:
        """``"a chain of sampled candidates"``, ``"a tree of deterministic candidates"``, ..."""
        what = "sampled and point-mass" if self.point_masses else "sampled" if self.sampled else "deterministic"
        return f"a {'chain' if self.chain else 'tree'} of {what} candidates"


@dataclass(frozen=True)
class HiddenRequest:
    """Which target hidden states a drafter needs after every target forward.

    Attributes:
        final: the post-norm last hidden state, i.e. the feature the target feeds to its lm_head (EAGLE-1).
        layers: indices of decoder layers whose *inputs* are wanted, in this order (EAGLE-3: ``(2, L//2, L-3)``);
            layer ``i``'s input is HF ``hidden_states[i]`` (``0`` = the embeddings).
    """

    final: bool = False
    layers: tuple[int, ...] = ()

    def __or__(self, other: HiddenRequest) -> HiddenRequest:
        layers = self.layers + tuple(i for i in other.layers if i not in self.layers)
        return HiddenRequest(self.final or other.final, layers)

    @property
    def any(self) -> bool:
        return self.final or bool(self.layers)


@dataclass(frozen=True)
class TargetHidden:
    """Target hidden states for ``n`` positions.

    Attributes:
        final: ``[n, H]`` post-norm features, or None if not requested.
        layers: ``{layer_index: [n, H]}`` inputs of the requested decoder layers.
    """

    final: torch.Tensor | None = None
    layers: dict[int, torch.Tensor] = field(default_factory=dict)

    def select(self, index: torch.Tensor) -> TargetHidden:
        """Rows ``index`` (``[k]`` long) of every tensor."""
        return TargetHidden(
            None if self.final is None else self.final[index],
            {i: h[index] for i, h in self.layers.items()},
        )

    def fused(self, layers: tuple[int, ...]) -> torch.Tensor:
        """``[n, len(layers) * H]``: the requested layer inputs concatenated in the given order."""
        missing = [i for i in layers if i not in self.layers]
        if missing:
            raise KeyError(f"target hidden states for layers {missing} were not requested")
        return torch.cat([self.layers[i] for i in layers], dim=-1)


@dataclass(frozen=True)
class TargetStep:
    """What one target forward returns.

    Attributes:
        logits: ``[n, V]`` float32; row i scores the token after position i (for a tree: the children of node i).
        hidden: the requested hidden states at the same ``n`` positions.
    """

    logits: torch.Tensor
    hidden: TargetHidden


@dataclass(frozen=True)
class Verdict:
    """Result of verifying one tree; fixed shapes so no host sync is needed to build it.

    Attributes:
        accepted: ``[max_depth + 1]`` long node ids along the accepted path, root first, ``-1`` padded.
        accept_length: 0-dim long, number of accepted draft nodes after the root.
        bonus_token: 0-dim long, the token the target emits after the last accepted node
            (a residual sample on rejection, a fresh sample from p otherwise).
    """

    accepted: torch.Tensor
    accept_length: torch.Tensor
    bonus_token: torch.Tensor


def top_children(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits [F, V]`` -> ``(logq [F, k'], ids [F, k'])``, the top ``k' = min(k, V)`` by value, best first.

    One fused ``log_softmax`` kernel, then the top-k of its rows: the logits' top-k ids, except where subtracting
    the row's normaliser rounds two logits less than an ulp apart to a tie (such ties come back in index order).
    On a CPU this is faster than ``topk`` plus ``logsumexp``, which runs as five separate ops (measured 23 vs 35 µs
    for ``[1, 16384]``, 88 vs 127 µs for ``[8, 16384]``).
    """
    return torch.topk(torch.log_softmax(logits, dim=-1), min(k, logits.shape[-1]), dim=-1)


@dataclass(frozen=True)
class Continuation:
    """One proposed draft: the tokens that followed an earlier occurrence of a suffix of the context.

    Attributes:
        tokens: ``1..max_draft`` token ids (from a corpus: cut where its sequence ends).
        match_length: length of the matched suffix (at least the proposer's minimum match).
    """

    tokens: tuple[int, ...]
    match_length: int


@runtime_checkable
class Proposer(Protocol):
    """A drafter that proposes whole continuations of the context (retrieval), each a deterministic function of the
    context ``history + [root]`` (a point mass for the verifier): the parts :meth:`Drafter.proposals` gathers."""

    vocab_size: int

    def propose(self, root: int) -> list[Continuation]: ...


class Drafter(ABC):
    """Proposes draft distributions q for the children of tree nodes.

    A new drafter implements one method, :meth:`expand` (its draft logits for a set of tree nodes), and sets
    ``vocab_size``. Everything else derives from it here and may be overridden for speed:

    * :meth:`expand_topk`: the top-k children of each node (the top-k tree policies; greedy children are k = 1);
    * :meth:`expand_draft`: the distribution sampled children are drawn from (sampled trees);
    * :meth:`reset` / :meth:`prefill` / :meth:`commit`: keep :attr:`history`, the committed token ids, which
      :meth:`contexts` extends with each node's root path, and :attr:`generation`. A drafter with its own state (a
      KV cache, target features) overrides them.
    * :meth:`proposals`: whole continuations beside the tree's expansions (none by default; a composite with
      retrieval has them), read by a policy that grows trees from them
      (:class:`~specdec.trees.composite.CompositeTreePolicy`).

    Lifecycle for one generation::

        reset(); prefill(prompt, hidden)
        repeat: expand(tree, [0]); expand(tree, frontier); ...; commit(tokens, hidden)

    Contract for :meth:`expand`: within one tree, the first call has ``frontier == [0]`` (the root); later
    calls name nodes whose parents were expanded earlier in the same tree. A drafter may keep per-tree state
    keyed by :class:`PartialTree` node id and must drop it when a new tree starts.
    """

    #: Vocabulary size of the logits :meth:`expand` returns; must equal the target's.
    vocab_size: int
    #: Target hidden states this drafter consumes (none for token-level drafters).
    hidden_request: HiddenRequest = HiddenRequest()
    #: ``[n]`` long (CPU): the token ids in the target's cache (prompt, then each cycle's root and accepted tokens),
    #: kept by the default :meth:`reset` / :meth:`prefill` / :meth:`commit`.
    history: torch.Tensor
    #: Generations started on this drafter, counted by the decoding loop when it resets the drafter for one (so a
    #: drafter's own :meth:`reset` need not count them): a policy that learns from one cycle to the next tells a new
    #: generation from the next cycle by it.
    generation: int = 0

    def reset(self) -> None:
        """Forget all context (new generation). Default: an empty :attr:`history`."""
        self.history = torch.zeros(0, dtype=torch.long)

    def fork(self) -> Drafter:
        """A drafter for another sequence decoded at once (a batch row): same weights, own state. Default: a shallow
        copy, reset; right where :meth:`reset` rebinds (never mutates) all per-generation state, else overridden."""
        twin = copy.copy(self)
        twin.reset()
        return twin

    def batch_part(self) -> Drafter:
        """The drafter a batch hands :meth:`expand_roots` for this row (a composite's tree drafter); default self."""
        return self

    @classmethod
    def expand_roots(cls, drafters: Sequence[Drafter], roots: Sequence[torch.Tensor]) -> None:
        """Several rows' first expansions of their next trees at once (``roots[i]`` ``[1]``: drafter ``i``'s root),
        each kept for its tree's first :meth:`expand`, which then gives what it would alone, up to rounding. The
        batched loop calls it on its rows' :meth:`batch_part` s, per type. Default: nothing (each runs alone)."""
        return None

    def proposals(self, root: int) -> list[Continuation]:
        """Whole continuations this drafter proposes after the context ``history + [root]``, beside the children
        :meth:`expand` gives: each a deterministic function of that context (a point mass for the verifier); a
        reader drops empty ones. Default: none."""
        return []

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        """Take the prompt. Default: :attr:`history` starts with it.

        Args:
            input_ids: ``[L]`` long prompt tokens (now in the target's cache).
            hidden: target hidden states at those ``L`` positions (as requested).
        """
        self.history = input_ids.reshape(-1).to("cpu", torch.long).clone()

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        """Tokens that entered the target's cache this cycle. Default: appended to :attr:`history`.

        Args:
            tokens: ``[k]`` long: the root followed by the accepted draft tokens.
            hidden: target hidden states at those ``k`` positions.
        """
        self.history = torch.cat([self.history, tokens.reshape(-1).to("cpu", torch.long)])

    def contexts(self, tree: PartialTree, frontier: torch.Tensor) -> list[torch.Tensor]:
        """Each frontier node's context: :attr:`history` followed by the tokens on the node's root path, root first
        (``[n + depth + 1]`` long, CPU). Node ids increase with depth, so masked tokens are in path order."""
        on_path = tree.ancestor_mask(frontier).cpu()  # [F, size]
        tokens = tree.tokens[: tree.size].cpu()
        return [torch.cat([self.history, tokens[on_path[row]]]) for row in range(frontier.shape[0])]

    @abstractmethod
    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """Draft logits for the children of each frontier node, in one batched step.

        Args:
            tree: the partial tree (the frontier nodes and all their ancestors are in it).
            frontier: ``[F]`` long node ids.

        Returns:
            ``[F, V]`` float logits; ``softmax`` of a row is the draft distribution q of that node's next token
            given the committed context and the node's root path.
        """

    def expand_topk(self, tree: PartialTree, frontier: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` most probable children of each frontier node: one :meth:`expand` step, reduced to its top-k.

        Args:
            tree, frontier: as for :meth:`expand` (the same call contract and the same drafter state change).
            k: children per node; clamped to the number of tokens the drafter can propose.

        Returns:
            ``(logq [F, k'], tokens [F, k'])`` float32 / long, best first: ``log q`` of each child under the row's
            full draft distribution (the softmax of the :meth:`expand` row) and its target token id.

        Contract: the same values as ``topk(log_softmax(expand(tree, frontier)), k)``, ties aside. A drafter whose
        q is zero outside a smaller vocabulary (EAGLE-3's draft vocabulary, a shortlist) overrides this to do the
        top-k and the normaliser over that vocabulary only: tokens off it have ``log q = -inf`` and add nothing to
        the normaliser, so only the work changes.
        """
        logits = self.expand(tree, frontier).float()  # [F, V]
        return top_children(logits, k)

    def expand_draft(self, tree: PartialTree, frontier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One :meth:`expand` step over the tokens this drafter can propose: ``(logits [F, V_d], ids [V_d] | None)``.

        Args:
            tree, frontier: as for :meth:`expand` (the same call contract and the same drafter state change).

        Returns:
            float logits over the draft vocabulary and the target id of each of its columns (``None``: the draft
            vocabulary is the target's, ``V_d = V``).

        Contract: the :meth:`expand` row is these logits placed at ``ids`` with ``-inf`` everywhere else, so
        ``softmax`` of it is the same q (zero off the draft vocabulary). A sampled tree draws from ``V_d`` columns
        instead of ``V`` (:class:`~specdec.trees.stochastic.StochasticTreePolicy`).
        """
        return self.expand(tree, frontier), None


class TreePolicy(ABC):
    """Shapes the draft tree by driving a drafter through :meth:`Drafter.expand` / :meth:`Drafter.expand_topk`."""

    #: Upper bound on the number of nodes (root included) of any tree this policy builds.
    max_nodes: int
    #: Upper bound on the depth of any node.
    max_depth: int

    @abstractmethod
    def grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        avoid: torch.Tensor | None = None,
    ) -> DraftTree:
        """Build a tree under ``root`` (0-dim long, the last emitted token).

        A stochastic policy samples with ``generator`` and fills ``q_dist``/``q_cond``; a deterministic one
        must not depend on ``generator`` (contract for the one-hot-q verifiers).

        ``avoid``: ``[A]`` long target ids the root's children must not be (the point masses a composite puts
        beside the draws, :class:`~specdec.trees.CompositeTreePolicy`), or None. Contract: it is passed only to a
        policy whose :meth:`kind` at ``sampling`` is ``sampled``, and such a policy draws the root's children from
        q with those ids removed and records that q (so no token appears twice under the root and the verifier
        reads the law the draws followed); a policy of deterministic candidates never receives it.
        """

    def for_sampling(self, sampling: SamplingParams) -> TreePolicy:
        """The policy that grows this call's trees at ``sampling`` (default: this one).

        A policy that changes its kind of tree with the temperature (:class:`~specdec.trees.ByTemperature`) returns
        one of its parts; the decoding loop asks once per call, before the first token.
        """
        return self

    def kind(self, sampling: SamplingParams) -> TreeKind:
        """The kind of tree :meth:`grow` returns at ``sampling`` (default: deterministic candidates, not a chain)."""
        return TreeKind()

    def sync_payload(self) -> torch.Tensor | None:
        """Device values (1-D, float) this policy wants on the host after the cycle's verification, or None
        (default). The decoding loop carries them in its one host sync per cycle and hands them back to
        :meth:`observe`, so a policy that plans from draft values needs no sync of its own."""
        return None

    def observe(self, accept_length: int, payload: list[float] | None = None) -> None:  # noqa: B027 - optional hook
        """Feedback after each cycle: how many draft tokens were accepted (host int, already synced); adaptive
        policies calibrate their estimate of the accepted length with it (the default does nothing). ``payload``:
        the host copy of this cycle's :meth:`sync_payload` (None when it returned None)."""

    def observe_path(self, accepted: list[int]) -> None:  # noqa: B027 - optional hook
        """Feedback after each cycle, after :meth:`observe`: the accepted path's node ids in the latest tree, root
        first (``accept_length + 1`` host ints, already synced). The default does nothing."""

    def resized(self, total: int) -> TreePolicy | None:
        """A policy growing trees of ``total`` nodes (root included; a composite adds its continuations) of this one's
        :meth:`kind`, for a batch that sizes every row's tree (:mod:`specdec.pace`); None (default): not resized."""
        return None


class Verifier(ABC):
    """A pure function from (tree, target logits, sampling, randomness) to a :class:`Verdict`."""

    #: Whether :meth:`verify` reads ``DraftTree.point_mass`` (each child's own q in a mixed tree). A verifier that
    #: does not would take a point-mass child for a draw from its parent's q: wrong, so mixed trees are refused
    #: (:func:`specdec.verify.check_verifier`, and at run time by :class:`~specdec.verify.base.PlanVerifier`).
    reads_point_masses: bool = False

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        """Why this verifier cannot verify trees of ``kind`` at ``sampling`` exactly, or None if it can.

        The decoding loop asks before the first token, so a pinned verifier that cannot serve a call is refused
        with this reason instead of failing inside the loop. Default: it serves everything.
        """
        return None

    @abstractmethod
    def verify(
        self,
        tree: DraftTree,
        target_logits: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> Verdict:
        """Accept a root path and draw the bonus token.

        Args:
            tree: the verified tree (``N`` nodes).
            target_logits: ``[N, V]``; row i is the target's logits for the children of node i.
            sampling: settings; p = ``warp(target_logits, sampling)``.
            generator: the only source of randomness.
        """


class Target(ABC):
    """A target model with a preallocated cache indexed by position."""

    vocab_size: int
    #: Capacity of the cache in tokens.
    max_len: int
    #: Tokens committed to the cache so far.
    length: int
    #: The model's own end-of-sequence ids (its generation config), used when a stop condition names none.
    eos_token_ids: tuple[int, ...] = ()
    #: The model's own token budget (its generation config's ``max_new_tokens``), used when a stop condition names
    #: none; None: as many tokens as the cache has room for.
    max_new_tokens: int | None = None
    #: The stream whose sequence the cache holds (:func:`specdec.calls.claim`); None when no stream holds it.
    stream_claim: object | None = None

    @abstractmethod
    def request_hidden(self, request: HiddenRequest) -> None:
        """Add to the hidden states every forward returns."""

    @abstractmethod
    def reset(self) -> None:
        """Empty the cache."""

    @abstractmethod
    def prefill(self, input_ids: torch.Tensor) -> TargetStep:
        """Run ``[L]`` prompt tokens; logits ``[1, V]`` for the last position only, hidden for all ``L``."""

    @abstractmethod
    def forward_tree(self, tree: DraftTree) -> TargetStep:
        """One forward over the tree at positions ``length + depth``; logits and hidden for all N nodes."""

    def decode_one(self, token: torch.Tensor) -> TargetStep:
        """Run and commit one token (vanilla decoding); logits ``[1, V]``."""
        step = self.forward_tree(DraftTree.single(token))
        self.commit(torch.zeros(1, dtype=torch.long, device=token.device), 1)
        return step

    @abstractmethod
    def commit(self, accepted: torch.Tensor, count: int) -> None:
        """Keep the cache entries of nodes ``accepted[:count]`` (root first) after the committed prefix."""

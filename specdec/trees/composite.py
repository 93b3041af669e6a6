"""One tree from several drafters: a tree drafter's tree plus proposers' continuations, where they pay.

Each cycle, :class:`CompositeTreePolicy`

1. asks the drafter for its continuations of ``history + [root]`` (:meth:`~specdec.interfaces.Drafter.proposals`:
   a :class:`~specdec.drafters.CompositeDrafter`'s proposers, retrieval);
2. grows the base policy's tree with the same drafter (a composite answers ``expand`` with its tree drafter: EAGLE's
   dynamic tree at T = 0, its sampled tree at T > 0);
3. adds each continuation's tokens along the tree: a token some node already carries costs nothing (the walk
   follows it), a new node is added while it pays, i.e. while its estimated path probability ``pi`` beats the
   marginal price of one more tree token: ``pi / E > (cost(n + 1) - cost(n)) / cost(n)``, with ``E`` the tokens a
   cycle emits (a moving average) and ``cost`` the target's measured forward-cost curve. A long retrieval match
   that keeps being right earns a long chain; a miss costs nothing (no proposal, no node).

Estimated path probabilities. A continuation's ``d``-th token is right, given the ones before it were, with a rate
learnt per (match-length bucket, depth) from what the target emitted: at the next cycle the committed tokens and
the new root are the target's own continuation, compared with last cycle's proposals. Only positions the target
has emitted count (later ones are unknown), so the rates are not biased by the tree's own cut.

Kinds of trees (what the verifier needs to know, :class:`~specdec.interfaces.TreeKind`):

* the base grows deterministic candidates (T = 0, or a top-k tree at any T): the continuations are deterministic
  too; the merged tree is a deterministic tree (greedy, or multi-round verification);
* the base draws its children from q (T > 0): the continuations are point masses beside the draws
  (``DraftTree.point_mass``), tried first. The root's draws skip the continuations' first tokens (``avoid``: the
  recorded ``q_dist[0]`` is the q they were drawn from, without those tokens), so no draw repeats a point mass; the
  tree is verified by :class:`~specdec.verify.MixedMultiRoundVerifier`, which judges every child against the law it
  was proposed from.

Contract (losslessness): the continuations are a function of the committed context and of this policy's past
(rates learnt from emitted tokens, timings), never of this cycle's coins; the draws are the base policy's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specdec.budget import CostCurve
from specdec.interfaces import Continuation, Drafter, TreeKind, TreePolicy, UnservableDrafterError
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree

__all__ = ["CompositeTreePolicy", "RetrievalRates"]

#: Match lengths that separate the rate buckets: (< 4), (4 .. 7), (>= 8) tokens.
MATCH_BUCKETS = (4, 8)


class RetrievalRates:
    """How often a continuation's ``d``-th token is right given the earlier ones were, per match-length bucket.

    Decayed counts with a prior of ``prior_hits / prior_tries`` (about 20 observations of memory per cell).

    Args:
        depth: longest continuation tracked.
        prior: the rate before any observation.
        prior_weight: tries the prior counts for.
        decay: per-observation decay of the counts.
    """

    def __init__(self, depth: int, prior: float = 0.5, prior_weight: float = 2.0, decay: float = 0.95) -> None:
        self.decay = decay
        shape = (len(MATCH_BUCKETS) + 1, depth)
        self.tries = np.full(shape, prior_weight)
        self.hits = np.full(shape, prior * prior_weight)

    @staticmethod
    def bucket(match_length: int) -> int:
        return int(np.searchsorted(MATCH_BUCKETS, match_length, side="right"))

    def path_probs(self, match_length: int, length: int) -> np.ndarray:
        """``[length]``: the probability that the first ``d + 1`` tokens are all right."""
        b = self.bucket(match_length)
        rates = self.hits[b] / self.tries[b]
        return np.cumprod(rates[:length])

    def observe(self, match_length: int, proposed: tuple[int, ...], emitted: list[int]) -> None:
        """Count ``proposed`` against what the target ``emitted`` after the same position (up to the first miss)."""
        b = self.bucket(match_length)
        for d, token in enumerate(proposed[: min(len(emitted), self.tries.shape[1])]):
            self.tries[b, d] = self.decay * self.tries[b, d] + 1.0
            hit = token == emitted[d]
            self.hits[b, d] = self.decay * self.hits[b, d] + float(hit)
            if not hit:
                return


@dataclass
class _Last:
    """What the previous cycle proposed, to learn from at the next one."""

    generation: int  # the drafter's generation count when proposed (a new generation learns nothing from it)
    position: int  # history length when proposed: the root's position; proposals start at position + 1
    proposals: list[Continuation]
    base: TreePolicy | None  # the base policy that grew this cycle's tree (this call's part of a ByTemperature)
    base_tokens: list[int]  # the base tree (for the base policy's own accepted length)
    base_parents: list[int]


class CompositeTreePolicy(TreePolicy):
    """Fill one draft tree from a tree drafter's policy and proposers' continuations (module docstring).

    Args:
        base: the policy of the tree drafter (e.g. ``ByTemperature(AdaptiveTreePolicy, StochasticTreePolicy)``), or
            None for a tree of continuations only.
        curve: the target's forward-cost curve; None: a node pays when its path probability is at least ``min_prob``.
        max_draft: longest continuation added.
        branches: continuations added per cycle (over all proposers, longest match first).
        min_prob: without a curve, the smallest path probability worth a node.
        max_total: the largest whole tree (root, the base's nodes and the continuations'); None: no bound beyond
            the base's own and ``branches * max_draft``. The base policy is built with its share of it.

    Attributes:
        rates: the learnt :class:`RetrievalRates`.
        last_added: continuation nodes added in the latest cycle (for inspection).
    """

    def __init__(
        self,
        base: TreePolicy | None,
        curve: CostCurve | None = None,
        max_draft: int = 8,
        branches: int = 1,
        min_prob: float = 0.2,
        max_total: int | None = None,
    ) -> None:
        if max_draft < 1 or branches < 1:
            raise ValueError(f"max_draft and branches must be at least 1, got {max_draft} and {branches}")
        if max_total is not None and max_total < 2:
            raise ValueError(f"max_total counts the root and must be at least 2, got {max_total}")
        self.base, self.curve = base, curve
        self.max_draft, self.branches, self.min_prob = max_draft, branches, min_prob
        self.max_nodes = (base.max_nodes if base is not None else 1) + branches * max_draft
        if max_total is not None:
            self.max_nodes = min(self.max_nodes, max_total)
        self.max_depth = max(base.max_depth if base is not None else 0, max_draft)
        self.rates = RetrievalRates(max_draft)
        self.last_added = 0
        self._tokens_per_cycle = 2.0  # moving average of the tokens a cycle emits (accepted + bonus)
        self._last: _Last | None = None
        self._pending: tuple[int, list[float] | None] | None = None  # the base's feedback, given at the next grow

    # ------------------------------------------------------------------------------------------- the kind
    def kind(self, sampling: SamplingParams) -> TreeKind:
        """Deterministic candidates when the base grows them (or there is none); draws beside point masses when the
        base draws."""
        if self.base is None:
            return TreeKind(chain=self.branches == 1)
        base = self.base.kind(sampling)
        if not base.sampled:
            return TreeKind()
        widest = None if base.max_children is None else base.max_children + self.branches
        return TreeKind(sampled=True, max_children=widest, point_masses=True)

    # ------------------------------------------------------------------------------------------- one cycle
    def grow(
        self, drafter: Drafter, root: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
    ) -> DraftTree:
        """The base tree with the continuations added where they pay (module docstring). ``drafter`` gives both:
        :meth:`~specdec.interfaces.Drafter.proposals` and the base tree's expansions, and must keep
        :attr:`~specdec.interfaces.Drafter.history` (the policy learns its rates from what the target emitted).

        Raises:
            UnservableDrafterError: a drafter that keeps no history, or proposes nothing under a policy of
                proposals only.
        """
        return self._grow(drafter, root, sampling, generator, None)

    def resized(self, total: int) -> TreePolicy | None:
        """This composite with its base's tree resized to ``total`` nodes (:meth:`TreePolicy.resized`), the
        continuations still added where they pay: the same policy object's rates and feedback, one cycle at that
        size; None without a base or where the base cannot be resized."""
        return None if self.base is None or self.base.resized(total) is None else _Resized(self, total)

    def _grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        total: int | None,
    ) -> DraftTree:
        if self.base is None and type(drafter).proposals is Drafter.proposals:
            raise UnservableDrafterError(
                f"CompositeTreePolicy(None) grows trees of proposals only, and {type(drafter).__name__} proposes none "
                "(Drafter.proposals): give it a drafter that proposes continuations (RetrievalDrafter, or a "
                "CompositeDrafter with proposers), or a base policy"
            )
        history = getattr(drafter, "history", None)
        if history is None:
            raise UnservableDrafterError(
                f"CompositeTreePolicy learns from the committed tokens (Drafter.history) and {type(drafter).__name__} "
                "keeps none: wrap it in a CompositeDrafter (which keeps them for its parts)"
            )
        self._learn(drafter.generation, history, int(root))
        proposals = sorted((c for c in drafter.proposals(int(root)) if c.tokens), key=lambda c: -c.match_length)
        proposals = proposals[: self.branches]
        base = None if self.base is None else self.base.for_sampling(sampling)
        if base is not None and total is not None:  # a batch's size: the base's tree at it, where it can be
            base = base.resized(total) or base
        sampled = base is not None and base.kind(sampling).sampled
        if base is None:
            tree = DraftTree.single(root)
        elif sampled and proposals:  # the draws skip the point masses' first tokens (TreePolicy.grow's contract)
            avoid = torch.tensor(sorted({c.tokens[0] for c in proposals}), dtype=torch.long, device=root.device)
            tree = base.grow(drafter, root, sampling, generator, avoid=avoid)
        else:
            tree = base.grow(drafter, root, sampling, generator)
        tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
        self._last = _Last(drafter.generation, history.shape[0], proposals, base, list(tokens), list(parents))
        return self._merged(tree, tokens, parents, proposals, point_masses=sampled)

    def _merged(
        self,
        tree: DraftTree,
        tokens: list[int],
        parents: list[int],
        proposals: list[Continuation],
        point_masses: bool,
    ) -> DraftTree:
        """``tree`` with the proposals' paying tokens added (as point masses beside draws when ``point_masses``)."""
        n0 = len(tokens)
        # a deterministic tree: a proposal may follow nodes the base already has; beside draws it starts its own chain
        child = {} if point_masses else _children(tokens, parents)
        for c in proposals:
            probs = self.rates.path_probs(c.match_length, min(len(c.tokens), self.max_draft))
            u = 0
            for token, pi in zip(c.tokens, probs, strict=False):
                if (u, token) in child:
                    u = child[(u, token)]
                    continue
                if len(tokens) >= self.max_nodes or not self._pays(float(pi), len(tokens)):
                    break
                tokens.append(token)
                parents.append(u)
                child[(u, token)] = u = len(tokens) - 1
        self.last_added = len(tokens) - n0
        if not self.last_added and not point_masses:
            return tree
        device = tree.device
        extra = len(tokens) - n0
        depth = max(tree.max_depth, self.max_draft)
        ids = torch.tensor(tokens, dtype=torch.long, device=device)
        up = torch.tensor(parents, dtype=torch.long, device=device)
        if not point_masses:
            return DraftTree.from_parents(ids, up, depth)
        # The continuations go first among the root's children (then the draws): the first token's law is the same in
        # either order (the draws skip the point masses' tokens), and a confident retrieval is tried first.
        order = torch.tensor([0, *range(n0, len(tokens)), *range(1, n0)], dtype=torch.long, device=device)
        new_id = torch.empty_like(order).scatter_(0, order, torch.arange(len(tokens), device=device))
        up = up[order]
        up = torch.where(up >= 0, new_id[up.clamp(min=0)], up)
        q_dist = torch.cat([tree.q_dist, tree.q_dist.new_zeros(extra, tree.q_dist.shape[-1])])[order]
        q_cond = torch.cat([tree.q_cond, tree.q_cond.new_ones(extra)])[order]
        return DraftTree.from_parents(ids[order], up, depth, q_dist, q_cond, point_mass=order >= n0)

    def _pays(self, path_prob: float, size: int) -> bool:
        """Whether one more node of path probability ``path_prob`` raises tokens per second at tree size ``size``."""
        if self.curve is None:
            return path_prob >= self.min_prob
        now, more = self.curve.cost(size), self.curve.cost(size + 1)
        return path_prob / self._tokens_per_cycle > (more - now) / now

    # ------------------------------------------------------------------------------------------- feedback
    def _learn(self, generation: int, history: torch.Tensor, root: int) -> None:
        """Learn from what the target emitted since the last proposal: rates, and the base's own accepted length."""
        last, self._last = self._last, None
        pending, self._pending = self._pending, None
        if last is None or last.generation != generation:  # a new generation: the last one's tail was never judged
            return
        emitted = history[last.position + 1 :].tolist() + [root]
        for c in last.proposals:
            self.rates.observe(c.match_length, c.tokens, emitted)
        if pending is not None and last.base is not None:
            path = _matched_path(last.base_tokens, last.base_parents, emitted)
            last.base.observe(len(path) - 1, pending[1])
            if not _continuation_first(path, emitted, last.proposals):
                last.base.observe_path(path)

    def sync_payload(self) -> torch.Tensor | None:
        """The payload of the base policy that grew the latest tree."""
        last = self._last
        return None if last is None or last.base is None else last.base.sync_payload()

    def observe(self, accept_length: int, payload: list[float] | None = None) -> None:
        """Keep the cycle's feedback: the emitted-tokens average now; the base's (its own tree's accepted length,
        known once the tokens are committed) at the next :meth:`grow`."""
        self._tokens_per_cycle = 0.9 * self._tokens_per_cycle + 0.1 * (accept_length + 1)
        self._pending = (accept_length, payload)

    def __repr__(self) -> str:
        return f"CompositeTreePolicy(base={self.base!r}, max_draft={self.max_draft}, branches={self.branches})"


class _Resized(TreePolicy):
    """A :class:`CompositeTreePolicy` growing one cycle's tree with its base resized (:meth:`~CompositeTreePolicy.
    resized`); everything else (kind, payload, feedback) is the composite's own."""

    def __init__(self, owner: CompositeTreePolicy, total: int) -> None:
        self.owner, self.total = owner, total
        self.max_nodes, self.max_depth = owner.max_nodes, owner.max_depth

    def grow(self, drafter, root, sampling, generator, avoid=None) -> DraftTree:
        return self.owner._grow(drafter, root, sampling, generator, self.total)

    def kind(self, sampling: SamplingParams) -> TreeKind:
        return self.owner.kind(sampling)

    def sync_payload(self) -> torch.Tensor | None:
        return self.owner.sync_payload()

    def observe(self, accept_length: int, payload: list[float] | None = None) -> None:
        self.owner.observe(accept_length, payload)

    def observe_path(self, accepted: list[int]) -> None:
        self.owner.observe_path(accepted)


def _children(tokens: list[int], parents: list[int]) -> dict[tuple[int, int], int]:
    """``{(parent, token): node}`` of a tree's non-root nodes, the first sibling of a repeated token kept."""
    child: dict[tuple[int, int], int] = {}
    for i in range(1, len(tokens)):
        child.setdefault((parents[i], tokens[i]), i)
    return child


def _continuation_first(path: list[int], emitted: list[int], proposals: list[Continuation]) -> bool:
    """Whether a continuation's first token was accepted where the base tree has no such child: beside draws it is
    tried before them (and the draws skip its token), so the base's children were never tried and the path ``[0]``
    says nothing about them (a policy that learns per tried child, :mod:`specdec.trees.ranked`, must not read it)."""
    return len(path) == 1 and len(emitted) > 1 and any(c.tokens and c.tokens[0] == emitted[0] for c in proposals)


def _matched_path(tokens: list[int], parents: list[int], emitted: list[int]) -> list[int]:
    """The base tree's node ids that follow ``emitted`` from the root, root first (its accepted path had it been
    alone, at T = 0: its accepted length is one less)."""
    child = _children(tokens, parents)
    path = [0]
    for token in emitted[:-1]:  # the last emitted token is the bonus, never a draft token
        if (path[-1], token) not in child:
            break
        path.append(child[(path[-1], token)])
    return path

"""Stochastic static trees (EAGLE-1 at T > 0): a fixed shape whose children are sampled, not ranked.

The shape is a :class:`~specdec.trees.static.StaticTreePolicy` path list, but the child of rank ``r`` is the
``r``-th draw *without replacement* from the draft distribution ``q = softmax(logits / T)``. The draws are
sequential inverse-CDF draws over the drafter's own vocabulary (:func:`~specdec.sampling.sample_distinct` on the
``[F, V_d]`` rows of :meth:`~specdec.interfaces.Drafter.expand_draft`): one float64 CDF per row and one uniform per
child, instead of ``V`` Gumbel keys per row (EAGLE-3's 16k draft vocabulary instead of the target's 49k).

What the tree records for the stochastic verifiers (see :class:`~specdec.tree.DraftTree`):

* ``q_dist [N, V]``: row ``u`` is the q the children of ``u`` were drawn from; rows of leaves are zero;
* ``q_cond [N]``: ``q(x_k) / (1 - sum_{j<k} q(x_j))`` for the k-th drawn child (root entry 1).

Siblings are consecutive draws, so a stochastic shape must give each node children of ranks ``0 .. c-1``
with no gaps (a gap would hide a draw from the verifier and break losslessness); the constructor checks this.

Full support: logits are floored at ``max - 60`` (after the temperature) before the softmax, so every token of the
draft vocabulary has ``q > 0`` in float32 and a row always has as many candidates as the shape's widest level asks
for (the change to q is below ``V_d * e^-60``). Tokens off the draft vocabulary have ``q = 0`` exactly in
``q_dist``: they are never drawn, and the verifiers' residual ``max(0, p - q)`` keeps their target mass.

At ``T = 0`` the policy falls back to deterministic top-k and returns a deterministic tree (``q_dist is None``),
identical to the static policy's.

The draft's temperature. The children may be drawn at a temperature of their own, ``ratio x T``
(``draft_temperature_ratio``): any q is lossless, because the verifier judges every child against the q recorded
in ``q_dist``, which is the q it was drawn from. A small head is flatter than its target at ``T = 1``; drawn
sharper, its draws land on the tokens the target favours more often. Measured on SmolLM2-135M's EAGLE-3 head at
``T = 1`` (``benchmarks/draft_temperature.py``, 150 roots of MT-bench decoding): one draw is accepted with
probability 0.256 at ratio 1 and 0.292 at ratio 0.7, three draws without replacement 0.38 and 0.43.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.interfaces import Drafter, TreeKind, TreePolicy
from specdec.sampling import SamplingParams, sample_distinct
from specdec.tree import DraftTree, PartialTree
from specdec.tree_checks import checked_draft
from specdec.trees.level_gate import LevelGate
from specdec.trees.static import StaticTreePolicy

__all__ = ["StochasticTreePolicy", "LOGIT_FLOOR", "check_draft_temperature_ratio"]

#: Tempered logits below ``max - LOGIT_FLOOR`` are raised to it, so that q has full support in float32.
LOGIT_FLOOR = 60.0


class StochasticTreePolicy(TreePolicy):
    """Static tree shape, children sampled without replacement from ``softmax(logits / T)``.

    Args:
        shape: a prefix-closed rank-path list, or a :class:`StaticTreePolicy` whose shape to use. Every node's
            child ranks must be ``0 .. c-1`` (consecutive draws).
        draft_temperature_ratio: children are drawn from ``softmax(logits / (ratio x T))`` (module docstring);
            1.0 draws at the call's temperature.
        gate: draws each level after the root's only where it pays (:class:`~specdec.trees.level_gate.LevelGate`);
            None draws the whole shape every cycle.

    Attributes:
        shape: the :class:`StaticTreePolicy` (also used as the T = 0 fallback).
        max_nodes, max_depth: those of the shape.
    """

    def __init__(
        self,
        shape: Sequence[Sequence[int]] | StaticTreePolicy,
        draft_temperature_ratio: float = 1.0,
        gate: LevelGate | None = None,
    ) -> None:
        check_draft_temperature_ratio(draft_temperature_ratio)
        self.draft_temperature_ratio = float(draft_temperature_ratio)
        self.gate = gate
        self.shape = shape if isinstance(shape, StaticTreePolicy) else StaticTreePolicy(shape)
        present = set(self.shape.paths)
        for path in self.shape.paths:
            if path[-1] > 0 and path[:-1] + (path[-1] - 1,) not in present:
                raise ValueError(
                    f"path {list(path)} skips rank {path[-1] - 1}: sampled siblings must be consecutive draws"
                )
        self.max_nodes = self.shape.max_nodes
        self.max_depth = self.shape.max_depth
        self.is_chain = self.shape.is_chain
        self._resized: dict[int, StochasticTreePolicy | None] = {}  # resized(total), built once per size

    @classmethod
    def chain(cls, length: int) -> StochasticTreePolicy:
        """A chain of ``length`` sampled draft tokens (classic speculative sampling)."""
        return cls(StaticTreePolicy.chain(length))

    @classmethod
    def eagle1_default(cls) -> StochasticTreePolicy:
        """The EAGLE-1 ``mc_sim_7b_63`` shape with sampled children."""
        return cls(StaticTreePolicy.eagle1_default())

    def resized(self, total: int) -> StochasticTreePolicy | None:
        """Depth-1 trees of ``total`` nodes: ``total - 1`` draws without replacement at the root (one root step, which
        a batch runs for all its rows in one head forward, :mod:`specdec.pace`), at this policy's temperature ratio;
        None past the widest root of this shape (so :meth:`kind`'s ``max_children`` still bounds every tree)."""
        if total not in self._resized:  # asked per row and cycle in a batch: built once (a shape costs ~35 us)
            fits = 2 <= total <= 1 + sum(len(p) == 1 for p in self.shape.paths)
            ranks = [(r,) for r in range(total - 1)]
            self._resized[total] = StochasticTreePolicy(ranks, self.draft_temperature_ratio) if fits else None
        return self._resized[total]

    def kind(self, sampling: SamplingParams) -> TreeKind:
        """Sampled candidates at T > 0 (``max_children``: the widest sibling group); at T = 0 the deterministic tree
        of :attr:`shape`."""
        if sampling.greedy:
            return self.shape.kind(sampling)
        return TreeKind(sampled=True, chain=self.is_chain, max_children=max(lv.width for lv in self.shape.levels))

    def grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        avoid: torch.Tensor | None = None,
    ) -> DraftTree:
        """Grow the shape under ``root``, one ``expand`` per level, sampling children with ``generator``.

        Args:
            drafter: proposes ``[F, V_d]`` logits per level (:meth:`~specdec.interfaces.Drafter.expand_draft`).
            root: 0-dim long, the last emitted token.
            sampling: only ``temperature`` is used (the draws' temperature is ``ratio x T``; 0 = deterministic
                top-k).
            generator: the source of the draws.
            avoid: ``[A]`` long target ids the root's children must not be drawn from (the point masses a composite
                policy puts beside them): the root's q has them removed and renormalised before the draws, and
                ``q_dist[0]`` records that q (contract: each child's recorded q is the law it was drawn from).

        Returns:
            A :class:`DraftTree` of ``max_nodes`` nodes with ``q_dist [N, V]`` float32 and ``q_cond [N]`` float32
            (for T = 0, the static policy's deterministic tree, without them).
        """
        if sampling.greedy:
            return self.shape.grow(drafter, root, sampling, generator)
        parents, levels = self.shape.plan_on(root.device)
        n = self.max_nodes
        tree = PartialTree(root, n)
        q_dist: torch.Tensor | None = None
        q_cond = torch.ones(n, dtype=torch.float32, device=root.device)
        gate = self.gate
        if gate is not None:
            gate.start(root.device)
        for i, level in enumerate(levels):
            if i and gate is not None and not gate.draws(tree, level.frontier, level.child_row.shape[0]):
                break  # this level, and every deeper one, does not pay (its frontier's draws decide)
            logits, ids = checked_draft(drafter, tree, level.frontier)  # [F, V_d], target ids [V_d] (None: V_d = V)
            logits = logits.float() / (sampling.temperature * self.draft_temperature_ratio)
            if level.width > logits.shape[-1]:
                raise ValueError(f"cannot draw {level.width} distinct children from a vocabulary of {logits.shape[-1]}")
            logits = torch.maximum(logits, logits.amax(-1, keepdim=True) - LOGIT_FLOOR)
            q = torch.softmax(logits, dim=-1)  # [F, V_d]
            if avoid is not None and level is levels[0]:  # the root level: frontier [0]
                q = _without(q, avoid if ids is None else torch.isin(ids, avoid).nonzero().flatten())
            if q_dist is None:
                vocab = logits.shape[-1] if ids is None else drafter.vocab_size
                q_dist = torch.zeros(n, vocab, dtype=torch.float32, device=root.device)
            drawn = sample_distinct(q, level.width, generator)  # [F, width] draft-vocabulary columns, draw order
            q_drawn = q.gather(-1, drawn).double()  # [F, width]
            mass_before = q_drawn.cumsum(-1) - q_drawn
            remaining = q.double().sum(-1, keepdim=True) - mass_before
            cond = (q_drawn / remaining.clamp_min(torch.finfo(torch.float64).tiny)).float()  # [F, width]
            row, rank = level.child_row, level.child_rank
            value = tree.logq[level.frontier][row] + torch.log(q_drawn[row, rank]).float()
            tokens = drawn if ids is None else ids[drawn]
            added = tree.add(level.frontier[row], tokens[row, rank], value)
            if ids is None:
                q_dist[level.frontier] = q
            else:
                q_dist[level.frontier[:, None], ids[None, :]] = q
            q_cond[added] = cond[row, rank]
            if gate is not None:
                if i:
                    gate.expanded(added, row)
                gate.level_done(first=i == 0)
        m = tree.size  # the levels drawn: node ids are level by level, so a prefix of the shape
        return DraftTree.from_parents(
            tree.tokens[:m].clone(), parents[:m].clone(), self.max_depth, q_dist[:m], q_cond[:m].clone()
        )

    def observe(self, accept_length: int, payload: list[float] | None = None) -> None:
        if self.gate is not None:
            self.gate.observe(accept_length)

    def observe_path(self, accepted: list[int]) -> None:
        if self.gate is not None:
            self.gate.observe_path(accepted)

    def __repr__(self) -> str:
        ratio = (
            "" if self.draft_temperature_ratio == 1.0 else f", draft_temperature_ratio={self.draft_temperature_ratio}"
        )
        return f"StochasticTreePolicy(nodes={self.max_nodes}, depth={self.max_depth}{ratio})"


def check_draft_temperature_ratio(ratio: float) -> None:
    """Raise ``ValueError`` unless ``ratio`` is a positive finite number (NaN included)."""
    if not 0 < ratio < float("inf"):
        raise ValueError(f"draft_temperature_ratio must be a positive finite number, got {ratio}")


def _without(q: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``q [F, V_d]`` with ``columns`` zeroed and each row renormalised."""
    q = q.index_fill(-1, columns.to(q.device), 0.0)
    return q / q.sum(-1, keepdim=True)

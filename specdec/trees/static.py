"""EAGLE-1 static trees: a fixed shape given as a list of paths of child ranks.

A path such as ``[0, 2, 1]`` names the node reached from the root by taking the parent's best child (rank 0),
then that node's third-best child (rank 2), then its second-best (rank 1). The set of paths must be
prefix-closed: ``[0, 2, 1]`` needs ``[0, 2]`` and ``[0]``. The default ``mc_sim_7b_63`` tree has 25 paths,
depth 5 and 4/8/8/3/2 nodes per level.

Everything that depends only on the shape is computed once, at construction: the node order (level by level,
within a level by parent then rank, so parents come before children and siblings are in rank order), the parent
vector, and per level which nodes are expanded and which ``(frontier row, rank)`` each child takes. Growing a tree
is then one :meth:`~specdec.interfaces.Drafter.expand_topk` call per level plus two gathers.

Candidates are a deterministic function of the context (top-k of the draft logits), so q is one-hot in the sense
of the deterministic-candidate verifiers; :meth:`StaticTreePolicy.grow` never touches the generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.interfaces import Drafter, TreeKind, TreePolicy
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree, PartialTree
from specdec.tree_checks import checked_topk

__all__ = ["EAGLE1_DEFAULT_PATHS", "LevelPlan", "StaticTreePolicy", "validate_paths"]

#: EAGLE-1 ``mc_sim_7b_63``: 25 paths, depth 5, 4/8/8/3/2 nodes per level, top-k 10.
EAGLE1_DEFAULT_PATHS: tuple[tuple[int, ...], ...] = (
    (0,),
    (1,),
    (2,),
    (3,),
    (0, 0),
    (0, 1),
    (0, 2),
    (1, 0),
    (1, 1),
    (2, 0),
    (2, 1),
    (3, 0),
    (0, 0, 0),
    (0, 0, 1),
    (0, 0, 2),
    (0, 1, 0),
    (0, 1, 1),
    (0, 2, 0),
    (0, 2, 1),
    (1, 0, 0),
    (0, 0, 0, 0),
    (0, 0, 0, 1),
    (0, 0, 0, 2),
    (0, 0, 0, 0, 0),
    (0, 0, 0, 0, 1),
)
#: The top-k the EAGLE-1 reference uses with its default tree.
EAGLE1_DEFAULT_TOPK = 10


def validate_paths(paths: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Check a path list and return it as sorted, de-aliased tuples (shorter first, then lexicographic).

    Raises:
        ValueError: empty list, an empty path, a non-integer or negative rank, a duplicate path, or a path
            whose prefix is missing (the set must be prefix-closed).
    """
    if len(paths) == 0:
        raise ValueError("a static tree needs at least one path")
    seen: set[tuple[int, ...]] = set()
    for path in paths:
        if len(path) == 0:
            raise ValueError("paths must be non-empty (the root is implicit)")
        for rank in path:
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
                raise ValueError(f"path {list(path)}: ranks must be non-negative integers, got {rank!r}")
        key = tuple(path)
        if key in seen:
            raise ValueError(f"path {list(path)} appears twice")
        seen.add(key)
    for key in seen:
        if len(key) > 1 and key[:-1] not in seen:
            raise ValueError(f"path {list(key)} has no parent path {list(key[:-1])}: paths must be prefix-closed")
    return sorted(seen, key=lambda p: (len(p), p))


@dataclass(frozen=True)
class LevelPlan:
    """How one level of a static tree grows (all tensors on the CPU; moved to the tree's device per call).

    Attributes:
        frontier: ``[F]`` long ids of the nodes at this depth that have children (expanded in one call).
        child_row: ``[M]`` long, for each child created at the next depth, its parent's row in ``frontier``.
        child_rank: ``[M]`` long, the child's rank among its parent's candidates.
        width: number of candidates needed per frontier node (``max(child_rank) + 1``).
    """

    frontier: torch.Tensor
    child_row: torch.Tensor
    child_rank: torch.Tensor
    width: int


class StaticTreePolicy(TreePolicy):
    """EAGLE-1 tree: a fixed shape, children chosen by rank in the draft's top-k.

    Args:
        paths: prefix-closed list of rank paths (see the module docstring).
        topk: candidates ranked per node; must exceed every rank. ``None`` means ``max rank + 1``.

    Attributes:
        paths: the validated paths, in node order (node ``i + 1`` is ``paths[i]``).
        parents: ``[N]`` long parent vector of the shape (``-1`` for the root).
        levels: one :class:`LevelPlan` per expanded depth (``levels[d]`` grows depth ``d + 1``).
        max_nodes: ``N = len(paths) + 1``.
        max_depth: length of the longest path.
    """

    def __init__(self, paths: Sequence[Sequence[int]], topk: int | None = None) -> None:
        self.paths = validate_paths(paths)
        max_rank = max(max(p) for p in self.paths)
        if topk is None:
            topk = max_rank + 1
        if topk <= max_rank:
            raise ValueError(f"topk={topk} but a path uses rank {max_rank}; topk must be at least {max_rank + 1}")
        self.topk = topk
        self.max_nodes = len(self.paths) + 1
        self.max_depth = max(len(p) for p in self.paths)

        # Node order: sorted by (depth, path). Within a depth this is (parent's path, rank), i.e. (parent id,
        # rank), since parents at the previous depth are in the same lexicographic order.
        node_id = {(): 0} | {p: i + 1 for i, p in enumerate(self.paths)}
        parent_ids = [-1] + [node_id[p[:-1]] for p in self.paths]
        self.parents = torch.tensor(parent_ids, dtype=torch.long)
        #: every node has at most one child: chain verifiers (block verification) apply
        self.is_chain = parent_ids == list(range(-1, len(parent_ids) - 1))

        self.levels: list[LevelPlan] = []
        for depth in range(self.max_depth):
            children = [p for p in self.paths if len(p) == depth + 1]
            frontier = sorted({node_id[p[:-1]] for p in children})
            row = {u: r for r, u in enumerate(frontier)}
            self.levels.append(
                LevelPlan(
                    frontier=torch.tensor(frontier, dtype=torch.long),
                    child_row=torch.tensor([row[node_id[p[:-1]]] for p in children], dtype=torch.long),
                    child_rank=torch.tensor([p[-1] for p in children], dtype=torch.long),
                    width=max(p[-1] for p in children) + 1,
                )
            )
        self._device_cache: dict[torch.device, tuple[torch.Tensor, list[LevelPlan]]] = {}

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], topk: int | None = None) -> StaticTreePolicy:
        """Same as the constructor; reads better at call sites that also use :meth:`chain`."""
        return cls(paths, topk)

    @classmethod
    def eagle1_default(cls) -> StaticTreePolicy:
        """The EAGLE-1 ``mc_sim_7b_63`` tree (26 nodes with the root) with top-k 10."""
        return cls(EAGLE1_DEFAULT_PATHS, EAGLE1_DEFAULT_TOPK)

    @classmethod
    def chain(cls, length: int) -> StaticTreePolicy:
        """A single chain of ``length`` greedy draft tokens (classic speculative decoding)."""
        if length < 1:
            raise ValueError(f"chain length must be at least 1, got {length}")
        return cls([[0] * n for n in range(1, length + 1)], topk=1)

    def plan_on(self, device: torch.device) -> tuple[torch.Tensor, list[LevelPlan]]:
        """The parent vector and level plans on ``device`` (copied once per device)."""
        if device not in self._device_cache:
            self._device_cache[device] = (
                self.parents.to(device),
                [
                    LevelPlan(lv.frontier.to(device), lv.child_row.to(device), lv.child_rank.to(device), lv.width)
                    for lv in self.levels
                ],
            )
        return self._device_cache[device]

    def kind(self, sampling: SamplingParams) -> TreeKind:
        """Deterministic candidates (top-ranked children); a chain if every node has at most one child."""
        return TreeKind(chain=self.is_chain)

    def grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> DraftTree:
        """Grow the fixed shape under ``root`` with one ``expand_topk`` per level.

        Args:
            drafter: proposes each level's top ``width`` children (:meth:`~specdec.interfaces.Drafter.expand_topk`).
            root: 0-dim long, the last emitted token.
            sampling: unused (candidates are the draft's top-k regardless of temperature).
            generator: unused (deterministic policy).

        Returns:
            A :class:`DraftTree` of ``max_nodes`` nodes; node ids follow ``paths`` order.
        """
        parents, levels = self.plan_on(root.device)
        tree = PartialTree(root, self.max_nodes)
        for level in levels:
            top_logq, top_tokens = checked_topk(drafter, tree, level.frontier, level.width)  # [F, width], best first
            if top_tokens.shape[-1] < level.width:
                raise ValueError(
                    f"the static tree takes the top {level.width} children of a node but the drafter can propose "
                    f"only {top_tokens.shape[-1]} tokens (its draft vocabulary); use a narrower tree"
                )
            tokens = top_tokens[level.child_row, level.child_rank]  # [M]
            value = tree.logq[level.frontier][level.child_row] + top_logq[level.child_row, level.child_rank]
            tree.add(level.frontier[level.child_row], tokens, value)
        n = self.max_nodes
        return DraftTree.from_parents(tree.tokens[:n].clone(), parents.clone(), self.max_depth)

    def __repr__(self) -> str:
        return f"StaticTreePolicy(nodes={self.max_nodes}, depth={self.max_depth}, topk={self.topk})"

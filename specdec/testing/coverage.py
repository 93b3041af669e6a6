"""What a check exercised: the paths of the verification walk that its runs (or its exact law) went through.

A planted bug only shows where the walk takes the path it lives on: a residual that is not renormalised after a
rejection needs a *later sibling* to be tried, a bonus drawn from the wrong row needs a cycle that *accepted* a draft
token, and so on. :class:`Coverage` counts those events per cycle, from the tree and the node where the walk stopped
(:func:`node_events`), so a report can say why a check had no power against a bug: its path carried no probability.

Two sources fill it: :class:`RecordingVerifier` (sampled runs: the events of each verdict) and
:func:`specdec.testing.pipeline.pipeline_law` (exact: the events of every outcome weighted by its probability).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdec.interfaces import Verdict, Verifier
from specdec.sampling import SamplingParams
from specdec.testing.wrapped import WrappedVerifier
from specdec.tree import DraftTree

__all__ = ["EVENTS", "Coverage", "RecordingVerifier", "node_events"]

#: The walk's paths a bug can live on, with the words a report uses for them.
EVENTS: dict[str, str] = {
    "cycles": "cycles",
    "rejections": "cycles with a rejected draft token",
    "later_siblings": "cycles that tried a sibling after the first",
    "residual_bonuses": "bonus tokens drawn from a residual",
    "multi_tests": "cycles with two or more acceptance tests",
    "deep_stops": "cycles that accepted a draft token",
    "off_index_paths": "cycles whose accepted path is not the first nodes in index order",
}


def node_events(tree: DraftTree) -> dict[str, torch.Tensor]:
    """``{event: [N] float}``: for each node ``u``, whether a walk that stops at ``u`` takes each path of
    :data:`EVENTS` (1.0 or 0.0), read from the tree's structure alone.

    A walk that stops at ``u`` accepted every node on ``u``'s root path, rejected every earlier sibling of those
    nodes, and rejected every child of ``u`` (so the bonus comes from ``u``'s residual when ``u`` has children).
    """
    parents, paths = tree.parents.cpu(), tree.paths.cpu()
    n = tree.num_nodes
    idx = torch.arange(n)
    children = torch.bincount(parents[1:], minlength=n)  # [N]
    rank = ((parents[None, :] == parents[:, None]) & (idx[None, :] < idx[:, None])).sum(-1)  # earlier siblings
    rank[0] = 0
    on_path = paths >= 0  # [N, D+1]
    path_rank = torch.where(on_path, rank[paths.clamp(min=0)], 0)  # root's rank is 0
    tried_before = path_rank.sum(-1)  # rejected earlier siblings along the path
    tests = (path_rank + on_path.long())[:, 1:].sum(-1) + children
    in_order = torch.where(on_path, paths == torch.arange(paths.shape[1])[None, :], True).all(-1)
    ev = {
        "cycles": torch.ones(n),
        "rejections": (children > 0) | (tried_before > 0),
        "later_siblings": (path_rank > 0).any(-1) | (children >= 2),
        "residual_bonuses": children > 0,
        "multi_tests": tests >= 2,
        "deep_stops": tree.depth.cpu() > 0,
        "off_index_paths": ~in_order,
    }
    return {k: v.to(torch.float64) for k, v in ev.items()}


@dataclass
class Coverage:
    """Events of :data:`EVENTS` summed over the checked runs (``runs`` of them; an exact law counts as one run
    whose events are expectations), and the accepted length of every cycle (``depths[k]``: cycles that accepted
    ``k`` draft tokens)."""

    runs: float = 0.0
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(EVENTS, 0.0))
    depths: dict[int, float] = field(default_factory=dict)

    def add(self, events: dict[str, torch.Tensor], stop_law: torch.Tensor, depth: torch.Tensor) -> None:
        """Add one cycle: ``stop_law [N]`` is where it stopped (a one-hot for a sampled verdict)."""
        w = stop_law.to(torch.float64).cpu()
        for k, v in events.items():
            self.totals[k] += float((w * v).sum())
        for d, mass in zip(depth.cpu().tolist(), w.tolist(), strict=True):
            if mass > 0:
                self.depths[d] = self.depths.get(d, 0.0) + mass

    def per_run(self, event: str) -> float:
        """Mean count of ``event`` per run (per generated sequence)."""
        return self.totals[event] / self.runs if self.runs else 0.0

    @property
    def max_depth(self) -> int:
        """The deepest accepted length reached (0: no draft token was ever accepted)."""
        return max((d for d, m in self.depths.items() if m > 0), default=0)

    def describe(self) -> str:
        """One line: each event's count per run, and the depths reached."""
        parts = [f"{self.per_run(k):.3g} {EVENTS[k]}" for k in EVENTS]
        return f"per run: {', '.join(parts)}; deepest accepted length {self.max_depth}"


class RecordingVerifier(WrappedVerifier):
    """``inner`` unchanged, recording the events of every verdict in :attr:`coverage` (one host sync per cycle:
    for tests and checks, not for speed).

    Args:
        inner: the verifier whose verdicts are recorded; its plan, walk and refusals are used as they are.
    """

    def __init__(self, inner: Verifier) -> None:
        super().__init__(inner)
        self.coverage = Coverage()

    def verify(
        self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
    ) -> Verdict:
        verdict = self.inner.verify(tree, target_logits, sampling, generator)
        final = int(verdict.accepted[int(verdict.accept_length)])
        stopped = torch.zeros(tree.num_nodes, dtype=torch.float64)
        stopped[final] = 1.0
        self.coverage.add(node_events(tree), stopped, tree.depth)
        return verdict

    def __repr__(self) -> str:
        return repr(self.inner)

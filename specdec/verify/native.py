"""The multi-round plans of sampled trees on the CPU in one native call (``specdec::multiround_plan``).

:func:`~specdec.verify.mixed.mixed_multiround_plan` and
:func:`~specdec.verify.stochastic.stochastic_multiround_plan` build a plan from ~100 small tensor ops over the
``[N, V]`` rows and ``[N, N]`` sibling matrices; on a CPU at T = 1 that was 2.4 ms of a ~65 ms EAGLE-3 cycle
(``docs/results/2026-11-30-native-steps-intel-f6m106``). ``multiround.cpp`` (in the kernel library,
:mod:`specdec.backends.native`) runs the same closed form in a few passes over the ``[V]`` rows of the nodes that
have children, and builds the one residual row the walk samples from.

It is a backend of the plan, not a second rule: the law is the mixed plan's. With no point masses and distinct draws
(what a sampled tree holds: its q has full support) that is the stochastic plan's, whose first round divides by ``1``
where this divides by the row's q mass (``1`` up to float rounding); with repeated draws the two closed forms differ
(both stay lossless), and
``tests/test_native_steps.py`` holds it to the tensor form on random trees (duplicates, point masses, rows whose
children hold all the mass, bounded rounds) and runs the exact suite through it in float64.

Where it runs: :func:`~specdec.backends.native.runs_native` (a CPU tensor of float32 or float64, the kernel library
available, ``SPECDEC_SKINNY`` not ``off``); elsewhere :func:`native_plan` returns None and the caller builds the
tensor plan.
"""

from __future__ import annotations

import torch

from specdec.backends.native import runs_native
from specdec.tree import DraftTree
from specdec.verify.plan import VerifyPlan

__all__ = ["native_plan"]


def native_plan(
    tree: DraftTree,
    p: torch.Tensor,
    q: torch.Tensor,
    point_mass: torch.Tensor | None = None,
    max_children: int | None = None,
) -> VerifyPlan | None:
    """The mixed multi-round plan of ``tree`` by ``specdec::multiround_plan``, or None where it does not run
    (:func:`~specdec.backends.native.runs_native`).

    Args:
        tree: ``N`` nodes, children in proposal order.
        p, q: ``[N, V]`` target and draft laws, row ``u`` for the children of ``u`` (one dtype).
        point_mass: ``[N]`` bool, the point-mass children; None: every child is a draw.
        max_children: rounds to run (``None``: every child is judged).

    Returns:
        A :class:`VerifyPlan` with ``accept_prob [N]`` and ``residual_at`` (the walk's one row, built natively).
    """
    if not runs_native(p):
        return None
    n = tree.num_nodes
    if point_mass is None:
        point_mass = torch.zeros(n, dtype=torch.bool)
    rounds = n if max_children is None else min(max_children, max(n - 1, 0))
    parents = tree.parents.contiguous()
    tokens = tree.tokens.contiguous()
    point_mass = point_mass.to(torch.bool).contiguous()
    q = q.to(p.dtype)
    accept, t = torch.ops.specdec.multiround_plan(p, q, parents, tokens, point_mass, rounds)

    def residual_at(nodes: torch.Tensor) -> torch.Tensor:
        """``nodes [...]`` -> ``[..., V]``: ``max(0, p m - t q)`` renormalised, or ``p`` where it is all zero."""
        return torch.ops.specdec.multiround_residual(p, q, t, parents, tokens, point_mass, nodes)

    return VerifyPlan(accept_prob=accept, residual_at=residual_at)

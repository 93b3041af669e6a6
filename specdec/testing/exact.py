"""Exact losslessness: the distribution a verifier's plan emits, computed in float64, against the target's.

The claim checked for a :class:`~specdec.testing.cases.VerifyCase` with depth ``D`` and vocabulary ``V``:
one cycle emits the accepted tokens and the bonus token; continue with the target process until ``D + 1``
tokens; the resulting distribution over the ``V ** (D + 1)`` sequences must equal the target process's own.
For sampled candidates the distribution is averaged over every candidate draw (enumerated exactly).

The computation uses the verifier's own :meth:`~specdec.verify.plan.PlanVerifier.plan` and the shared walk's own
decision code: every outcome of the coins (node ``c`` accepted with probability ``clamp(accept_prob[c], 0, 1)``,
NaN counting as 0 since ``u < NaN`` is false) goes through :func:`~specdec.verify.walk.end_nodes`, and the bonus
is drawn from the residual row clamped at 0 and normalised (as :func:`~specdec.sampling.sample` does). A broken
plan, or a broken walk, therefore fails here with no sampling noise: tolerances are float64 rounding only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from specdec.testing.cases import VerifyCase, prefix_index
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.plan import VerifyPlan
from specdec.verify.walk import end_nodes

__all__ = [
    "VerifyCase",
    "assert_lossless_exact",
    "exact_output_distribution",
    "expected_accepted",
    "stop_probabilities",
    "target_distribution",
]


def _completions(case: VerifyCase) -> list[torch.Tensor]:
    """``R[m]``, ``m = 0 .. D + 1``, shape ``[V] * (D + 1)``: ``R[m][s]`` = P(tokens ``m..D`` of ``s`` | ``s[:m]``)."""
    v, d_max = case.vocab_size, case.depth
    cond = case.target_conditionals()
    out = [torch.ones((v,) * (d_max + 1), dtype=torch.float64)]
    for m in range(d_max, -1, -1):
        p_m = cond[m].reshape((v,) * (m + 1) + (1,) * (d_max - m))
        out.append(p_m * out[-1])
    return out[::-1]


def target_distribution(case: VerifyCase) -> torch.Tensor:
    """``[V] * (D + 1)`` float64: the target process's distribution over sequences of ``D + 1`` tokens."""
    return _completions(case)[0]


#: Most non-root nodes :func:`stop_probabilities` enumerates the coins of (``2 ** 16`` outcomes).
MAX_ENUMERATED_NODES = 16


def tree_on_cpu(tree: DraftTree) -> DraftTree:
    """``tree``'s structure (tokens, parents, depth, mask, paths) on the CPU, for the enumerations here."""
    return dataclasses.replace(
        tree, **{f: getattr(tree, f).cpu() for f in ("tokens", "parents", "depth", "attn_mask", "paths")}
    )


def stop_probabilities(tree: DraftTree, plan: VerifyPlan) -> torch.Tensor:
    """``[N]`` float64: the exact probability that :func:`~specdec.verify.walk.walk` stops at each node.

    Enumerates every outcome of the non-root coins (node ``c`` accepted with probability
    ``a_c = clamp(accept_prob[c], 0, 1)``, NaN -> 0, independently) and sends each through
    :func:`~specdec.verify.walk.end_nodes`, the walk's own code: nothing here models the walk a second time.

    Raises:
        ValueError: a tree with more than :data:`MAX_ENUMERATED_NODES` non-root nodes.
    """
    n = tree.num_nodes
    if n - 1 > MAX_ENUMERATED_NODES:
        raise ValueError(f"{n - 1} non-root nodes: exact enumeration is for trees of at most {MAX_ENUMERATED_NODES}")
    a = plan.accept_prob.detach().to("cpu", torch.float64)
    a = torch.where(torch.isnan(a), 0.0, a).clamp(0.0, 1.0)[1:]
    outcomes = torch.arange(2 ** (n - 1))[:, None] >> torch.arange(n - 1)[None, :] & 1 > 0  # [2^(N-1), N-1]
    weight = torch.where(outcomes, a, 1.0 - a).prod(-1)
    accepted = torch.cat([torch.zeros(outcomes.shape[0], 1, dtype=torch.bool), outcomes], dim=1)
    final = end_nodes(tree_on_cpu(tree), accepted)
    return torch.zeros(n, dtype=torch.float64).index_add_(0, final, weight)


def _effective_residual(plan: VerifyPlan) -> torch.Tensor:
    """``[N, V]``: the bonus law the walk uses at each node.

    :meth:`VerifyPlan.residual_rows` reads the plan as the walk does: the one-hots of point-mass ``bonus`` tokens
    when the plan has them (whatever its ``residual`` says, so a ``bonus`` that disagrees is caught here), else the
    rows :func:`~specdec.sampling.sample` draws from, clamped at 0 and normalised (NaN propagates).
    """
    r = plan.residual_rows().detach().to("cpu", torch.float64)
    r = torch.where(r < 0, 0.0, r)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / torch.where(s > 0, s, 1.0), torch.where(torch.isnan(s), s, 0.0))


def exact_output_distribution(verifier: PlanVerifier, case: VerifyCase, max_trees: int = 20000) -> torch.Tensor:
    """The exact distribution of "one cycle with ``verifier``, then the target process" over ``D + 1`` tokens.

    Build the verifier with ``dtype=torch.float64`` to compare at float64 precision.

    Args:
        verifier: its :meth:`plan` is called on every candidate tree of ``case``.
        case: target, tree shape, candidates (or draft process) and sampling.
        max_trees: refuse cases with more candidate draws than this.

    Returns:
        ``[V] * (D + 1)`` float64, summing to 1 for a plan whose reachable residuals are distributions.
    """
    v, d_max = case.vocab_size, case.depth
    depths = case.node_depths
    by_depth = [[u for u in range(case.num_nodes) if depths[u] == d] for d in range(d_max + 1)]
    # emitted[m]: [V ** (m - 1), V] mass of emitting exactly m tokens (m - 1 accepted, then the bonus).
    emitted = [torch.zeros(v ** (d), v, dtype=torch.float64) for d in range(d_max + 1)]
    for tokens, weight in case.enumerate_trees(max_trees):
        tree, logits = case.build_tree(tokens)
        plan = verifier.plan(tree, logits, case.sampling)
        stop = stop_probabilities(tree, plan)
        residual = _effective_residual(plan)
        for d, nodes in enumerate(by_depth):
            if not nodes:
                continue
            rows = torch.tensor([prefix_index(case.prefix(tokens, u), v) for u in nodes])
            s = stop[nodes, None]
            mass = torch.where(s > 0, weight * s * residual[nodes], 0.0)  # unreachable rows are never sampled
            emitted[d].index_add_(0, rows, mass)
    completions = _completions(case)
    out = torch.zeros((v,) * (d_max + 1), dtype=torch.float64)
    for d in range(d_max + 1):
        m = d + 1  # tokens emitted by the cycle
        out = out + emitted[d].reshape((v,) * m + (1,) * (d_max + 1 - m)) * completions[m]
    return out


def expected_accepted(verifier: PlanVerifier, case: VerifyCase, max_trees: int = 20000) -> float:
    """The exact expected number of accepted draft tokens of one cycle (bonus not counted), over candidate draws.

    Compares verifiers' benefit without sampling noise, e.g. block vs token-level verification on the same chains.
    """
    depths = torch.tensor(case.node_depths, dtype=torch.float64)
    total = 0.0
    for tokens, weight in case.enumerate_trees(max_trees):
        tree, logits = case.build_tree(tokens)
        total += weight * float(stop_probabilities(tree, verifier.plan(tree, logits, case.sampling)) @ depths)
    return total


def assert_lossless_exact(verifier: PlanVerifier, cases: VerifyCase | Iterable[VerifyCase], atol: float = 1e-9) -> None:
    """Assert that ``verifier`` is exactly lossless on every case (max abs difference ``<= atol``).

    Raises:
        AssertionError: naming the case, the worst sequence and both probabilities, or on non-finite output.
        TypeError: ``verifier`` has no ``plan`` (only a :class:`~specdec.verify.plan.PlanVerifier` is enumerated).
        ValueError: no cases (nothing would be checked).
    """
    if not callable(getattr(verifier, "plan", None)):
        raise TypeError(
            f"assert_lossless_exact enumerates a PlanVerifier's plan; {type(verifier).__name__} has no plan(): "
            "check it through verify() with empirical_verify_check"
        )
    cases = [cases] if isinstance(cases, VerifyCase) else list(cases)
    if not cases:
        raise ValueError("assert_lossless_exact got no cases: an empty check passes whatever the verifier does")
    dtype = getattr(verifier, "dtype", torch.float64)
    hint = (
        f"; the verifier computes in {dtype}, whose rounding alone exceeds atol: build it with dtype=torch.float64"
        if dtype != torch.float64
        else ""
    )
    for i, case in enumerate(cases):
        got = exact_output_distribution(verifier, case)
        want = target_distribution(case)
        err = (got - want).abs()
        worst = float(err.max())
        if not worst <= atol:  # also catches NaN
            flat = int(torch.nan_to_num(err, nan=float("inf")).argmax())
            seq = tuple(int(t) for t in torch.unravel_index(torch.tensor(flat), got.shape))
            raise AssertionError(
                f"{verifier!r} is not lossless on case {case.name or i} (V={case.vocab_size}, D={case.depth}, "
                f"parents={case.parents}, tokens={case.tokens}, sampling={case.sampling}): max |P_spec - P_target| = "
                f"{worst:.3g} > {atol:g}; worst sequence {seq}: spec {float(got.flatten()[flat]):.6g}, target "
                f"{float(want.flatten()[flat]):.6g}; spec total mass {float(got.sum()):.12g}{hint}"
            )

"""Exact (float64, no sampling noise) losslessness of every verifier, and negative controls that must fail."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec.sampling import SamplingParams
from specdec.testing import (
    VerifyCase,
    assert_lossless_exact,
    exact_output_distribution,
    expected_accepted,
    stop_probabilities,
    target_distribution,
)
from specdec.testing.broken import (
    BlockFirstFailureVerifier,
    BlockTokenResidualVerifier,
    GreedyBonusOffByOneVerifier,
    IgnoresQVerifier,
    OneSidedWarpVerifier,
    OnlyZeroRejectedResidualVerifier,
    ResidualNotRenormalisedVerifier,
    StaleQVerifier,
    TraversalStaleQVerifier,
    TraversalStaleWeightVerifier,
)
from specdec.testing.reference import RoundByRoundStochasticVerifier
from specdec.verify import (
    BlockVerifier,
    ChainVerifier,
    GreedyVerifier,
    MultiRoundVerifier,
    PlanVerifier,
    StochasticMultiRoundVerifier,
    TraversalVerifier,
    VerifyPlan,
)

F64 = torch.float64
EXACT = settings(
    deadline=None,
    max_examples=100,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ----------------------------------------------------------------------------------------------- strategies


@st.composite
def samplings(draw: st.DrawFn, temperature: float | None = None) -> SamplingParams:
    t = draw(st.sampled_from([1.0, 0.5, 1.5, 0.0])) if temperature is None else temperature
    top_k = draw(st.sampled_from([0, 0, 3, 2, 1]))
    top_p = draw(st.sampled_from([1.0, 1.0, 0.9, 0.5]))
    return SamplingParams(temperature=t, top_k=top_k, top_p=top_p)


def _draws(vocab: int, k: int) -> int:
    """Ordered draws of k distinct tokens out of vocab (falling factorial)."""
    return math.perm(vocab, k)


@st.composite
def tree_shapes(
    draw: st.DrawFn,
    depth: int,
    max_nodes: int,
    max_children: int,
    kind: str | None = None,
    vocab_budget: tuple[int, int] | None = None,
) -> tuple[int, ...]:
    """A parent vector. ``vocab_budget = (V, B)`` bounds the number of sampled-candidate assignments by B."""
    kind = kind or draw(st.sampled_from(["random", "random", "deep", "chain", "wide"]))
    parents, depths, kids = [-1], [0], [0]

    def fits(u: int) -> bool:
        if depths[u] >= depth or kids[u] >= max_children or len(parents) >= max_nodes:
            return False
        if vocab_budget is None:
            return True
        v, budget = vocab_budget
        if kids[u] + 1 > v:
            return False
        total = math.prod(_draws(v, k + (w == u)) for w, k in enumerate(kids))
        return total <= budget

    def add(u: int) -> None:
        parents.append(u)
        depths.append(depths[u] + 1)
        kids.append(0)
        kids[u] += 1

    if kind == "chain":
        length = draw(st.sampled_from(range(depth, 0, -1)))
        for _ in range(length):
            if not fits(len(parents) - 1):
                break
            add(len(parents) - 1)
    elif kind == "wide":
        width = draw(st.sampled_from(range(max_nodes - 1, 0, -1)))
        for _ in range(width):
            if not fits(0):
                break
            add(0)
    else:  # random; deep: attach to one of the two deepest eligible nodes (long paths with side branches)
        size = draw(st.sampled_from(range(max_nodes - 1, -1, -1)))
        for _ in range(size):
            eligible = [u for u in range(len(parents)) if fits(u)]
            if kind == "deep":
                eligible = sorted(eligible, key=lambda u: -depths[u])[:2]
            if not eligible:
                break
            add(draw(st.sampled_from(eligible)))
    return tuple(parents)


def _probs(
    gen: torch.Generator, shape: tuple[int, ...], mode: str, support: torch.Tensor | None = None
) -> torch.Tensor:
    """Probability table ``shape`` (last axis = vocab); rows restricted to ``support`` ([V] bool) if given."""
    v = shape[-1]
    if mode == "onehot":
        idx = torch.randint(v, shape[:-1], generator=gen) if support is None else None
        if idx is None:
            allowed = support.nonzero().flatten()
            idx = allowed[torch.randint(len(allowed), shape[:-1], generator=gen)]
        return torch.nn.functional.one_hot(idx, v).to(F64)
    if mode == "ties":
        x = torch.randint(0, 3, shape, generator=gen).to(F64)
    elif mode == "peaked":
        x = torch.randn(shape, generator=gen, dtype=F64) * 4
    else:
        x = torch.randn(shape, generator=gen, dtype=F64) * 1.5
    if support is not None:
        x = x.masked_fill(~support, -math.inf)
    if mode == "sparse":
        keep = torch.rand(shape, generator=gen) < 0.5
        keep |= torch.nn.functional.one_hot(x.argmax(-1), v).bool()  # at least one entry per row
        x = x.masked_fill(~keep, -math.inf)
    return torch.softmax(x, -1)


def _logits(probs: torch.Tensor) -> torch.Tensor:
    return torch.log(probs)  # exact zeros become -inf


@st.composite
def det_cases(draw: st.DrawFn, temperature: float | None = None, kind: str | None = None) -> VerifyCase:
    """Deterministic candidates: arbitrary tokens (duplicates allowed), top-k of p, or outside p's support."""
    v = draw(st.sampled_from([3, 4, 5, 6, 8, 2, 7]))
    depth = draw(st.sampled_from([2, 3, 1]))
    parents = draw(tree_shapes(depth, max_nodes=8, max_children=4, kind=kind))
    sampling = draw(samplings(temperature))
    p_mode = draw(st.sampled_from(["dense", "sparse", "dense", "ties", "sparse", "dense", "onehot", "disjoint"]))
    tok_mode = "disjoint" if p_mode == "disjoint" else draw(st.sampled_from(["random", "topk", "dup"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    split = draw(st.integers(1, v - 1))  # disjoint: candidates < split <= support of p
    support = (torch.arange(v) >= split) if p_mode == "disjoint" else None
    mode = "dense" if p_mode == "disjoint" else p_mode
    logits = tuple(_logits(_probs(gen, (v,) * (d + 1), mode, support)) for d in range(depth + 1))
    tokens = [0] * len(parents)
    rank = [0] * len(parents)
    for c in range(1, len(parents)):
        u = parents[c]
        if tok_mode == "disjoint":
            tokens[c] = int(torch.randint(split, (), generator=gen))
        elif tok_mode == "topk":  # the rank-th most likely token after u's prefix (what a good drafter proposes)
            pre = []
            w = u
            while w > 0:
                pre.append(tokens[w])
                w = parents[w]
            row = logits[len(pre)][tuple(reversed(pre))]
            tokens[c] = int(torch.argsort(row, descending=True, stable=True)[rank[u] % v])
        elif tok_mode == "dup" and rank[u] > 0:
            first = next(j for j in range(1, c) if parents[j] == u)
            tokens[c] = (
                tokens[first] if torch.rand((), generator=gen) < 0.6 else int(torch.randint(v, (), generator=gen))
            )
        else:
            tokens[c] = int(torch.randint(v, (), generator=gen))
        rank[u] += 1
    return VerifyCase(logits, parents, sampling, tokens=tuple(tokens), name=f"det/{p_mode}/{tok_mode}")


@st.composite
def sto_cases(draw: st.DrawFn, temperature: float | None = None, kind: str | None = None) -> VerifyCase:
    """Sampled candidates: q dense/sparse/peaked/narrow; p dense/sparse/one-hot/ties/equal to q/disjoint from q."""
    v = draw(st.sampled_from([3, 4, 5, 2]))
    depth = draw(st.sampled_from([2, 3, 1]))
    parents = draw(tree_shapes(depth, max_nodes=7, max_children=3, kind=kind, vocab_budget=(v, 100)))
    kmax = max([parents.count(u) for u in range(len(parents))])
    sampling = draw(samplings(temperature))
    q_mode = draw(st.sampled_from(["dense", "sparse", "peaked", "dense", "narrow"]))
    p_mode = draw(st.sampled_from(["dense", "sparse", "equal_q", "dense", "ties", "sparse", "onehot", "disjoint"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    width = max(kmax, 1)
    if p_mode == "disjoint" and width >= v:
        p_mode = "dense"
    q_support = p_support = None
    if p_mode == "disjoint":
        q_support = torch.arange(v) < width
        p_support = ~q_support
    q = []
    for d in range(depth + 1):
        shape = (v,) * (d + 1)
        if q_mode == "narrow" and q_support is None:  # a random support of exactly `width` tokens per row
            scores = torch.rand(shape, generator=gen)
            keep = scores >= scores.topk(width, -1).values[..., -1:]
            q.append(torch.softmax(torch.randn(shape, generator=gen, dtype=F64).masked_fill(~keep, -math.inf), -1))
        elif q_mode == "sparse" and q_support is None:  # at least `width` nonzero entries per row
            x = torch.randn(shape, generator=gen, dtype=F64)
            keep = (torch.rand(shape, generator=gen) < 0.5) | (x >= x.topk(width, -1).values[..., -1:])
            q.append(torch.softmax(x.masked_fill(~keep, -math.inf), -1))
        else:
            q.append(_probs(gen, shape, "peaked" if q_mode == "peaked" else "dense", q_support))
    if p_mode == "equal_q":
        logits = tuple(_logits(t) for t in q)
    else:
        mode = "dense" if p_mode == "disjoint" else p_mode
        logits = tuple(_logits(_probs(gen, (v,) * (d + 1), mode, p_support)) for d in range(depth + 1))
    return VerifyCase(logits, parents, sampling, draft_probs=tuple(q), name=f"sto/{q_mode}/{p_mode}")


# ------------------------------------------------------------------------------------------ exact, positive


@EXACT
@given(case=det_cases())
def test_multiround_is_exactly_lossless(case: VerifyCase) -> None:
    assert_lossless_exact(MultiRoundVerifier(F64), [case])


@EXACT
@given(case=sto_cases())
def test_stochastic_multiround_is_exactly_lossless(case: VerifyCase) -> None:
    assert_lossless_exact(StochasticMultiRoundVerifier(F64), [case])


@EXACT
@given(case=sto_cases(), width=st.sampled_from([None, 1, 2]))
def test_the_closed_form_is_the_round_by_round_rule(case: VerifyCase, width: int | None) -> None:
    """The library's closed-form plan against the rule as written (one ``[N, V]`` state per round), both float64:
    the same law of where the walk stops and the same bonus row wherever it can stop (unreachable states may
    differ), for the real width and for bounds below it. The reference is itself proven lossless below."""
    for tokens, _ in case.enumerate_trees()[:8]:
        tree, logits = case.build_tree(tokens)
        fast = StochasticMultiRoundVerifier(F64, max_children=width).plan(tree, logits, case.sampling)
        slow = RoundByRoundStochasticVerifier(F64, max_children=width).plan(tree, logits, case.sampling)
        stop = stop_probabilities(tree, fast)
        torch.testing.assert_close(stop, stop_probabilities(tree, slow), rtol=0, atol=1e-12)
        reached = stop > 1e-12
        torch.testing.assert_close(fast.residual_rows()[reached], slow.residual_rows()[reached], rtol=0, atol=1e-10)


@settings(EXACT, max_examples=40)
@given(case=sto_cases())
def test_the_round_by_round_reference_is_exactly_lossless(case: VerifyCase) -> None:
    assert_lossless_exact(RoundByRoundStochasticVerifier(F64), [case])


@settings(EXACT, max_examples=40)
@given(case=sto_cases())
def test_stochastic_multiround_with_too_small_width_bound_stays_lossless(case: VerifyCase) -> None:
    """A ``max_children`` below the real width must drop the later siblings, never accept them blindly."""
    assert_lossless_exact(StochasticMultiRoundVerifier(F64, max_children=1), [case])


@settings(EXACT, max_examples=40)
@given(case=st.one_of(det_cases(kind="chain"), sto_cases(kind="chain")))
def test_chain_is_exactly_lossless(case: VerifyCase) -> None:
    assert_lossless_exact(ChainVerifier(F64), [case])


@settings(EXACT, max_examples=40)
@given(case=st.one_of(det_cases(kind="chain"), sto_cases(kind="chain")))
def test_block_is_exactly_lossless(case: VerifyCase) -> None:
    assert_lossless_exact(BlockVerifier(F64), [case])


@settings(EXACT, max_examples=40)
@given(case=st.one_of(det_cases(kind="chain"), sto_cases(kind="chain")))
def test_block_accepts_at_least_as_many_tokens_as_token_level(case: VerifyCase) -> None:
    """The paper's Theorem 2, exactly: E[accepted] of block >= token-level verification, same chains and p."""
    assert expected_accepted(BlockVerifier(F64), case) >= expected_accepted(ChainVerifier(F64), case) - 1e-12


@settings(EXACT, max_examples=60)
@given(case=st.one_of(sto_cases(), sto_cases(kind="random"), det_cases(kind="chain")))
def test_traversal_is_exactly_lossless(case: VerifyCase) -> None:
    assert_lossless_exact(TraversalVerifier(F64), [case])


def test_traversal_can_accept_fewer_tokens_than_multi_round_on_a_tree() -> None:
    """Why ``verifier_for`` keeps multi-round verification for sampled trees: on chains traversal verification
    is block verification and never worse, but on trees it is not a theorem, and here is a counterexample (found
    by search; traversal is better on average over these shapes, not on every tree)."""
    g = torch.Generator().manual_seed(16)
    logits = tuple(2 * torch.randn((3,) * (d + 1), generator=g, dtype=F64) for d in range(4))
    q = tuple(torch.softmax(2 * torch.randn((3,) * (d + 1), generator=g, dtype=F64), -1) for d in range(4))
    case = VerifyCase(logits, (-1, 0, 1, 1, 3), SamplingParams(temperature=1.0), draft_probs=q)
    assert_lossless_exact(TraversalVerifier(F64), [case])
    traversal = expected_accepted(TraversalVerifier(F64), case)
    multi_round = expected_accepted(StochasticMultiRoundVerifier(F64), case)
    assert traversal < multi_round - 0.03, (traversal, multi_round)


@settings(EXACT, max_examples=30)
@given(case=st.one_of(det_cases(kind="chain"), sto_cases(kind="chain")))
def test_traversal_of_a_chain_is_block_verification(case: VerifyCase) -> None:
    for tokens, _ in case.enumerate_trees()[:10]:
        tree, logits = case.build_tree(tokens)
        plans = [v.plan(tree, logits, case.sampling) for v in (TraversalVerifier(F64), BlockVerifier(F64))]
        stops = [stop_probabilities(tree, plan) for plan in plans]
        assert torch.allclose(stops[0], stops[1], atol=1e-12, rtol=0)
        reached = stops[0] > 0
        assert torch.allclose(plans[0].residual_rows()[reached], plans[1].residual_rows()[reached], atol=1e-12, rtol=0)


def test_traversal_refuses_deterministic_top_k_trees() -> None:
    logits = tuple(torch.zeros((3,) * (d + 1), dtype=F64) for d in range(2))
    case = VerifyCase(logits, (-1, 0, 0), SamplingParams(temperature=1.0), tokens=(0, 1, 2))
    tree, logits = case.build_tree(case.tokens)
    with pytest.raises(ValueError, match="tree.q_dist"):
        TraversalVerifier(F64).plan(tree, logits, case.sampling)


@settings(EXACT, max_examples=40)
@given(case=st.one_of(det_cases(), sto_cases()))
def test_a_plan_from_its_own_stop_law_drives_the_same_walk(case: VerifyCase) -> None:
    """``VerifyPlan.from_stop_probs`` inverts ``stop_probabilities`` on any tree."""
    verifier = StochasticMultiRoundVerifier(F64) if case.is_stochastic else MultiRoundVerifier(F64)
    for tokens, _ in case.enumerate_trees()[:10]:
        tree, logits = case.build_tree(tokens)
        plan = verifier.plan(tree, logits, case.sampling)
        stop = stop_probabilities(tree, plan)
        again = stop_probabilities(tree, VerifyPlan.from_stop_probs(tree, stop, plan.residual_rows()))
        assert torch.allclose(again, stop, atol=1e-12, rtol=0)


@settings(EXACT, max_examples=40)
@given(case=st.one_of(det_cases(temperature=0.0), sto_cases(temperature=0.0)))
def test_greedy_is_exactly_lossless(case: VerifyCase) -> None:
    assert_lossless_exact(GreedyVerifier(F64), [case])


@settings(EXACT, max_examples=40)
@given(case=st.one_of(det_cases(), sto_cases()))
def test_the_closed_form_stop_law_matches_the_enumerated_walk(case: VerifyCase) -> None:
    """``VerifyPlan.stop_probs`` (closed form, any tree size) equals the enumeration through the walk's own code."""
    if case.sampling.greedy:
        verifiers = [GreedyVerifier(F64)]
    elif case.is_stochastic:
        verifiers = [StochasticMultiRoundVerifier(F64), TraversalVerifier(F64)]
    else:
        verifiers = [MultiRoundVerifier(F64)]
    for tokens, _ in case.enumerate_trees()[:5]:
        tree, logits = case.build_tree(tokens)
        for verifier in verifiers:
            plan = verifier.plan(tree, logits, case.sampling)
            assert torch.allclose(plan.stop_probs(tree), stop_probabilities(tree, plan), atol=1e-12, rtol=0)


def _same_walk(tree, plan_a: VerifyPlan, plan_b: VerifyPlan) -> None:
    """Two plans drive the walk identically: same stop probabilities, same residual wherever the walk stops."""
    stop_a, stop_b = stop_probabilities(tree, plan_a), stop_probabilities(tree, plan_b)
    assert torch.equal(stop_a, stop_b)
    reached = stop_a > 0
    assert torch.equal(plan_a.residual_rows()[reached], plan_b.residual_rows()[reached])


@settings(EXACT, max_examples=40)
@given(case=st.one_of(det_cases(temperature=0.0), sto_cases(temperature=0.0)))
def test_every_verifier_reduces_to_greedy_at_temperature_zero(case: VerifyCase) -> None:
    """warp gives one-hot p at T=0, so the sampling verifiers must take exactly the greedy decisions."""
    chain = case.parents == tuple(range(-1, case.num_nodes - 1))
    for tokens, _ in case.enumerate_trees()[:20]:
        tree, logits = case.build_tree(tokens)
        greedy = GreedyVerifier(F64).plan(tree, logits, case.sampling)
        others = [StochasticMultiRoundVerifier(F64)] if case.is_stochastic else [MultiRoundVerifier(F64)]
        if chain:
            others += [ChainVerifier(F64), BlockVerifier(F64)]
        if chain or case.is_stochastic:
            others.append(TraversalVerifier(F64))
        for verifier in others:
            _same_walk(tree, greedy, verifier.plan(tree, logits, case.sampling))
            for seed in range(3):
                a = GreedyVerifier(F64).verify(tree, logits, case.sampling, torch.Generator().manual_seed(seed))
                b = verifier.verify(tree, logits, case.sampling, torch.Generator().manual_seed(seed))
                assert torch.equal(a.accepted, b.accepted) and torch.equal(a.bonus_token, b.bonus_token)


@settings(EXACT, max_examples=25)
@given(case=sto_cases(kind="random"))
def test_q_one_hot_rule_stays_lossless_on_sampled_candidates(case: VerifyCase) -> None:
    """A documented fact, not a recommendation: the deterministic-candidate rule is lossless for ANY candidate list
    drawn independently of the verifier's coins, so it cannot be a negative control (see IgnoresQVerifier)."""

    class DropQ(PlanVerifier):
        def plan(self, tree, target_logits, sampling):
            plain = dataclasses.replace(tree, q_dist=None, q_cond=None)
            return MultiRoundVerifier(self.dtype).plan(plain, target_logits, sampling)

    assert_lossless_exact(DropQ(F64), [case])


# ---------------------------------------------------------------------------------- the machinery itself


def test_target_distribution_is_the_chain_rule() -> None:
    """P(s) = prod_i warp(logits after s[:i])[s_i], checked entry by entry on a small case."""
    gen = torch.Generator().manual_seed(3)
    v, depth = 3, 2
    logits = tuple(torch.randn((v,) * (d + 1), generator=gen, dtype=F64) for d in range(depth + 1))
    sampling = SamplingParams(temperature=0.7, top_k=2)
    case = VerifyCase(logits, (-1, 0), sampling, tokens=(0, 1))
    from specdec.sampling import warp

    want = target_distribution(case)
    assert torch.allclose(want.sum(), torch.ones((), dtype=F64))
    for s in [(0, 1, 2), (2, 2, 0), (1, 0, 1)]:
        prob = 1.0
        for i in range(depth + 1):
            prob *= float(warp(logits[i][s[:i]], sampling, F64)[s[i]])
        assert float(want[s]) == pytest.approx(prob, abs=1e-15)


def test_sampled_candidate_enumeration_is_a_distribution() -> None:
    gen = torch.Generator().manual_seed(0)
    q = tuple(torch.softmax(torch.randn((4,) * (d + 1), generator=gen, dtype=F64), -1) for d in range(3))
    logits = tuple(torch.zeros((4,) * (d + 1), dtype=F64) for d in range(3))
    case = VerifyCase(logits, (-1, 0, 0, 1), SamplingParams(temperature=1.0), draft_probs=q)
    trees = case.enumerate_trees()
    assert len(trees) == 4 * 3 * 4  # ordered pairs at the root, one child under node 1
    assert all(t[1] != t[2] for t, _ in trees)  # without replacement
    assert math.fsum(w for _, w in trees) == pytest.approx(1.0, abs=1e-12)
    (t, w) = next((t, w) for t, w in trees if t[1:] == (2, 0, 3))
    assert w == pytest.approx(float(q[0][2] * q[0][0] / (1 - q[0][2]) * q[1][2, 3]), rel=1e-12)


class _AlwaysAccept(PlanVerifier):
    """Accepts every candidate: emits the draft path, ignores p."""

    def plan(self, tree, target_logits, sampling):
        from specdec.sampling import warp

        p = warp(target_logits, sampling, self.dtype)
        return VerifyPlan(torch.ones(tree.num_nodes, dtype=self.dtype), p)


class _AlwaysReject(PlanVerifier):
    """Rejects everything and samples the bonus from p at the root: vanilla decoding, trivially lossless."""

    def plan(self, tree, target_logits, sampling):
        from specdec.sampling import warp

        p = warp(target_logits, sampling, self.dtype)
        return VerifyPlan(torch.zeros(tree.num_nodes, dtype=self.dtype), p)


def _root_pair_case(sampling: SamplingParams, p_root: list[float], tokens=(0, 0, 1)) -> VerifyCase:
    """V=3, D=1, root with two candidate children; p after the root is p_root, deeper rows uniform-ish."""
    logits = (torch.log(torch.tensor(p_root, dtype=F64)), torch.tensor([[0.0, 1.0, 2.0]] * 3, dtype=F64))
    return VerifyCase(logits, (-1, 0, 0), sampling, tokens=tokens)


def test_vanilla_passes_and_always_accept_fails() -> None:
    case = _root_pair_case(SamplingParams(temperature=1.0), [0.5, 0.3, 0.2])
    assert_lossless_exact(_AlwaysReject(F64), [case])
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(_AlwaysAccept(F64), [case])


def test_exact_output_is_a_distribution_for_correct_verifiers() -> None:
    case = _root_pair_case(SamplingParams(temperature=1.0, top_k=2), [0.5, 0.3, 0.2])
    out = exact_output_distribution(MultiRoundVerifier(F64), case)
    assert out.shape == (3, 3) and float(out.min()) >= 0
    assert float(out.sum()) == pytest.approx(1.0, abs=1e-12)


def test_float32_verifier_is_close_but_not_float64_exact() -> None:
    """The production dtype is float32: within 1e-6 of lossless, which the default 1e-9 tolerance notices."""
    case = _root_pair_case(SamplingParams(temperature=0.9), [0.5, 0.3, 0.2])
    assert_lossless_exact(MultiRoundVerifier(), [case], atol=1e-6)


def test_the_exact_check_says_what_is_wrong_with_its_arguments() -> None:
    """A float32 verifier's rounding fails the default tolerance: the message says to build it in float64. A
    verifier without a plan and an empty case list are refused (an empty check passed whatever the verifier)."""

    def target_fn(prefix: tuple[int, ...]) -> torch.Tensor:  # a case whose float32 plan rounds by ~7e-9
        seed = 1 + sum(t * 3**i for i, t in enumerate(prefix)) + 100 * len(prefix)
        return 1.5 * torch.randn(3, generator=torch.Generator().manual_seed(seed), dtype=F64)

    rounding = VerifyCase.from_functions(target_fn, 3, (-1, 0, 0), SamplingParams(temperature=1.0), tokens=(0, 1, 2))
    with pytest.raises(AssertionError, match="build it with dtype=torch.float64"):
        assert_lossless_exact(MultiRoundVerifier(), rounding)
    assert_lossless_exact(MultiRoundVerifier(F64), rounding)
    case = _root_pair_case(SamplingParams(temperature=0.9), [0.5, 0.3, 0.2])
    with pytest.raises(AssertionError, match="not lossless") as err:
        assert_lossless_exact(_AlwaysAccept(F64), [case])
    assert "build it with" not in str(err.value)  # a float64 verifier's failure is its own
    with pytest.raises(ValueError, match="no cases"):
        assert_lossless_exact(MultiRoundVerifier(F64), [])
    with pytest.raises(TypeError, match="has no plan"):
        assert_lossless_exact(object(), [case])


# -------------------------------------------------------------------------------- exact, negative controls


def _sto_case(p_root: list[float], q_root: list[float], parents=(-1, 0), temperature: float = 1.0) -> VerifyCase:
    """V=3, D=1, sampled children under the root; deeper rows fixed."""
    logits = (torch.log(torch.tensor(p_root, dtype=F64)), torch.tensor([[0.0, 1.0, 2.0]] * 3, dtype=F64))
    q = (torch.tensor(q_root, dtype=F64), torch.full((3, 3), 1 / 3, dtype=F64))
    return VerifyCase(logits, parents, SamplingParams(temperature=temperature), draft_probs=q)


def test_greedy_bonus_disagreeing_with_its_residual_is_caught() -> None:
    """The exact suite models the bonus the walk emits (``plan.bonus`` when given), not only ``residual``."""
    case = _sto_case([0.1, 0.6, 0.3], [0.0, 1.0, 0.0], temperature=0.0)
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(GreedyBonusOffByOneVerifier(F64), [case])
    assert_lossless_exact(GreedyVerifier(F64), [case])


def test_residual_not_renormalised_is_caught() -> None:
    case = _root_pair_case(SamplingParams(temperature=1.0), [0.5, 0.3, 0.2], tokens=(0, 0, 1))
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(ResidualNotRenormalisedVerifier(F64), [case])
    # Harmless where there is no later sibling (a chain): the check pins the bug, not the verifier's name.
    chain = VerifyCase(case.target_logits, (-1, 0), case.sampling, tokens=(0, 1))
    assert_lossless_exact(ResidualNotRenormalisedVerifier(F64), [chain])


def test_only_zero_rejected_residual_is_caught() -> None:
    case = _sto_case([0.1, 0.6, 0.3], [0.6, 0.1, 0.3])
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(OnlyZeroRejectedResidualVerifier(F64), [case])
    # With a one-hot q, max(0, p - q) is p with the candidate zeroed: the bug is invisible.
    assert_lossless_exact(OnlyZeroRejectedResidualVerifier(F64), [_sto_case([0.1, 0.6, 0.3], [0.0, 1.0, 0.0])])


def test_ignores_q_is_caught() -> None:
    case = _sto_case([0.8, 0.15, 0.05], [0.8, 0.15, 0.05])  # p == q: the correct rule accepts always
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(IgnoresQVerifier(F64), [case])
    assert_lossless_exact(IgnoresQVerifier(F64), [_sto_case([0.1, 0.6, 0.3], [0.0, 1.0, 0.0])])


def test_stale_q_is_caught() -> None:
    case = _sto_case([0.1, 0.5, 0.4], [0.5, 0.3, 0.2], parents=(-1, 0, 0))
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(StaleQVerifier(F64), [case])
    assert_lossless_exact(StaleQVerifier(F64), [_sto_case([0.2, 0.3, 0.5], [0.6, 0.3, 0.1])])  # single child


def test_one_sided_warp_is_caught() -> None:
    for sampling in [SamplingParams(temperature=0.5), SamplingParams(temperature=1.0, top_k=2)]:
        case = _root_pair_case(sampling, [0.5, 0.3, 0.2], tokens=(0, 1, 2))
        with pytest.raises(AssertionError, match="not lossless"):
            assert_lossless_exact(OneSidedWarpVerifier(F64), [case])
    plain = _root_pair_case(SamplingParams(temperature=1.0), [0.5, 0.3, 0.2], tokens=(0, 1, 2))
    assert_lossless_exact(OneSidedWarpVerifier(F64), [plain])


def _sto_chain(seed: int) -> VerifyCase:
    """V=3, a sampled chain of depth 3 with random p and q."""
    g = torch.Generator().manual_seed(seed)
    logits = tuple(2 * torch.randn((3,) * (d + 1), generator=g, dtype=F64) for d in range(4))
    q = tuple(torch.softmax(2 * torch.randn((3,) * (d + 1), generator=g, dtype=F64), -1) for d in range(4))
    return VerifyCase(logits, (-1, 0, 1, 2), SamplingParams(temperature=1.0), draft_probs=q)


@pytest.mark.parametrize("broken", [BlockFirstFailureVerifier, BlockTokenResidualVerifier])
def test_block_verification_bugs_are_caught(broken) -> None:
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(broken(F64), [_sto_chain(seed) for seed in range(3)])
    # A single-step chain has no later position to scan and P_1 is never needed: both bugs are invisible there.
    one = _sto_chain(0)
    assert_lossless_exact(
        broken(F64), [VerifyCase(one.target_logits, (-1, 0), one.sampling, draft_probs=one.draft_probs)]
    )


def _sto_tree(seed: int, parents: tuple[int, ...]) -> VerifyCase:
    """V=3, a sampled tree with random p and q."""
    g = torch.Generator().manual_seed(seed)
    depths = [0] * len(parents)
    for c in range(1, len(parents)):
        depths[c] = depths[parents[c]] + 1
    depth = max(depths)
    logits = tuple(2 * torch.randn((3,) * (d + 1), generator=g, dtype=F64) for d in range(depth + 1))
    q = tuple(torch.softmax(2 * torch.randn((3,) * (d + 1), generator=g, dtype=F64), -1) for d in range(depth + 1))
    return VerifyCase(logits, parents, SamplingParams(temperature=1.0), draft_probs=q)


@pytest.mark.parametrize("broken", [TraversalStaleQVerifier, TraversalStaleWeightVerifier])
def test_traversal_verification_bugs_are_caught(broken) -> None:
    """Both bugs break losslessness on a tree with siblings under a non-root node; the stale q is invisible on a
    chain (one child per node) and the stale weight at the root (P = 1 there): each control fails where it should."""
    tree = (-1, 0, 0, 1, 1)  # depth 2; the first child has two children of its own
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(broken(F64), [_sto_tree(seed, tree) for seed in range(3)])
    invisible = (-1, 0, 1) if broken is TraversalStaleQVerifier else (-1, 0, 0)
    assert_lossless_exact(broken(F64), [_sto_tree(seed, invisible) for seed in range(3)])


def test_a_walk_bug_is_caught_exactly(monkeypatch) -> None:
    """The exact suite runs the walk's own :func:`end_nodes`; an off-by-one in its level loop (the walk never reaches
    the deepest level) makes every verifier lossy, and the exact check says so with no sampling noise."""
    import specdec.testing.exact as exact_module

    real = exact_module.end_nodes

    def one_level_short(tree, accepted):
        return real(dataclasses.replace(tree, max_depth=tree.max_depth - 1), accepted)

    case = _sto_tree(0, (-1, 0, 0, 1, 1))
    assert_lossless_exact(StochasticMultiRoundVerifier(F64), [case])
    monkeypatch.setattr(exact_module, "end_nodes", one_level_short)
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_exact(StochasticMultiRoundVerifier(F64), [case])


def test_verify_case_validates_its_input() -> None:
    logits = (torch.zeros(3, dtype=F64), torch.zeros(3, 3, dtype=F64))
    q = (torch.tensor([0.5, 0.5, 0.0], dtype=F64), torch.full((3, 3), 1 / 3, dtype=F64))
    s = SamplingParams(temperature=1.0)
    with pytest.raises(ValueError, match="depth"):
        VerifyCase(logits, (-1, 0, 1), s, tokens=(0, 1, 2))
    with pytest.raises(ValueError, match="exactly one"):
        VerifyCase(logits, (-1, 0), s)
    with pytest.raises(ValueError, match="tokens"):
        VerifyCase(logits, (-1, 0), s, tokens=(0, 3))
    with pytest.raises(ValueError, match="parents"):
        VerifyCase(logits, (-1, 1), s, tokens=(0, 1))
    with pytest.raises(ValueError, match="fewer than 3"):
        VerifyCase(logits, (-1, 0, 0, 0), s, draft_probs=q)  # 3 draws without replacement from 2 tokens
    with pytest.raises(ValueError, match="all -inf"):
        VerifyCase((torch.full((3,), -math.inf, dtype=F64), logits[1]), (-1, 0), s, tokens=(0, 1))


def test_from_functions_tabulates_every_prefix() -> None:
    def target(prefix: tuple[int, ...]) -> torch.Tensor:
        return torch.tensor([float(sum(prefix)), 1.0, -float(len(prefix))])

    case = VerifyCase.from_functions(target, 3, (-1, 0, 1), SamplingParams(temperature=1.0), tokens=(0, 2, 1))
    assert case.depth == 2 and case.vocab_size == 3
    assert torch.equal(case.target_row((2, 1)), torch.tensor([3.0, 1.0, -2.0], dtype=F64))
    tree, rows = case.build_tree(case.tokens)
    assert torch.equal(rows[2], target((2, 1)).to(F64))  # node 2's prefix is (2, 1)
    assert_lossless_exact(MultiRoundVerifier(F64), [case])

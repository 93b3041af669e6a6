"""Unit tests of the verifiers and the shared walk on forced cases (stub logits, tiny trees)."""

from __future__ import annotations

import math

import pytest
import torch

from specdec.interfaces import IncompatibleVerifierError, TreeKind, Verdict
from specdec.sampling import SamplingParams, greedy_tokens, sample, sample_distinct, warp
from specdec.testing import assert_same_distribution, stop_probabilities
from specdec.tree import DraftTree
from specdec.verify import (
    BlockVerifier,
    ChainVerifier,
    GreedyVerifier,
    MultiRoundVerifier,
    StochasticMultiRoundVerifier,
    TraversalVerifier,
    VerifyPlan,
    check_verifier,
    verifier_for,
    walk,
)

F64 = torch.float64
T1 = SamplingParams(temperature=1.0)
GREEDY = SamplingParams(temperature=0.0)


def _tree(parents: list[int], tokens: list[int], q: torch.Tensor | None = None) -> DraftTree:
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return DraftTree.from_parents(torch.tensor(tokens), torch.tensor(parents), max(depth), q_dist=q)


def _logits_from_probs(p: torch.Tensor) -> torch.Tensor:
    return torch.log(p.to(F64))


def _check_verdict(tree: DraftTree, verdict: Verdict) -> int:
    """Fixed shapes and a valid root path; returns the final node."""
    assert verdict.accepted.shape == (tree.max_depth + 1,) and verdict.accepted.dtype == torch.long
    assert verdict.accept_length.shape == () and verdict.accept_length.dtype == torch.long
    assert verdict.bonus_token.shape == () and verdict.bonus_token.dtype == torch.long
    length = int(verdict.accept_length)
    path = verdict.accepted.tolist()
    assert path[0] == 0
    assert all(x == -1 for x in path[length + 1 :])
    for a, b in zip(path[:length], path[1 : length + 1], strict=True):
        assert int(tree.parents[b]) == a
    return path[length]


# A 3-level tree: root -> {1, 2}, 1 -> {3, 4}, 2 -> {5}, 3 -> {6}
PARENTS = [-1, 0, 0, 1, 1, 2, 3]
TOKENS = [0, 1, 2, 0, 3, 1, 2]
V = 4


def test_verdicts_have_fixed_shapes_and_valid_paths() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(len(PARENTS), V, generator=gen)
    q = torch.softmax(torch.randn(len(PARENTS), V, generator=gen), -1)
    det, sto = _tree(PARENTS, TOKENS), _tree(PARENTS, TOKENS, q)
    chain = _tree([-1, 0, 1, 2], [0, 1, 2, 3])
    cases = [
        (MultiRoundVerifier(), det, T1),
        (StochasticMultiRoundVerifier(), sto, T1),
        (StochasticMultiRoundVerifier(max_children=2), sto, T1),
        (ChainVerifier(), chain, T1),
        (GreedyVerifier(), det, GREEDY),
    ]
    lengths = set()
    for verifier, tree, sampling in cases:
        for seed in range(20):
            rows = logits[: tree.num_nodes]
            verdict = verifier.verify(tree, rows, sampling, torch.Generator().manual_seed(seed))
            final = _check_verdict(tree, verdict)
            lengths.add(int(verdict.accept_length))
            assert 0 <= int(verdict.bonus_token) < V
            assert float(warp(rows[final], sampling)[verdict.bonus_token]) > 0
    assert lengths == {0, 1, 2, 3}  # the random logits exercise every path length


def test_sample_draws_the_clamped_normalised_row() -> None:
    """``sample`` follows ``max(p, 0) / sum``: G-test at level 1e-3 (the false-positive rate), fixed seed; zero,
    negative and trailing-zero entries are never drawn. Negative control: the same draws fail against a row with
    0.03 of mass moved, and draws from that row fail against the original."""
    probs = torch.tensor([0.3, 0.0, 0.25, 1e-3, -0.2, 0.249, 0.2, 0.0, 0.0])  # sums to 1 after the clamp
    exact = probs.clamp(min=0) / probs.clamp(min=0).sum()
    draws = sample(probs.expand(40000, -1), torch.Generator().manual_seed(0))
    assert draws.shape == (40000,) and draws.dtype == torch.long
    assert not bool(torch.isin(draws, torch.tensor([1, 4, 7, 8])).any())
    assert_same_distribution(draws, exact, alpha=1e-3)
    moved = exact.clone()
    moved[0] -= 0.03
    moved[6] += 0.03
    with pytest.raises(AssertionError, match="G-test"):
        assert_same_distribution(draws, moved, alpha=1e-3)
    with pytest.raises(AssertionError, match="G-test"):
        assert_same_distribution(sample(moved.expand(40000, -1), torch.Generator().manual_seed(1)), exact, alpha=1e-3)
    assert int(sample(torch.tensor([0.0, 0.0, 1.0, 0.0]), torch.Generator().manual_seed(2))) == 2  # 0-dim for [V]


def _ordered_triples(q: torch.Tensor) -> torch.Tensor:
    """``[V, V, V]``: the law of three draws without replacement from ``q`` (zero where an index repeats)."""
    v = q.shape[0]
    law = torch.zeros(v, v, v, dtype=torch.float64)
    for a in range(v):
        for b in range(v):
            for c in range(v):
                if len({a, b, c}) == 3:
                    law[a, b, c] = q[a] * q[b] / (1 - q[a]) * q[c] / (1 - q[a] - q[b])
    return law


def test_sample_distinct_draws_without_replacement_in_order() -> None:
    """The ordered triple of ``sample_distinct`` follows sequential draws without replacement from the clamped row:
    G-test at level 1e-3 (the false-positive rate) over all ordered triples, fixed seed; zero and negative entries are
    never drawn. Negative controls: the same draws fail against a wrong reweighting (each next index drawn in
    proportion to ``q^2``, still without replacement), and draws with replacement fail (they repeat indices, which
    the exact law gives probability 0)."""
    row = torch.tensor([0.34, 0.0, 0.22, 0.16, -0.3, 0.13, 0.09, 0.06])  # sums to 1 after the clamp
    q = row.clamp(min=0).double()
    draws = sample_distinct(row.expand(30000, -1), 3, torch.Generator().manual_seed(0))
    assert draws.shape == (30000, 3) and draws.dtype == torch.long
    assert not bool(torch.isin(draws, torch.tensor([1, 4])).any())
    v = row.shape[0]
    flat = (draws[:, 0] * v + draws[:, 1]) * v + draws[:, 2]
    assert_same_distribution(flat, _ordered_triples(q), alpha=1e-3)
    squared = q**2 / (q**2).sum()
    with pytest.raises(AssertionError, match="G-test"):
        assert_same_distribution(flat, _ordered_triples(squared), alpha=1e-3)
    with_replacement = sample(row.expand(30000, 3, -1), torch.Generator().manual_seed(1))
    repeats = (with_replacement[:, 0] * v + with_replacement[:, 1]) * v + with_replacement[:, 2]
    with pytest.raises(AssertionError, match="G-test"):
        assert_same_distribution(repeats, _ordered_triples(q), alpha=1e-3)
    assert sample_distinct(row[None], 0).shape == (1, 0)


def _two_draws_on_one_cdf(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Negative control: two draws without replacement on the row's first CDF, the second stepping over the first's
    interval (exact in real arithmetic; in float64 it loses the rest of a row next to a dominant entry)."""
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1:]
    first = torch.searchsorted(cdf, torch.rand(total.shape, dtype=torch.float64, generator=generator) * total)
    begin = torch.where(first > 0, cdf.gather(-1, (first - 1).clamp(min=0)), 0.0)
    mass = cdf.gather(-1, first) - begin
    u = torch.rand(total.shape, dtype=torch.float64, generator=generator) * (total - mass)
    second = torch.searchsorted(cdf, torch.where(u >= begin, u + mass, u), right=True).clamp(max=cdf.shape[-1] - 1)
    return torch.cat([first, second], -1)


@pytest.mark.parametrize("top", [0, 8000])
def test_sample_distinct_next_to_a_dominant_entry(top: int) -> None:
    """One entry holds all but ~1e-13 of the mass (a logit gap of 40 over 16,000 entries): it is drawn first, and
    the next draws follow the rest of the row, whose entries are equal. G-test at level 1e-3 on which side of the
    dominant entry the second draw lands (the false-positive rate), no repeats. Negative control: a second draw on
    the first CDF lands on one side only, or on a handful of entries."""
    v = 16000
    logits = torch.zeros(v)
    logits[top] = 40.0
    probs = torch.softmax(logits, -1).expand(4000, -1)
    below = torch.tensor([top / (v - 1), 1 - top / (v - 1)])
    draws = sample_distinct(probs, 3, torch.Generator().manual_seed(0))
    assert bool((draws[:, 0] == top).all()) and bool((draws[:, 1] != draws[:, 2]).all())
    if top:
        assert_same_distribution((draws[:, 1] > top).long(), below, alpha=1e-3)
    else:
        assert draws[:, 1].unique().numel() > 3000  # spread over the 15,999 others, not stuck on one
    control = _two_draws_on_one_cdf(probs, torch.Generator().manual_seed(0))
    if top:
        with pytest.raises(AssertionError, match="G-test"):
            assert_same_distribution((control[:, 1] > top).long(), below, alpha=1e-3)
    else:
        assert control[:, 1].unique().numel() < 10


def test_root_only_tree_samples_the_bonus_from_p() -> None:
    tree = DraftTree.single(torch.tensor(2))
    logits = torch.tensor([[0.0, -math.inf, 1.0]])
    for verifier in [MultiRoundVerifier(), ChainVerifier()]:
        verdict = verifier.verify(tree, logits, T1, torch.Generator().manual_seed(0))
        assert verdict.accepted.tolist() == [0] and int(verdict.accept_length) == 0
        assert int(verdict.bonus_token) in (0, 2)


def test_p_equal_q_accepts_every_sampled_candidate() -> None:
    """min(1, p/q) = 1 for the first child at every node, so the walk follows first children to a leaf."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(len(PARENTS), V, generator=gen, dtype=F64)
    q = torch.softmax(logits, -1)  # q == p at every node
    tree = _tree(PARENTS, TOKENS, q)
    plan = StochasticMultiRoundVerifier(F64).plan(tree, logits, T1)
    first_children = [1, 3, 5, 6]
    assert torch.allclose(plan.accept_prob[first_children], torch.ones(4, dtype=F64))
    for seed in range(30):
        verdict = StochasticMultiRoundVerifier().verify(tree, logits, T1, torch.Generator().manual_seed(seed))
        assert verdict.accepted.tolist() == [0, 1, 3, 6]
    chain = _tree([-1, 0, 1], [0, 2, 1], q[:3])
    for seed in range(10):
        verdict = ChainVerifier().verify(chain, logits[:3], T1, torch.Generator().manual_seed(seed))
        assert int(verdict.accept_length) == 2


def test_p_one_hot_at_the_candidates_accepts_every_deterministic_candidate() -> None:
    p = torch.full((len(PARENTS), V), 1e-30, dtype=F64)
    for c in [1, 3, 5, 6]:  # target agrees with the first child everywhere
        p[PARENTS[c], TOKENS[c]] = 1.0
    tree = _tree(PARENTS, TOKENS)
    logits = _logits_from_probs(p)
    for seed in range(10):
        verdict = MultiRoundVerifier().verify(tree, logits, T1, torch.Generator().manual_seed(seed))
        assert verdict.accepted.tolist() == [0, 1, 3, 6]


def test_disjoint_supports_never_accept() -> None:
    """p is zero on every candidate: nothing is accepted and the bonus comes from p's support."""
    gen = torch.Generator().manual_seed(2)
    p = torch.zeros(len(PARENTS), V, dtype=F64)
    p[:, 3] = 0.3
    p[:, 2] = 0.7
    tokens = [0, 0, 1, 0, 1, 0, 1]  # only tokens 0 and 1 are proposed
    q = torch.zeros(len(PARENTS), V, dtype=F64)
    q[:, :2] = torch.softmax(torch.randn(len(PARENTS), 2, generator=gen, dtype=F64), -1)
    logits = _logits_from_probs(p)
    for verifier, tree in [
        (MultiRoundVerifier(), _tree(PARENTS, tokens)),
        (StochasticMultiRoundVerifier(), _tree(PARENTS, [0, 0, 1, 0, 1, 0, 1], q)),
    ]:
        assert torch.equal(verifier.plan(tree, logits, T1).accept_prob[1:], torch.zeros(len(PARENTS) - 1))
        bonuses = set()
        for seed in range(30):
            verdict = verifier.verify(tree, logits, T1, torch.Generator().manual_seed(seed))
            assert int(verdict.accept_length) == 0 and verdict.accepted.tolist() == [0, -1, -1, -1]
            bonuses.add(int(verdict.bonus_token))
        assert bonuses == {2, 3}


def test_multiround_plan_values() -> None:
    """Root children tokens (0, 0, 1): the duplicate gets 0, token 1 gets p(1) / (1 - p(0))."""
    p_root = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    tree = _tree([-1, 0, 0, 0], [0, 0, 0, 1])
    logits = _logits_from_probs(p_root).expand(4, 3)
    plan = MultiRoundVerifier(F64).plan(tree, logits, T1)
    assert torch.allclose(plan.accept_prob, torch.tensor([1.0, 0.5, 0.0, 0.6], dtype=F64))
    rows = plan.residual_rows()
    assert torch.allclose(rows[0], torch.tensor([0.0, 0.0, 1.0], dtype=F64))
    assert torch.allclose(rows[1], p_root)  # leaves: p itself


def test_multiround_mass_left_does_not_cancel() -> None:
    """Earlier siblings holding nearly all of p: the later sibling's accept probability keeps full precision.

    p = (1 - 3e-10, 1e-10, 2e-10), children tokens (0, 1): token 1 is tried with probability 3e-10 and accepted with
    1e-10 / 3e-10 = 1/3. Computing the mass left as ``1 - p(0)`` would lose ~7 digits to cancellation (a precision
    pin for the sparse plan: the dense form summed the masked row, which was exact too).
    """
    p_root = torch.tensor([1 - 3e-10, 1e-10, 2e-10], dtype=F64)
    tree = _tree([-1, 0, 0], [0, 0, 1])
    plan = MultiRoundVerifier(F64).plan(tree, _logits_from_probs(p_root).expand(3, 3), T1)
    assert abs(float(plan.accept_prob[2]) - 1 / 3) < 1e-12
    assert torch.allclose(plan.residual_rows()[0], torch.tensor([0.0, 0.0, 1.0], dtype=F64), atol=0, rtol=1e-12)


def test_walk_with_lazy_rows_equals_walk_with_dense_rows() -> None:
    """The multi-round plan builds the one residual row the walk samples from; same coins, same verdict as the
    plan with every row built (``residual_rows``)."""
    gen = torch.Generator().manual_seed(8)
    tree = _tree(PARENTS, TOKENS)
    logits = torch.randn(len(PARENTS), V, generator=gen)
    plan = MultiRoundVerifier().plan(tree, logits, T1)
    assert plan.residual is None and plan.residual_at is not None
    dense = VerifyPlan(plan.accept_prob, plan.residual_rows())
    for seed in range(20):
        a = walk(tree, plan, torch.Generator().manual_seed(seed))
        b = walk(tree, dense, torch.Generator().manual_seed(seed))
        assert torch.equal(a.accepted, b.accepted) and int(a.bonus_token) == int(b.bonus_token)


def test_stochastic_plan_values() -> None:
    """Two sampled children at the root, V=3, hand-computed rounds."""
    p = torch.tensor([0.1, 0.5, 0.4], dtype=F64)
    q = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    tree = _tree([-1, 0, 0], [0, 0, 1], q.expand(3, 3))
    plan = StochasticMultiRoundVerifier(F64).plan(tree, _logits_from_probs(p).expand(3, 3), T1)
    # round 1: x=0, min(1, .1/.5) = .2; p1 = norm(max(0, p - q)) = (0, .5, .5); q1 = (0, .6, .4)
    # round 2: x=1, min(1, .5/.6); p2 = norm(max(0, p1 - q1)) = (0, 0, 1)
    assert torch.allclose(plan.accept_prob, torch.tensor([1.0, 0.2, 0.5 / 0.6], dtype=F64))
    assert torch.allclose(plan.residual_rows()[0], torch.tensor([0.0, 0.0, 1.0], dtype=F64))
    assert torch.allclose(plan.residual_rows()[1], p)


def test_max_children_bound_gives_the_same_plan() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(len(PARENTS), V, generator=gen, dtype=F64)
    q = torch.softmax(torch.randn(len(PARENTS), V, generator=gen, dtype=F64), -1)
    tree = _tree(PARENTS, TOKENS, q)
    full = StochasticMultiRoundVerifier(F64).plan(tree, logits, T1)
    bounded = StochasticMultiRoundVerifier(F64, max_children=2).plan(tree, logits, T1)
    assert torch.equal(full.accept_prob, bounded.accept_prob)
    assert torch.equal(full.residual_rows(), bounded.residual_rows())


def test_float32_plan_matches_float64() -> None:
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(len(PARENTS), V, generator=gen)
    q = torch.softmax(torch.randn(len(PARENTS), V, generator=gen), -1)
    for verifier_cls, tree in [
        (MultiRoundVerifier, _tree(PARENTS, TOKENS)),
        (StochasticMultiRoundVerifier, _tree(PARENTS, TOKENS, q)),
    ]:
        a = verifier_cls().plan(tree, logits, T1)
        b = verifier_cls(F64).plan(tree, logits, T1)
        assert a.accept_prob.dtype == torch.float32 and b.accept_prob.dtype == F64
        assert torch.allclose(a.accept_prob.double(), b.accept_prob, atol=1e-6)
        assert torch.allclose(a.residual_rows().double(), b.residual_rows(), atol=1e-6)


# ----------------------------------------------------------------------------------------------- errors


def test_wrong_tree_kind_and_temperature_raise() -> None:
    logits = torch.randn(len(PARENTS), V)
    q = torch.softmax(torch.randn(len(PARENTS), V), -1)
    det, sto = _tree(PARENTS, TOKENS), _tree(PARENTS, TOKENS, q)
    with pytest.raises(ValueError, match="deterministic candidates"):
        MultiRoundVerifier().verify(sto, logits, T1, None)
    with pytest.raises(ValueError, match="q_dist"):
        StochasticMultiRoundVerifier().verify(det, logits, T1, None)
    with pytest.raises(ValueError, match="temperature 0"):
        GreedyVerifier().verify(det, logits, T1, None)
    with pytest.raises(ValueError, match="chain"):
        ChainVerifier().verify(det, logits, T1, None)
    # A chain whose nodes are not numbered 0..N-1 along it is not a chain either (node 1 has two children).
    with pytest.raises(ValueError, match="chain"):
        ChainVerifier().verify(_tree([-1, 0, 1, 1], [0, 1, 2, 3]), logits[:4], T1, None)


def test_verifier_for_follows_the_tree_kind_and_temperature() -> None:
    greedy, warm, hot = SamplingParams(), SamplingParams(temperature=0.7), SamplingParams(temperature=1.0)
    assert type(verifier_for(TreeKind(), greedy)) is GreedyVerifier
    assert type(verifier_for(TreeKind(sampled=True), greedy)) is GreedyVerifier
    assert type(verifier_for(TreeKind(), warm)) is MultiRoundVerifier
    assert type(verifier_for(TreeKind(sampled=True), hot)) is StochasticMultiRoundVerifier
    assert verifier_for(TreeKind(sampled=True, max_children=3), hot).max_children == 3
    assert type(verifier_for(TreeKind(sampled=True, chain=True), hot)) is BlockVerifier
    assert type(verifier_for(TreeKind(chain=True), warm)) is BlockVerifier
    assert type(verifier_for(TreeKind(chain=True), greedy)) is GreedyVerifier


def test_each_verifier_says_which_calls_it_refuses() -> None:
    """The refusals the generator checks before the first token, with a control per verifier (a kind it serves)."""
    greedy, hot = SamplingParams(), SamplingParams(temperature=1.0)
    tree, chain, sampled = TreeKind(), TreeKind(chain=True), TreeKind(sampled=True)
    cases = [  # (verifier, kind, sampling, refused?)
        (GreedyVerifier(), tree, hot, True),
        (GreedyVerifier(), sampled, greedy, False),
        (ChainVerifier(), tree, hot, True),
        (BlockVerifier(), chain, hot, False),
        (MultiRoundVerifier(), sampled, hot, True),
        (MultiRoundVerifier(), tree, hot, False),
        (StochasticMultiRoundVerifier(), tree, greedy, True),
        (StochasticMultiRoundVerifier(), sampled, hot, False),
        (TraversalVerifier(), tree, hot, True),
        (TraversalVerifier(), chain, hot, False),
    ]
    for verifier, kind, sampling, refused in cases:
        assert (verifier.refuses(kind, sampling) is not None) == refused, (verifier, kind, sampling)
    with pytest.raises(IncompatibleVerifierError, match="pin StochasticMultiRoundVerifier"):
        check_verifier(MultiRoundVerifier(), sampled, hot)


# ----------------------------------------------------------------------------------------------- greedy


def _reference_greedy(parents: list[int], tokens: list[int], logits: torch.Tensor) -> tuple[list[int], int]:
    """Longest root path whose every token is the target argmax after its parent; bonus = argmax at its end."""
    best = [0]
    n = len(parents)
    for leaf in range(n):
        path = [leaf]
        while path[-1] != 0:
            path.append(parents[path[-1]])
        path = path[::-1]
        matched = [0]
        for node in path[1:]:
            if tokens[node] != int(logits[matched[-1]].argmax()):
                break
            matched.append(node)
        if len(matched) > len(best):
            best = matched
    return best, int(logits[best[-1]].argmax())


def test_greedy_takes_the_longest_matching_path() -> None:
    gen = torch.Generator().manual_seed(5)
    seen_lengths = set()
    for trial in range(60):
        v = 3 + trial % 3
        n = 2 + trial % 7
        # at most 3 children per node (<= v), so sibling tokens can be distinct
        parents = [-1] + [int(torch.randint(max(0, i - 3), i, (), generator=gen)) for i in range(1, n)]
        logits = torch.randint(0, 3, (n, v), generator=gen).float()  # many ties: first index wins
        tokens = [0] * n
        for u in range(n):  # distinct sibling tokens, biased toward the argmax so paths match
            kids = [c for c in range(n) if parents[c] == u]
            order = torch.argsort(logits[u], descending=True, stable=True).tolist()
            shift = int(torch.randint(2, (), generator=gen))
            for r, c in enumerate(kids):
                tokens[c] = order[(r + shift) % v]
        tree = _tree(parents, tokens)
        want_path, want_bonus = _reference_greedy(parents, tokens, logits)
        verdict = GreedyVerifier().verify(tree, logits, GREEDY, None)
        length = int(verdict.accept_length)
        assert verdict.accepted[: length + 1].tolist() == want_path
        assert int(verdict.bonus_token) == want_bonus
        seen_lengths.add(length)
    assert len(seen_lengths) >= 3


def test_plan_without_residual_needs_point_mass_bonus_and_vocab() -> None:
    """A plan must name the bonus law: ``[N, V]`` rows, or point masses with the vocabulary size."""
    accept = torch.ones(3)
    with pytest.raises(ValueError, match="residual"):
        VerifyPlan(accept_prob=accept)
    with pytest.raises(ValueError, match="vocab_size"):
        VerifyPlan(accept_prob=accept, bonus=torch.tensor([0, 2, 1]))
    plan = VerifyPlan(accept_prob=accept, bonus=torch.tensor([0, 2, 1]), vocab_size=4)
    assert plan.vocab == 4
    assert torch.equal(plan.residual_rows(), torch.eye(4)[[0, 2, 1]])


def test_warp_at_temperature_zero_is_the_one_hot_of_greedy_tokens() -> None:
    """warp's T=0 rows (scatter) equal one_hot(argmax), ties to the first index, in float32 and float64."""
    logits = torch.randint(0, 3, (5, 7), generator=torch.Generator().manual_seed(2)).float()  # many ties
    for dtype in (torch.float32, torch.float64):
        p = warp(logits, GREEDY, dtype)
        assert p.dtype == dtype
        assert torch.equal(p, torch.nn.functional.one_hot(logits.argmax(-1), 7).to(dtype))
        assert torch.equal(greedy_tokens(logits, dtype), logits.argmax(-1))


def test_greedy_plan_bonus_is_the_point_mass_of_its_residual() -> None:
    """The contract the walk relies on to read the bonus instead of drawing it; the walk draws only the coins."""
    gen = torch.Generator().manual_seed(11)
    tree = _tree(PARENTS, TOKENS)
    logits = torch.randint(0, 3, (len(PARENTS), V), generator=gen).float()  # ties: first index, as warp's argmax
    plan = GreedyVerifier().plan(tree, logits, GREEDY)
    assert plan.bonus is not None and plan.residual is None  # no [N, V] rows built
    rows = plan.residual_rows()
    assert torch.equal(rows, warp(logits, GREEDY))  # the one-hots of the bonus are p itself
    assert torch.equal(plan.bonus, logits.argmax(-1))
    coins = torch.Generator().manual_seed(3)
    verdict = walk(tree, plan, coins)
    after_coins = torch.Generator().manual_seed(3)
    torch.rand(len(PARENTS), generator=after_coins)
    assert torch.equal(coins.get_state(), after_coins.get_state())
    assert int(verdict.bonus_token) == int(plan.bonus[verdict.accepted[verdict.accept_length]])


# ------------------------------------------------------------------------------------------------- walk


def test_walk_follows_forced_plans() -> None:
    tree = _tree(PARENTS, TOKENS)
    residual = torch.nn.functional.one_hot(torch.arange(len(PARENTS)) % V, V).float()
    cases = {
        (1, 1, 1, 1, 1, 1, 1): [0, 1, 3, 6],  # first child everywhere
        (1, 0, 1, 1, 1, 1, 1): [0, 2, 5, -1],  # first root child rejected
        (1, 1, 1, 0, 1, 1, 1): [0, 1, 4, -1],
        (1, 1, 1, 0, 0, 1, 1): [0, 1, -1, -1],
        (1, 0, 0, 1, 1, 1, 1): [0, -1, -1, -1],
    }
    for accept, path in cases.items():
        plan = VerifyPlan(torch.tensor(accept, dtype=torch.float32), residual)
        verdict = walk(tree, plan, torch.Generator().manual_seed(0))
        assert verdict.accepted.tolist() == path
        final = [x for x in path if x >= 0][-1]
        assert int(verdict.accept_length) == len([x for x in path if x >= 0]) - 1
        assert int(verdict.bonus_token) == final % V


def test_walk_matches_exact_stop_and_bonus_distribution() -> None:
    """The joint law of (final node, bonus) over many coins is the exact stop_probabilities x residual."""
    gen = torch.Generator().manual_seed(6)
    n = len(PARENTS)
    plan = VerifyPlan(
        accept_prob=torch.tensor([1.0, 0.3, 0.6, 0.5, 0.8, 0.4, 0.7], dtype=F64),
        residual=torch.softmax(torch.randn(n, V, generator=gen, dtype=F64), -1),
    )
    tree = _tree(PARENTS, TOKENS)
    exact = stop_probabilities(tree, plan)[:, None] * plan.residual  # [N, V]
    assert float(exact.sum()) == pytest.approx(1.0, abs=1e-12)
    coins = torch.Generator().manual_seed(7)
    outcomes = []
    for _ in range(3000):
        verdict = walk(tree, plan, coins)
        final = int(verdict.accepted[verdict.accept_length])
        outcomes.append(final * V + int(verdict.bonus_token))
    assert_same_distribution(torch.tensor(outcomes), exact.flatten(), alpha=1e-3)
    # The same samples are rejected against a moderately different plan (node 1 accepted w.p. 0.4, not 0.3).
    shifted = VerifyPlan(plan.accept_prob.clone(), plan.residual)
    shifted.accept_prob[1] = 0.4
    wrong = stop_probabilities(tree, shifted)[:, None] * plan.residual
    with pytest.raises(AssertionError):
        assert_same_distribution(torch.tensor(outcomes), wrong.flatten(), alpha=1e-3)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_verify_does_not_sync_on_cuda() -> None:
    """With sync debug mode set to error, any host sync inside plan + walk raises."""
    dev = torch.device("cuda")
    logits = torch.randn(len(PARENTS), V, device=dev)
    q = torch.softmax(torch.randn(len(PARENTS), V, device=dev), -1)
    det = DraftTree.from_parents(torch.tensor(TOKENS, device=dev), torch.tensor(PARENTS, device=dev), 3)
    sto = DraftTree.from_parents(torch.tensor(TOKENS, device=dev), torch.tensor(PARENTS, device=dev), 3, q_dist=q)
    chain = DraftTree.from_parents(torch.tensor([0, 1, 2], device=dev), torch.tensor([-1, 0, 1], device=dev), 2)
    gen = torch.Generator(device=dev).manual_seed(0)
    runs = [
        (MultiRoundVerifier(), det, T1),
        (StochasticMultiRoundVerifier(max_children=2), sto, T1),
        (GreedyVerifier(), det, GREEDY),
        (ChainVerifier(check_chain=False), chain, T1),
    ]
    for verifier, tree, sampling in runs:
        rows = logits[: tree.num_nodes]
        verifier.verify(tree, rows, sampling, gen)  # warm-up (lazy init may sync)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            verifier.verify(tree, rows, sampling, gen)
        finally:
            torch.cuda.set_sync_debug_mode(0)

"""Tree policies against fake drafters whose logits are a fixed function of the node's root path."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from specdec.interfaces import Drafter, TargetHidden
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree, PartialTree
from specdec.trees import EAGLE1_DEFAULT_PATHS, DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy

GREEDY = SamplingParams()


class FakeDrafter(Drafter):
    """Logits of a node = ``fn(path)``, ``path`` = tokens from the root to the node (root included)."""

    def __init__(self, vocab_size: int, fn: Callable[[tuple[int, ...]], torch.Tensor]) -> None:
        self.vocab_size = vocab_size
        self.fn = fn
        self.calls: list[list[int]] = []

    def reset(self) -> None:
        self.calls.clear()

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        pass

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        pass

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        self.calls.append(frontier.tolist())
        rows = []
        for node in frontier.tolist():
            on_path = tree.ancestor_mask(torch.tensor([node]))[0]
            rows.append(self.fn(tuple(tree.tokens[: tree.size][on_path].tolist())))
        return torch.stack(rows)


def random_logits(vocab: int, salt: int = 0) -> Callable[[tuple[int, ...]], torch.Tensor]:
    """Distinct pseudo-random logits per path (no ties in practice)."""

    def fn(path: tuple[int, ...]) -> torch.Tensor:
        seed = salt
        for t in path:
            seed = (seed * 1_000_003 + t + 1) % (2**61 - 1)
        g = torch.Generator().manual_seed(seed)
        return 2.0 * torch.randn(vocab, generator=g)

    return fn


def rotating_logits(vocab: int) -> Callable[[tuple[int, ...]], torch.Tensor]:
    """The rank-r child of a node whose token is a is token ``(a + 1 + r) % vocab``."""

    def fn(path: tuple[int, ...]) -> torch.Tensor:
        a = path[-1]
        return -((torch.arange(vocab) - a - 1) % vocab).float()

    return fn


def node_paths(tree: DraftTree) -> list[tuple[int, ...]]:
    """Token path (root excluded) of every node, computed from ``parents`` only."""
    parents, tokens = tree.parents.tolist(), tree.tokens.tolist()
    out: list[tuple[int, ...]] = []
    for i in range(tree.num_nodes):
        path = []
        j = i
        while j > 0:
            path.append(tokens[j])
            j = parents[j]
        out.append(tuple(reversed(path)))
    return out


def check_tree_structure(tree: DraftTree) -> None:
    """Parents first, and mask/depth/paths consistent with the parent vector."""
    parents = tree.parents.tolist()
    n = tree.num_nodes
    assert parents[0] == -1
    for i in range(1, n):
        assert 0 <= parents[i] < i
    for i in range(n):
        chain = [i]
        while parents[chain[-1]] >= 0:
            chain.append(parents[chain[-1]])
        assert tree.depth[i].item() == len(chain) - 1
        assert set(torch.nonzero(tree.attn_mask[i]).flatten().tolist()) == set(chain)
        row = tree.paths[i].tolist()
        assert row[: len(chain)] == chain[::-1]
        assert all(x == -1 for x in row[len(chain) :])
    assert int(tree.depth.max()) <= tree.max_depth


def ranks_of(tree: DraftTree) -> list[tuple[int, ...]]:
    """Rank path of each node: a node's rank is its position among its siblings (by index)."""
    parents = tree.parents.tolist()
    rank = [0] * tree.num_nodes
    seen: dict[int, int] = {}
    for i in range(1, tree.num_nodes):
        rank[i] = seen.get(parents[i], 0)
        seen[parents[i]] = rank[i] + 1
    out = []
    for i in range(tree.num_nodes):
        path = []
        j = i
        while j > 0:
            path.append(rank[j])
            j = parents[j]
        out.append(tuple(reversed(path)))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Static


def test_default_tree_shape() -> None:
    policy = StaticTreePolicy.eagle1_default()
    assert len(EAGLE1_DEFAULT_PATHS) == 25
    assert policy.max_nodes == 26 and policy.max_depth == 5 and policy.topk == 10
    drafter = FakeDrafter(12, rotating_logits(12))
    tree = policy.grow(drafter, torch.tensor(3), GREEDY, None)
    assert tree.num_nodes == 26 and tree.max_depth == 5 and not tree.is_stochastic
    assert torch.bincount(tree.depth).tolist() == [1, 4, 8, 8, 3, 2]
    check_tree_structure(tree)
    # Node i + 1 is the i-th path in (depth, lexicographic) order; its rank path is that path.
    expected = [()] + sorted(EAGLE1_DEFAULT_PATHS, key=lambda p: (len(p), p))
    assert ranks_of(tree) == expected
    leaves = [p for p in EAGLE1_DEFAULT_PATHS if not any(q[: len(p)] == p and len(q) > len(p) for q in expected)]
    assert tree.leaf_paths().shape == (len(leaves), 6)
    assert tree.position_ids(7).tolist() == (tree.depth + 7).tolist()
    # One expand per level over the internal nodes of that level.
    assert [len(c) for c in drafter.calls] == [1, 4, 4, 1, 1]


def test_static_children_follow_ranks() -> None:
    vocab = 11
    policy = StaticTreePolicy.eagle1_default()
    tree = policy.grow(FakeDrafter(vocab, rotating_logits(vocab)), torch.tensor(5), GREEDY, None)
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    assert tokens[0] == 5
    for i, path in enumerate(ranks_of(tree)):
        if i:
            assert tokens[i] == (tokens[parents[i]] + 1 + path[-1]) % vocab


def test_static_refuses_a_drafter_narrower_than_the_tree() -> None:
    """A drafter proposing fewer tokens than a level's width (a small draft vocabulary) is a clear error."""

    class Narrow(FakeDrafter):
        def expand_topk(self, tree, frontier, k):
            return super().expand_topk(tree, frontier, min(k, 3))

    policy = StaticTreePolicy.eagle1_default()  # top-4 at the root
    with pytest.raises(ValueError, match="can propose only 3 tokens"):
        policy.grow(Narrow(16, random_logits(16)), torch.tensor(2), GREEDY, None)


def test_static_does_not_touch_generator() -> None:
    gen = torch.Generator().manual_seed(1)
    state = gen.get_state().clone()
    policy = StaticTreePolicy.eagle1_default()
    sampling = SamplingParams(temperature=1.0)
    a = policy.grow(FakeDrafter(16, random_logits(16)), torch.tensor(2), sampling, gen)
    b = policy.grow(FakeDrafter(16, random_logits(16)), torch.tensor(2), sampling, None)
    assert torch.equal(gen.get_state(), state)
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("length", [1, 4])
def test_chain(length: int) -> None:
    policy = StaticTreePolicy.chain(length)
    assert policy.max_nodes == length + 1 and policy.max_depth == length
    tree = policy.grow(FakeDrafter(9, rotating_logits(9)), torch.tensor(0), GREEDY, None)
    assert tree.parents.tolist() == list(range(-1, length))
    assert tree.depth.tolist() == list(range(length + 1))
    assert tree.tokens.tolist() == [i % 9 for i in range(length + 1)]  # greedy: a -> a + 1
    assert tree.leaf_paths().tolist() == [list(range(length + 1))]


@pytest.mark.parametrize(
    "paths, topk, match",
    [
        ([], None, "at least one path"),
        ([[]], None, "non-empty"),
        ([[0], [-1]], None, "non-negative"),
        ([[0], [0.5]], None, "non-negative"),
        ([[0], [1, 0]], None, "prefix-closed"),
        ([[0], [0, 0, 1], [0, 0]], None, None),  # valid, in any order
        ([[0], [0]], None, "twice"),
        ([[0], [3]], 3, "topk"),
    ],
)
def test_path_validation(paths: list, topk: int | None, match: str | None) -> None:
    if match is None:
        assert StaticTreePolicy.from_paths(paths, topk).max_nodes == len(paths) + 1
    else:
        with pytest.raises(ValueError, match=match):
            StaticTreePolicy(paths, topk)
    if not paths:
        with pytest.raises(ValueError):
            StaticTreePolicy.chain(0)


def test_static_gapped_ranks() -> None:
    # Ranks need not be consecutive for a deterministic tree: rank 2 without rank 1.
    tree = StaticTreePolicy([[0], [2], [2, 1]]).grow(FakeDrafter(8, rotating_logits(8)), torch.tensor(0), GREEDY, None)
    assert tree.tokens.tolist() == [0, 1, 3, 5]
    assert tree.parents.tolist() == [-1, 0, 0, 2]


# ----------------------------------------------------------------------------------------------------------------
# Dynamic


def dynamic_reference(
    fn: Callable[[tuple[int, ...]], torch.Tensor], root: int, topk: int, depth: int, total: int
) -> set[tuple[int, ...]]:
    """EAGLE-2 written out with dicts: the token paths (root excluded) of the kept nodes."""
    value: dict[tuple[int, ...], float] = {}

    def children(path: tuple[int, ...]) -> list[tuple[int, ...]]:
        logp = torch.log_softmax(fn((root, *path)).double(), -1)
        best = sorted(range(logp.shape[0]), key=lambda t: -logp[t].item())[:topk]
        base = value.get(path, 0.0)
        for t in best:
            value[(*path, t)] = base + logp[t].item()
        return [(*path, t) for t in best]

    frontier = children(())
    for _ in range(depth - 1):
        new = [c for p in frontier for c in children(p)]
        frontier = sorted(new, key=lambda c: -value[c])[:topk]
    kept = sorted(value, key=lambda c: -value[c])[: total - 1]
    return set(kept)


@pytest.mark.parametrize(
    "vocab, topk, depth, total, salt",
    [(12, 3, 4, 12, 0), (12, 3, 4, 12, 1), (20, 4, 3, 25, 2), (9, 2, 5, 100, 3), (10, 4, 1, 3, 4), (6, 8, 2, 30, 5)],
)
def test_dynamic_matches_reference(vocab: int, topk: int, depth: int, total: int, salt: int) -> None:
    fn = random_logits(vocab, salt)
    policy = DynamicTreePolicy(topk=topk, depth=depth, total_tokens=total, strict=True)
    drafter = FakeDrafter(vocab, fn)
    tree = policy.grow(drafter, torch.tensor(1), GREEDY, None)
    check_tree_structure(tree)
    k = min(topk, vocab)
    assert [len(c) for c in drafter.calls] == [1] + [k] * (depth - 1)
    assert tree.num_nodes <= min(total, policy.max_nodes) and tree.max_depth == depth
    paths = node_paths(tree)
    assert len(set(paths)) == tree.num_nodes
    assert set(paths[1:]) == dynamic_reference(fn, 1, k, depth, total)
    # Siblings are in rank order: decreasing draft probability with increasing index.
    parents = tree.parents.tolist()
    for i in range(2, tree.num_nodes):
        for j in range(1, i):
            if parents[j] == parents[i]:
                logp = torch.log_softmax(fn((1, *paths[parents[i]])), -1)
                assert logp[tree.tokens[j]] >= logp[tree.tokens[i]]


def test_dynamic_ties_stay_connected() -> None:
    # All-equal logits (every value ties) and one-hot logits (child value == parent value).
    flat = FakeDrafter(5, lambda path: torch.zeros(5))
    onehot = FakeDrafter(5, lambda path: torch.tensor([0.0, -math.inf, -math.inf, -math.inf, -math.inf]))
    for drafter in (flat, onehot):
        for total in (2, 4, 7, 13):
            policy = DynamicTreePolicy(topk=3, depth=4, total_tokens=total, strict=True)
            tree = policy.grow(drafter, torch.tensor(0), GREEDY, None)
            check_tree_structure(tree)
            assert tree.num_nodes == total
    # Under ties the shallower node wins: with flat logits, the 3 level-1 nodes are kept before any deeper one.
    tree = DynamicTreePolicy(topk=3, depth=4, total_tokens=4).grow(flat, torch.tensor(0), GREEDY, None)
    assert tree.depth.tolist() == [0, 1, 1, 1]


def test_dynamic_validation_and_generator() -> None:
    for kwargs in ({"topk": 0}, {"depth": 0}, {"total_tokens": 1}):
        with pytest.raises(ValueError):
            DynamicTreePolicy(**kwargs)
    policy = DynamicTreePolicy(topk=4, depth=3, total_tokens=10)
    assert policy.max_nodes == 10 and policy.max_depth == 3
    assert DynamicTreePolicy(topk=2, depth=2, total_tokens=60).max_nodes == 1 + 2 + 4
    gen = torch.Generator().manual_seed(3)
    state = gen.get_state().clone()
    a = policy.grow(FakeDrafter(16, random_logits(16)), torch.tensor(2), SamplingParams(temperature=0.7), gen)
    b = policy.grow(FakeDrafter(16, random_logits(16)), torch.tensor(2), GREEDY, None)
    assert torch.equal(gen.get_state(), state)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)


# ----------------------------------------------------------------------------------------------------------------
# Stochastic


@pytest.mark.parametrize("ratio", [1.0, 0.6])
def test_stochastic_q_dist_and_q_cond(ratio: float) -> None:
    """Each node's recorded q is the law its children were drawn from: softmax(logits / (ratio x T))."""
    vocab, temperature = 7, 0.8
    fn = random_logits(vocab, 11)
    policy = StochasticTreePolicy([[0], [1], [2], [0, 0], [0, 1], [2, 0], [0, 0, 0]], draft_temperature_ratio=ratio)
    sampling = SamplingParams(temperature=temperature)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        tree = policy.grow(FakeDrafter(vocab, fn), torch.tensor(4), sampling, gen)
        check_tree_structure(tree)
        assert tree.is_stochastic and tree.q_dist.shape == (8, vocab) and tree.q_cond.shape == (8,)
        paths, parents = node_paths(tree), tree.parents.tolist()
        internal = set(parents[1:])
        for u in range(tree.num_nodes):
            if u in internal:
                q = torch.softmax(fn((4, *paths[u])) / (ratio * temperature), -1)
                torch.testing.assert_close(tree.q_dist[u], q)
            else:
                assert tree.q_dist[u].abs().sum() == 0
        for i in range(1, tree.num_nodes):
            u = parents[i]
            earlier = [j for j in range(1, i) if parents[j] == u]
            tried = sum(tree.q_dist[u, tree.tokens[j]].item() for j in earlier)
            assert tree.q_cond[i].item() == pytest.approx(tree.q_dist[u, tree.tokens[i]].item() / (1 - tried), rel=1e-5)
            assert tree.tokens[i].item() not in [tree.tokens[j].item() for j in earlier]  # without replacement


@pytest.mark.parametrize("ratio", [1.0, 0.5])
def test_stochastic_draws_follow_q(ratio: float) -> None:
    # Root with 3 sampled children: first child ~ q, second ~ sum_i q_i q_j / (1 - q_i) (j != i), with q the
    # distribution at ratio x T (T = 1 here): q ∝ q_1 ** (1 / ratio).
    base = torch.tensor([0.4, 0.25, 0.15, 0.12, 0.08])
    drafter = FakeDrafter(5, lambda path: base.log())
    q = base ** (1 / ratio) / (base ** (1 / ratio)).sum()
    policy = StochasticTreePolicy([[0], [1], [2]], draft_temperature_ratio=ratio)
    sampling = SamplingParams(temperature=1.0)
    gen = torch.Generator().manual_seed(1234)
    trials = 3000
    first = torch.zeros(5)
    second = torch.zeros(5)
    for _ in range(trials):
        tokens = policy.grow(drafter, torch.tensor(0), sampling, gen).tokens
        first[tokens[1]] += 1
        second[tokens[2]] += 1
        assert len(set(tokens[1:].tolist())) == 3
    expected_second = torch.tensor(
        [sum(q[i] * q[j] / (1 - q[i]) for i in range(5) if i != j) for j in range(5)], dtype=torch.float32
    )
    # Standard error of a frequency <= 0.5 / sqrt(3000) = 0.009; allow ~3 of them.
    assert (first / trials - q).abs().max() < 0.027
    assert (second / trials - expected_second).abs().max() < 0.027


def test_stochastic_seeded_and_greedy_fallback() -> None:
    fn = random_logits(6, 5)
    policy = StochasticTreePolicy([[0], [1], [0, 0], [0, 1]])
    hot = SamplingParams(temperature=2.0)
    trees = [
        policy.grow(FakeDrafter(6, fn), torch.tensor(0), hot, torch.Generator().manual_seed(s)).tokens.tolist()
        for s in range(8)
    ]
    again = policy.grow(FakeDrafter(6, fn), torch.tensor(0), hot, torch.Generator().manual_seed(0)).tokens.tolist()
    assert again == trees[0]
    assert len({tuple(t) for t in trees}) > 1  # the generator drives the draws
    greedy = policy.grow(FakeDrafter(6, fn), torch.tensor(0), GREEDY, torch.Generator().manual_seed(0))
    static = StaticTreePolicy([[0], [1], [0, 0], [0, 1]]).grow(FakeDrafter(6, fn), torch.tensor(0), GREEDY, None)
    assert not greedy.is_stochastic and greedy.q_cond is None
    assert torch.equal(greedy.tokens, static.tokens)


def test_stochastic_validation() -> None:
    for ratio in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="draft_temperature_ratio"):
            StochasticTreePolicy([[0]], draft_temperature_ratio=ratio)
    with pytest.raises(ValueError, match="consecutive"):
        StochasticTreePolicy([[0], [2]])
    with pytest.raises(ValueError, match="consecutive"):
        StochasticTreePolicy([[0], [0, 1]])
    chain = StochasticTreePolicy.chain(3)
    assert chain.max_nodes == 4 and chain.max_depth == 3
    assert StochasticTreePolicy.eagle1_default().max_nodes == 26
    policy = StochasticTreePolicy([[0], [1], [2]])
    with pytest.raises(ValueError, match="distinct"):
        policy.grow(FakeDrafter(2, lambda p: torch.zeros(2)), torch.tensor(0), SamplingParams(temperature=1.0), None)


def test_stochastic_full_support() -> None:
    # Only one token has finite logits, yet 3 distinct children are drawn: q is floored so that all have q > 0.
    logits = torch.tensor([0.0, -math.inf, -math.inf, -math.inf])
    policy = StochasticTreePolicy([[0], [1], [2]])
    tree = policy.grow(FakeDrafter(4, lambda p: logits), torch.tensor(0), SamplingParams(temperature=1.0), None)
    assert tree.tokens[1].item() == 0
    assert (tree.q_dist[0] > 0).all() and (tree.q_cond[1:] > 0).all()
    assert tree.q_dist[0, 0].item() == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(6))
def test_from_parents_with_the_pool_ancestors_equals_from_parents(seed: int) -> None:
    """Random parent vectors: paths/mask/depth consistent, and a given ancestor matrix gives the same tree."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 40, (1,), generator=g))
    parents = torch.tensor([-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)])
    tokens = torch.randint(0, 100, (n,), generator=g)
    tree = DraftTree.from_parents(tokens, parents, max_depth=n)
    check_tree_structure(tree)
    again = DraftTree.from_parents(tokens, parents, max_depth=n, ancestors=tree.attn_mask.clone())
    for name in ("depth", "attn_mask", "paths"):
        assert torch.equal(getattr(again, name), getattr(tree, name)), name
    with pytest.raises(ValueError, match="ancestors"):
        DraftTree.from_parents(tokens, parents, max_depth=n, ancestors=tree.attn_mask[:, :-1])


def test_resized_trees_are_depth_one_of_the_size_asked_or_refused() -> None:
    """``TreePolicy.resized`` (a batch's tree size): the dynamic policy's ``total - 1`` best root children and the
    sampled policy's ``total - 1`` root draws (their q recorded), within ``topk`` / the shape's root width; None past
    them, and for a static shape (not resized); a ``ByTemperature`` resizes the parts that can, a composite only
    where its base can (then with the composite's kind)."""
    drafter, root = FakeDrafter(16, random_logits(16)), torch.tensor(2)
    dynamic = DynamicTreePolicy(topk=3, depth=4, total_tokens=10)
    for total in (2, 3, 4):
        tree = dynamic.resized(total).grow(drafter, root, GREEDY, None)
        assert tree.num_nodes == total and tree.parents[1:].eq(0).all()
        best = torch.topk(drafter.fn((int(root),)), total - 1)
        assert set(tree.tokens[1:].tolist()) == set(best.indices.tolist())
    assert dynamic.resized(5) is None and dynamic.resized(1) is None
    assert dynamic.resized(3) is dynamic.resized(3)  # asked per row and cycle in a batch: built once
    sampled = StochasticTreePolicy([[0], [1], [0, 0]])
    g = torch.Generator().manual_seed(0)
    tree = sampled.resized(3).grow(drafter, root, SamplingParams(temperature=1.0), g)
    assert tree.num_nodes == 3 and tree.parents[1:].eq(0).all() and tree.is_stochastic
    assert tree.tokens[1] != tree.tokens[2]  # draws without replacement
    assert sampled.resized(4) is None and StaticTreePolicy([[0], [1]]).resized(2) is None
    assert sampled.resized(3) is sampled.resized(3)
    from specdec.trees import ByTemperature, CompositeTreePolicy

    both = ByTemperature(dynamic, sampled)
    assert isinstance(both.resized(3).sampled, StochasticTreePolicy) and both.resized(3).sampled is not sampled
    assert both.resized(4).sampled is sampled and both.resized(4).greedy is not dynamic  # a part that cannot keeps
    static = ByTemperature(StaticTreePolicy([[0], [1]]), StaticTreePolicy([[0]]))
    assert static.resized(2) is None
    assert CompositeTreePolicy(static).resized(2) is None and CompositeTreePolicy(None).resized(2) is None
    view = CompositeTreePolicy(both).resized(3)
    assert view is not None and view.kind(SamplingParams(temperature=1.0)).point_masses

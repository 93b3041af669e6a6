"""LevelGate: a sampled shape's deeper levels drawn only where they pay (specdec.trees.level_gate).

What is shown: the gate draws every level while warming up and when exploring; a level whose price dwarfs any gain
is then skipped and one that costs nothing is drawn; a gated tree is the shape's prefix of the levels drawn, with
the recorded q of every expanded node; the gain table learns from accepted paths; and the named methods take the
option. What the verifier needs of a gated tree: every child drawn from the q recorded for its parent, given the
earlier draws; shown by frequencies of the first child under a gate that decides from earlier draws, and failed by
one that peeks at the level it decides about (:class:`~specdec.testing.broken.PeekingGatePolicy`, the negative
control). The whole loop on a gated tree passes the end-to-end G-test (tests/test_statistical_e2e.py,
``stochastic-gated``).
"""

from __future__ import annotations

import numpy as np
import torch

from specdec.budget import CostCurve
from specdec.sampling import SamplingParams
from specdec.testing.broken import PeekingGatePolicy
from specdec.trees import StochasticTreePolicy
from specdec.trees.level_gate import PI_EDGES, LevelGate
from tests.test_trees import FakeDrafter, random_logits

R3D = [[0], [1], [2], [0, 0], [1, 0]]
HOT = SamplingParams(temperature=1.0)


def gate(dear: bool) -> LevelGate:
    """A gate over a flat cost curve, or one where a tree above 4 tokens costs a hundred one-token forwards."""
    if dear:
        return LevelGate(CostCurve(sizes=(1, 4, 5, 64), seconds=(1.0, 1.0, 100.0, 200.0)))
    return LevelGate(CostCurve(sizes=(1, 64), seconds=(1.0, 1.0)))


def grow_many(policy: StochasticTreePolicy, cycles: int, vocab: int = 9) -> list[int]:
    fn = random_logits(vocab, 3)
    g = torch.Generator().manual_seed(0)
    sizes = []
    for _ in range(cycles):
        tree = policy.grow(FakeDrafter(vocab, fn), torch.tensor(1), HOT, g)
        sizes.append(tree.num_nodes)
        policy.observe(0)
        policy.observe_path([0])
    return sizes


def test_a_dear_level_is_skipped_after_the_warm_up_and_drawn_when_exploring() -> None:
    policy = StochasticTreePolicy(R3D, gate=gate(dear=True))
    sizes = grow_many(policy, 40)
    explore = [c < LevelGate.WARM_UP or c % LevelGate.EXPLORE_EVERY == 0 for c in range(40)]
    assert sizes == [6 if e else 4 for e in explore]


def test_a_free_level_is_always_drawn() -> None:
    g = gate(dear=False)
    g.level_seconds = 0.0
    policy = StochasticTreePolicy(R3D, gate=g)
    assert set(grow_many(policy, 30)) == {6}


def test_a_gated_tree_is_the_shapes_prefix_with_its_q() -> None:
    policy = StochasticTreePolicy(R3D, draft_temperature_ratio=0.7, gate=gate(dear=True))
    vocab, fn = 9, random_logits(9, 5)
    g = torch.Generator().manual_seed(1)
    for _ in range(LevelGate.WARM_UP + 1):  # past the warm-up: this cycle's tree stops after the root's level
        tree = policy.grow(FakeDrafter(vocab, fn), torch.tensor(1), HOT, g)
    assert tree.num_nodes == 4 and tree.parents.tolist() == [-1, 0, 0, 0]
    torch.testing.assert_close(tree.q_dist[0], torch.softmax(fn((1,)) / 0.7, -1))
    assert tree.q_dist[1:].abs().sum() == 0 and tree.q_cond.shape == (4,)


def test_the_gain_table_learns_from_accepted_paths() -> None:
    g = gate(dear=False)
    before = g.gain(np.array([0.6]))
    for _ in range(100):  # every expanded node of bucket 0.5..0.7 had its child accepted
        g._expanded = [(int(np.searchsorted(PI_EDGES, 0.6, side="right")), [4])]
        g.observe_path([0, 1, 4])
    assert g.gain(np.array([0.6])) > 0.95 > before
    for _ in range(100):
        g._expanded = [(int(np.searchsorted(PI_EDGES, 0.6, side="right")), [4])]
        g.observe_path([0, 2])
    assert g.gain(np.array([0.6])) < 0.05


def test_the_named_methods_take_the_gate() -> None:
    from specdec.methods import MethodOptions, _dynamic
    from specdec.models import tiny_llama
    from specdec.target import HFTarget

    model = tiny_llama(vocab_size=16, hidden_size=16, num_layers=2, seed=0)
    target = HFTarget(model, max_len=64)
    policy = _dynamic(target, MethodOptions(sampled_level_gate=True), sampled=True).for_sampling(HOT)
    assert isinstance(policy, StochasticTreePolicy) and isinstance(policy.gate, LevelGate)
    assert policy.draft_temperature_ratio == MethodOptions().draft_temperature_ratio
    plain = _dynamic(target, MethodOptions(), sampled=True).for_sampling(HOT)
    assert plain.gate is None


class EarlierDrawsGate(LevelGate):
    """Draws the next level iff the node it expands was drawn with q above 0.3 (earlier draws only)."""

    def __init__(self) -> None:
        super().__init__(CostCurve(sizes=(1,), seconds=(1.0,)))

    def draws(self, tree, frontier, added) -> bool:
        super().draws(tree, frontier, added)  # keeps the frontier's values for expanded()
        return bool(self._pi.max() > 0.3)


def first_child_deviation(policy: StochasticTreePolicy, grows: int = 4000) -> tuple[float, int]:
    """Largest |frequency - recorded q| of the first node's first child (over the grows where it exists), and how
    many such grows there were. Shape: the root's two draws, the first with one child."""
    vocab = 4
    fn = random_logits(vocab, 7)
    g = torch.Generator().manual_seed(0)
    counts: dict[int, torch.Tensor] = {}
    q_of: dict[int, torch.Tensor] = {}
    for _ in range(grows):
        tree = policy.grow(FakeDrafter(vocab, fn), torch.tensor(1), HOT, g)
        if tree.num_nodes < 4:
            continue
        x = int(tree.tokens[1])
        counts.setdefault(x, torch.zeros(vocab))[int(tree.tokens[3])] += 1
        q_of[x] = tree.q_dist[1].double()
    deviation = max(float((c / c.sum() - q_of[x]).abs().max()) for x, c in counts.items() if c.sum() >= 200)
    return deviation, sum(int(c.sum()) for c in counts.values())


def test_children_follow_their_recorded_q_under_a_gate_and_a_peeking_gate_is_caught() -> None:
    """Tolerance 0.06: the standard error of a frequency is at most 0.5 / sqrt(200) = 0.035 per cell with at least
    200 grows, so a correct policy exceeds it in a cell with probability about 0.1 (fixed seed: deterministic). The
    peeking gate keeps the first child only where its q is at least 0.3, which moves its law by more than 0.2 here."""
    shape = [[0], [1], [0, 0]]
    gated = StochasticTreePolicy(shape, gate=EarlierDrawsGate())
    deviation, kept = first_child_deviation(gated)
    assert 0 < kept < 4000 and deviation < 0.06, (deviation, kept)  # the gate decided both ways; the law holds
    deviation, kept = first_child_deviation(PeekingGatePolicy(shape, threshold=0.3))
    assert kept > 200 and deviation > 0.06, (deviation, kept)


def test_options_a_method_would_ignore_are_refused() -> None:
    import pytest

    from specdec.methods import MethodOptions

    for tree in (None, "menu"):
        with pytest.raises(ValueError, match="sampled_level_gate gates a sampled tree of a fixed shape"):
            MethodOptions(sampled_level_gate=True, sampled_tree=tree)
    for ratio in (0.0, -0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="draft_temperature_ratio must be a positive finite number"):
            MethodOptions(draft_temperature_ratio=ratio)

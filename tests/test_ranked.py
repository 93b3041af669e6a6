"""Sampled trees shaped from measured acceptance per draw rank (``specdec.trees.ranked.RankedSampledPolicy``).

The shapes are checked with made-up cost curves and verifiers that accept fixed rank paths (no timing:
``draft_seconds`` is fixed); the root-only and drafted cycles end to end on a tiny model (the multi-cycle invariants);
the emitted distribution by ``tests/test_statistical_multicycle.py`` (configuration ``eagle3-ranked-stochastic-T1``).
"""

from __future__ import annotations

import pytest
import torch

from specdec.budget import CostCurve
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.methods import MethodOptions
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing.invariants import check_cycle_invariants
from specdec.trees import StochasticTreePolicy
from specdec.trees.ranked import RankedSampledPolicy
from specdec.verify import StochasticMultiRoundVerifier
from tests.factories import make_drafter

T1 = SamplingParams(temperature=1.0)
FLAT = CostCurve((1, 16), (1.0, 1.05))  # a tree of sixteen tokens costs about one step
STEEP = CostCurve((1, 2, 16), (1.0, 1.3, 4.0))  # every token of a tree costs


def run(policy: RankedSampledPolicy, accepts: set[tuple[int, ...]], cycles: int) -> list[tuple]:
    """Cycles in which the verifier accepts the nodes at the rank paths ``accepts`` (multi-round: under each accepted
    node, the lowest-ranked accepted child); returns each cycle's rank paths."""
    drawn = []
    for _ in range(cycles):
        paths = policy.choose()
        policy.last_paths = tuple(sorted(paths, key=lambda p: (len(p), p)))
        drawn.append(policy.last_paths)
        ids, node = [0], ()
        while True:
            nxt = next((p for p in policy.last_paths if p[:-1] == node and p in accepts), None)
            if nxt is None:
                break
            ids.append(policy.last_paths.index(nxt) + 1)
            node = nxt
        policy.observe_path(ids)
    return drawn


def test_every_prefix_of_the_order_is_a_sampled_shape() -> None:
    policy = RankedSampledPolicy(FLAT, max_nodes=16, max_depth=3, max_width=4, draft_seconds=0.0)
    policy.hits[0] = [0.4, 0.2, 0.1, 0.05]  # made-up acceptance: the root's first draw best, deeper ones alike
    policy.hits[1] = [0.35, 0.1, 0.1, 0.1]
    ordered = policy.order()
    assert len(ordered) == 15
    values = [v for _, v in ordered]
    assert values == sorted(values, reverse=True)  # acceptance falling with rank: best first is a plain sort
    assert values[0] == pytest.approx(0.4) and ordered[1] == ((0, 0), pytest.approx(0.4 * 0.35))
    for n in range(1, 16):
        shape = StochasticTreePolicy([p for p, _ in ordered[:n]])  # consecutive ranks, prefix-closed
        assert shape.max_depth <= 3 and max(p[-1] for p, _ in ordered[:n]) < 4


def test_estimates_follow_the_tries_of_multi_round_verification() -> None:
    policy = RankedSampledPolicy(FLAT, max_nodes=6, max_depth=2, max_width=3, draft_seconds=0.0, smoothing=0.5)
    policy.last_paths = ((0,), (1,), (2,), (0, 0), (1, 0))
    policy.observe_path([0, 2, 5])  # rank 1 at the root accepted (rank 0 tried before it), then its child
    assert policy.tries[0][:3] == [1.5, 1.5, 1.0] and policy.hits[0][:3] == [0.25, 1.25, 0.5]  # rank 2 never tried
    assert policy.tries[1][0] == 1.5 and policy.hits[1][0] == 1.25
    policy.observe_path([0])  # all three root draws rejected
    assert policy.tries[0][:3] == [1.75, 1.75, 1.5] and policy.hits[0][:3] == [0.125, 0.625, 0.25]
    assert policy.tries[1][0] == 1.5  # no child tried: its estimate stays


def test_shapes_follow_costs_and_acceptance() -> None:
    warm = RankedSampledPolicy.WARM_UP
    second = run(RankedSampledPolicy(FLAT, draft_seconds=0.001), {(1,), (1, 0), (1, 0, 0)}, 120)
    assert len(second[0]) == 15  # the largest tree first
    settled = second[warm + 60 :]
    assert all({(0,), (1,), (1, 0), (1, 0, 0)} <= set(s) for s in settled)  # the accepted path, and rank 0 before it
    # rank 2 is never tried (rank 1 always accepted): its value, rank 1's rejections times its prior, goes to 0
    assert all((2,) not in s for s in settled if len(s) < 15)
    steep = run(RankedSampledPolicy(STEEP, draft_seconds=0.05), set(), 120)  # nothing accepted: vanilla steps
    assert steep[warm + 30 :].count(()) >= 0.9 * len(steep[warm + 30 :])
    assert any(len(s) == 15 for s in steep[warm + 30 :])  # the largest tree now and then keeps estimates fresh


def test_refusals() -> None:
    with pytest.raises(ValueError, match="max_nodes >= 2"):
        RankedSampledPolicy(FLAT, max_nodes=1)
    with pytest.raises(ValueError, match="sampled_level_gate gates a sampled tree of a fixed shape, not 'ranked'"):
        MethodOptions(sampled_tree="ranked", sampled_level_gate=True)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=8, hidden_size=16, num_layers=3, seed=0, logit_scale=1.5)


@pytest.mark.parametrize("curve", [FLAT, STEEP], ids=["flat", "steep"])
def test_cycles_keep_every_state_exact(model, curve) -> None:
    """Drafted trees (flat) and root-only cycles between drafted ones (steep): after every cycle the target's cache
    and the drafter's state equal a fresh start fed the committed tokens."""
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    stop = StopCondition(max_new_tokens=24, eos_token_ids=())
    policy = RankedSampledPolicy(curve, max_nodes=6, max_depth=3, max_width=3, draft_seconds=0.02)
    drafter = lambda: make_drafter("eagle3", model, 64, weights="packed")  # noqa: E731
    decoder = SpeculativeGenerator(HFTarget(model, max_len=64), drafter(), policy)
    report = check_cycle_invariants(decoder, lambda: HFTarget(model, max_len=64), drafter, prompt, T1, stop, seed=3)
    sizes = report.result.metrics.tree_sizes
    assert len(report.result.tokens) == 24 and max(sizes) > 1  # the warm-up draws the largest tree
    if curve is STEEP:
        assert 1 in sizes  # and the steep curve makes it skip drafting: the drafter catches up later
    assert isinstance(decoder.parts_for(T1)[1], StochasticMultiRoundVerifier)


def test_methods_build_the_ranked_tree(model) -> None:
    from specdec.methods import _dynamic

    policy = _dynamic(HFTarget(model, max_len=64), MethodOptions(sampled_tree="ranked"), sampled=True)
    assert isinstance(policy.for_sampling(T1), RankedSampledPolicy)
    assert not isinstance(policy.for_sampling(SamplingParams()), RankedSampledPolicy)  # T = 0: the adaptive tree


class _Drafter:
    generation = 0


def test_the_draft_clock_leaves_out_grows_that_run_more_than_their_levels() -> None:
    from specdec.trees.draft_clock import DraftClock

    clock, drafter = DraftClock(smoothing=0.5), _Drafter()  # seconds far above a call's own time: exact to 1e-2
    clock.record(drafter, clock.start() - 100.0, 2)  # a generation's first grow (its prompt)
    assert clock.seconds is None
    clock.record(drafter, clock.start() - 20.0, 2)
    assert clock.seconds == pytest.approx(10.0, abs=1e-2)
    clock.skipped()
    clock.record(drafter, clock.start() - 30.0, 1)  # the skipped tokens' catch-up: slower, left out
    assert clock.seconds == pytest.approx(10.0, abs=1e-2)
    clock.skipped()
    clock.record(drafter, clock.start() - 6.0, 1)  # faster even with the catch-up: taken
    assert clock.seconds == pytest.approx(8.0, abs=1e-2)
    drafter.generation += 1
    clock.record(drafter, clock.start() - 100.0, 1)  # the next generation's prompt
    assert clock.seconds == pytest.approx(8.0, abs=1e-2)
    clock.record(drafter, clock.start() - 12.0, 1)
    assert clock.seconds == pytest.approx(10.0, abs=1e-2)
    clock.record(_Drafter(), clock.start() - 100.0, 1)  # another drafter object: its first grow
    assert clock.seconds == pytest.approx(10.0, abs=1e-2)


def test_a_composite_tree_feeds_its_ranked_base_only_the_tries_it_made(model) -> None:
    from specdec.drafters import CompositeDrafter, RetrievalDrafter
    from specdec.interfaces import Continuation
    from specdec.trees import CompositeTreePolicy
    from specdec.trees.composite import _continuation_first

    proposals = [Continuation((5, 6), 2)]
    assert _continuation_first([0], [5, 6, 1], proposals)  # the continuation's token first: no base child tried
    assert not _continuation_first([0], [5], proposals)  # one token: the bonus, after every child was rejected
    assert not _continuation_first([0, 2], [5, 6, 1], proposals)  # the base tree has the token: its path
    assert not _continuation_first([0], [4, 1], proposals)  # a token no continuation proposed
    ranked = RankedSampledPolicy(FLAT, max_nodes=6, max_depth=2, max_width=3, draft_seconds=0.01)
    drafter = CompositeDrafter(
        make_drafter("eagle3", model, 64, weights="packed"), [RetrievalDrafter(8, max_draft=2, min_match=1)]
    )
    gen = SpeculativeGenerator(HFTarget(model, max_len=64), drafter, CompositeTreePolicy(ranked, max_draft=2))
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    out = gen.generate(prompt, SamplingParams(temperature=1.0, seed=0), StopCondition(16, ()))
    assert len(out.tokens) == 16 and ranked.cycle > 0 and ranked.tries[0][0] > 1.0  # the base learnt from its tries

"""Sampled trees chosen per cycle from a menu by measured rate (``specdec.trees.menu.SampledMenuPolicy``).

The choice is checked with made-up cost curves and accepted lengths (no timing: ``draft_seconds`` is fixed), the
root-only tree end to end on a tiny model (the drafter catches up after skipped cycles: the multi-cycle invariants
hold), and the emitted distribution by ``tests/test_statistical_multicycle.py`` (configuration ``eagle3-menu``).
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
from specdec.trees import SampledMenuPolicy
from specdec.trees.menu import DEFAULT_MENU
from specdec.verify import StochasticMultiRoundVerifier
from tests.factories import make_drafter

T1 = SamplingParams(temperature=1.0)
FLAT = CostCurve((1, 6), (1.0, 1.05))  # a tree of six tokens costs about one step (AMD, packed weights)
STEEP = CostCurve((1, 2, 6), (1.0, 1.3, 1.6))  # verification is dear (a CPU where small-row GEMMs are not flat)


def run(policy: SampledMenuPolicy, accepts, cycles: int) -> list[int]:
    """Cycles in which the verifier would accept the nodes at the rank paths ``accepts`` (a set, or a function of
    the cycle giving one), the path following the lowest accepted rank under each accepted node, as multi-round
    verification does; returns the menu index drawn each cycle."""
    drawn = []
    for cycle in range(cycles):
        index = policy.next_shape()
        ok = accepts(cycle) if callable(accepts) else accepts
        drawn.append(index)
        tree = policy.trees[index]
        paths = tree.shape.paths if tree is not None else []
        path_ids, node = [0], ()
        while True:
            nxt = next((p for p in paths if p[:-1] == node and p in ok), None)
            if nxt is None:
                break
            path_ids.append(paths.index(nxt) + 1)
            node = nxt
        policy.observe(len(path_ids) - 1)
        policy.observe_path(path_ids)
    return drawn


def test_choice_follows_costs_and_acceptance() -> None:
    warm = SampledMenuPolicy.WARM_UP
    r3d = len(DEFAULT_MENU) - 1

    def rotating(cycle: int) -> set[tuple[int, ...]]:  # one root child in three is right, and its child too
        return {(cycle % 3,), (cycle % 3, 0)}

    flat = run(SampledMenuPolicy(FLAT, draft_seconds=0.01), rotating, 200)
    assert flat[:warm] == [r3d] * warm  # the largest shape first: every node gets an estimate
    assert flat[warm:].count(r3d) == 200 - warm  # 2.7 tokens for ~1 step; a chain of two gets 1.7
    chain = run(SampledMenuPolicy(FLAT, draft_seconds=0.01), {(0,), (0, 0)}, 200)  # the first child always right
    assert chain[warm:].count(2) >= 0.9 * (200 - warm)  # the chain of two: the same 3 tokens, fewer nodes
    steep = run(SampledMenuPolicy(STEEP, draft_seconds=0.2), set(), 200)  # nothing accepted: vanilla steps
    assert steep[warm:].count(0) >= 0.9 * (200 - warm)
    assert r3d in steep[warm:]  # the largest shape now and then keeps the estimates fresh
    first_only = run(SampledMenuPolicy(STEEP, draft_seconds=0.01), {(0,)}, 200)  # one token accepted, always
    assert max(set(first_only[warm:]), key=first_only[warm:].count) == 1  # one draft: 2 tokens for 1.31 steps


def test_estimates_follow_the_accepted_nodes() -> None:
    policy = SampledMenuPolicy(FLAT, draft_seconds=0.0, smoothing=0.5)
    run(policy, {(1,), (1, 0)}, 1)  # r3d drawn; the second root child and its child accepted
    assert policy.acceptance((1,)) == 1.0 and policy.acceptance((1, 0)) == 1.0 and policy.acceptance((0,)) == 0.0
    run(policy, {(0,)}, 1)
    assert policy.acceptance((1,)) == pytest.approx(0.5 / 1.5) and policy.acceptance((0,)) == pytest.approx(1 / 1.5)
    before = dict(policy.hits)
    policy.observe(1)  # a count alone says nothing about which node: only the path's ids are learned from
    assert policy.hits == before


def test_menu_must_nest_in_its_largest_shape() -> None:
    with pytest.raises(ValueError, match="not part of the last"):
        SampledMenuPolicy(FLAT, menu=(((0,), (1,)), ((0,),)))
    with pytest.raises(ValueError, match="at least one"):
        SampledMenuPolicy(FLAT, menu=())
    with pytest.raises(ValueError, match="consecutive"):
        SampledMenuPolicy(FLAT, menu=(((1,),),))
    with pytest.raises(ValueError, match="unknown sampled tree"):
        MethodOptions(sampled_tree="menus")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=8, hidden_size=16, num_layers=3, seed=0, logit_scale=1.5)


def test_root_only_cycles_keep_every_state_exact(model) -> None:
    """A steep curve makes the policy skip drafting for most cycles; after every cycle the target's cache and the
    drafter's state still equal a fresh start fed the committed tokens (the drafter catches up lazily)."""
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    stop = StopCondition(max_new_tokens=24, eos_token_ids=())
    policy = SampledMenuPolicy(STEEP, draft_seconds=0.2)
    decoder = SpeculativeGenerator(
        HFTarget(model, max_len=64), make_drafter("eagle3", model, 64, weights="packed"), policy
    )
    report = check_cycle_invariants(
        decoder,
        lambda: HFTarget(model, max_len=64),
        lambda: make_drafter("eagle3", model, 64, weights="packed"),
        prompt,
        T1,
        stop,
        seed=3,
    )
    sizes = report.result.metrics.tree_sizes
    assert len(report.result.tokens) == 24 and 1 in sizes and max(sizes) > 1  # root-only and drafted cycles
    assert isinstance(decoder.parts_for(T1)[1], StochasticMultiRoundVerifier)


def test_methods_build_the_menu(model) -> None:
    from specdec.methods import _dynamic

    policy = _dynamic(HFTarget(model, max_len=64), MethodOptions(sampled_tree="menu"), sampled=True)
    assert isinstance(policy.for_sampling(T1), SampledMenuPolicy)
    assert not isinstance(policy.for_sampling(SamplingParams()), SampledMenuPolicy)  # T = 0: the adaptive tree


def test_a_composite_tree_learns_its_menu_from_the_matched_path(model) -> None:
    from specdec.drafters import CompositeDrafter, RetrievalDrafter
    from specdec.trees import CompositeTreePolicy

    menu = SampledMenuPolicy(FLAT, draft_seconds=0.01)
    drafter = CompositeDrafter(
        make_drafter("eagle3", model, 64, weights="packed"), [RetrievalDrafter(8, max_draft=2, min_match=1)]
    )
    gen = SpeculativeGenerator(HFTarget(model, max_len=64), drafter, CompositeTreePolicy(menu, max_draft=2))
    out = gen.generate(
        torch.tensor([1, 2, 3, 1, 2, 3, 1, 2]), SamplingParams(temperature=1.0, seed=0), StopCondition(16, ())
    )
    assert len(out.tokens) == 16 and menu.cycle > 0 and sum(menu.held.values()) > 0

"""Hardware-aware tree budget: cost curves, the choice of m (and depth), and the adaptive dynamic tree."""

from __future__ import annotations

import json
import math

import pytest
import torch

from specdec import cost_probe
from specdec.budget import (
    CostCurve,
    budgets_by_depth,
    choose_budget,
    curve_path,
    forward_cost_curve,
    measure_forward_cost,
)
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.methods import SAMPLED_SHAPES, MethodOptions, build_method
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy, StochasticTreePolicy
from specdec.trees.adaptive import AdaptiveTreePolicy
from specdec.verify import GreedyVerifier, MultiRoundVerifier, StochasticMultiRoundVerifier
from tests.factories import make_drafter

GREEDY = SamplingParams(temperature=0.0)


def linear_curve(base: float = 1.0, per_token: float = 0.1, top: int = 64) -> CostCurve:
    sizes = tuple(sorted({1, 2, 4, 8, top}))
    return CostCurve(sizes, tuple(base + per_token * m for m in sizes))


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, seed=3, logit_scale=2.0)


# ----------------------------------------------------------------------------------------------- the curve
def test_curve_interpolates_and_extrapolates():
    curve = CostCurve((1, 4, 8), (1.0, 2.5, 4.5))
    assert curve.cost(1) == 1.0
    assert curve.cost(2) == pytest.approx(1.5)
    assert curve.cost(6) == pytest.approx(3.5)
    assert curve.cost(12) == pytest.approx(6.5)  # slope of the last segment
    assert list(curve.costs(3)) == [pytest.approx(c) for c in (1.0, 1.5, 2.0)]
    assert CostCurve.from_json(json.loads(json.dumps(curve.to_json()))) == curve


@pytest.mark.parametrize(
    ("sizes", "seconds"), [((), ()), ((1, 2), (1.0,)), ((2, 1), (1.0, 2.0)), ((1, 2), (1.0, float("nan")))]
)
def test_curve_rejects_bad_input(sizes, seconds):
    with pytest.raises(ValueError):
        CostCurve(sizes, seconds)


def test_measure_and_cache(tiny, monkeypatch):
    monkeypatch.setattr(
        cost_probe, "first_dip", lambda seconds: None
    )  # a noisy probe's handling has its own test below
    target = HFTarget(tiny, max_len=128)
    curve = measure_forward_cost(target, sizes=(1, 2, 4, 8), repeats=2, context=16)
    assert curve.sizes == (1, 2, 4, 8)
    assert all(b >= a > 0 for a, b in zip(curve.seconds, curve.seconds[1:], strict=False))  # made monotone
    assert curve.meta["threads"] == torch.get_num_threads() and curve.meta["context"] == 16
    path = curve_path(target.model, target.device)
    assert path.is_file() and path.name.endswith(f"-cpu-{torch.get_num_threads()}-{target.execution.label}.json")
    assert curve.meta["backend"] == target.execution.label == "packed"
    assert target.length == 0  # the cache is left empty
    assert forward_cost_curve(target) == curve  # read back, not re-measured
    path.write_text("{not json")
    assert forward_cost_curve(target, sizes=(1, 2), repeats=1, context=8).sizes == (1, 2)  # corrupt cache: re-measured


# ----------------------------------------------------------------------------------------------- the choice
def test_expected_tau_is_one_plus_top_probabilities():
    curve = CostCurve((1, 64), (1.0, 1.0))  # flat cost: the largest tree wins, tau = 1 + sum of all probabilities
    probs = [0.9, 0.5, 0.8, 0.1]
    b = choose_budget(curve, [math.log(p) for p in probs])
    assert b.total_tokens == 5 and b.expected_tau == pytest.approx(1 + sum(probs))
    assert b.expected_tokens_per_second == pytest.approx((1 + sum(probs)) / 1.0)


def test_choice_maximises_rate_on_a_linear_curve():
    curve = linear_curve(base=1.0, per_token=0.1)
    probs = [0.9, 0.8, 0.7, 0.3, 0.2, 0.05, 0.01]
    b = choose_budget(curve, [math.log(p) for p in probs])
    rates = {m: (1 + sum(sorted(probs, reverse=True)[: m - 1])) / (1.0 + 0.1 * m) for m in range(2, 9)}
    best = max(rates, key=rates.get)
    assert b.total_tokens == best == 5
    assert b.expected_tokens_per_second == pytest.approx(rates[best])


def test_choice_respects_bounds_and_useless_drafts():
    curve = linear_curve(base=1.0, per_token=0.5)
    useless = [math.log(1e-6)] * 20
    assert choose_budget(curve, useless).total_tokens == 2  # min_total
    assert choose_budget(curve, useless, min_total=1).total_tokens == 1
    sure = [0.0] * 20  # probability 1 everywhere: bigger is always better on this curve
    assert choose_budget(curve, sure, max_total=7).total_tokens == 7
    assert choose_budget(curve, []).total_tokens == 1  # empty pool: the root alone


def test_steep_curve_prefers_small_trees_and_fixed_time_larger_ones():
    probs = [math.log(p) for p in (0.9, 0.6, 0.4, 0.3, 0.2, 0.15, 0.1, 0.1, 0.1)]
    steep = linear_curve(base=0.1, per_token=1.0)
    flat = linear_curve(base=1.0, per_token=0.01)
    assert choose_budget(steep, probs).total_tokens < choose_budget(flat, probs).total_tokens
    # A large per-cycle fixed cost (slow drafter) makes extra tree tokens relatively cheaper.
    assert choose_budget(steep, probs, fixed_seconds=100.0).total_tokens > choose_budget(steep, probs).total_tokens


def test_depth_choice_drops_levels_that_do_not_pay():
    curve = CostCurve((1, 64), (1.0, 1.0))
    values = [math.log(p) for p in (0.9, 0.8, 0.01, 0.01)]
    depths = [1, 1, 2, 3]
    cheap = choose_budget(curve, values, depths=depths, step_seconds=0.0)
    assert cheap.depth == 3  # free levels: keep everything
    costly = choose_budget(curve, values, depths=depths, step_seconds=0.5)
    assert costly.depth == 1 and costly.total_tokens == 3
    assert costly.expected_tokens_per_second == pytest.approx(2.7 / 1.5)
    with pytest.raises(ValueError):
        choose_budget(curve, values, depths=[1, 2])


# ----------------------------------------------------------------------------------------------- the policy
def run_adaptive(model, policy, prompt, new_tokens=30, kind="ngram", sampling=GREEDY, verifier=None):
    target = HFTarget(model, max_len=256)
    stop = StopCondition(max_new_tokens=new_tokens)
    vanilla = VanillaGenerator(target).generate(prompt, sampling, stop).tokens
    gen = SpeculativeGenerator(target, make_drafter(kind, model, 256), policy, verifier or GreedyVerifier())
    return vanilla, gen.generate(prompt, sampling, stop)


@pytest.mark.parametrize("kind", ["ngram", "small-lm", "eagle1"])
@pytest.mark.parametrize("adapt_depth", [False, True])
def test_adaptive_policy_is_greedy_exact(tiny, kind, adapt_depth):
    curve = linear_curve(base=1.0, per_token=0.05, top=16)
    policy = AdaptiveTreePolicy(topk=3, depth=4, max_total=16, curve=curve, adapt_depth=adapt_depth)
    for seed in range(2):
        prompt = torch.randint(0, 32, (7,), generator=torch.Generator().manual_seed(seed))
        vanilla, result = run_adaptive(tiny, policy, prompt, kind=kind)
        assert result.tokens == vanilla
        assert all(2 <= s <= 16 for s in result.metrics.tree_sizes)
        assert all(1 <= d <= 4 for d in result.metrics.tree_depths)


def test_adaptive_tree_equals_dynamic_tree_of_the_chosen_size(tiny):
    """The kept set is the fixed-size dynamic policy's tree of the size the budget chose."""
    curve = linear_curve(base=1.0, per_token=0.05, top=16)
    drafter = make_drafter("eagle1", tiny, 64)
    drafter.reset()
    target = HFTarget(tiny, max_len=64)
    target.request_hidden(drafter.hidden_request)
    prompt = torch.tensor([1, 5, 9, 2, 7])
    drafter.prefill(prompt, target.prefill(prompt).hidden)
    policy = AdaptiveTreePolicy(topk=3, depth=3, max_total=16, curve=curve, adapt_depth=False, draft_seconds=0.0)
    tree = policy.grow(drafter, torch.tensor(4), GREEDY, None)
    m = policy.last_budget.total_tokens
    ref = DynamicTreePolicy(topk=3, depth=3, total_tokens=m, strict=True).grow(drafter, torch.tensor(4), GREEDY, None)
    assert tree.num_nodes == m
    assert torch.equal(tree.tokens, ref.tokens) and torch.equal(tree.parents, ref.parents)
    assert bool((tree.parents[1:] >= 0).all()) and bool((tree.parents[1:] < torch.arange(1, m)).all())


def test_adaptive_depth_shrinks_and_recovers():
    """Deferred: useless deep levels with a costly drafter shrink the next cycle's depth; it never leaves [1, depth]."""
    from tests.test_trees import FakeDrafter

    curve = CostCurve((1, 64), (1.0, 1.0))
    confident = FakeDrafter(6, lambda path: torch.tensor([5.0, 0, 0, 0, 0, 0]) * (len(path) == 1))
    policy = AdaptiveTreePolicy(topk=2, depth=4, max_total=32, curve=curve, draft_seconds=1.0, deferred=True)
    for _ in range(3):
        policy.grow(confident, torch.tensor(0), GREEDY, None)
    assert policy.current_depth == 2  # only level 1 is confident: keep it plus one look-ahead level
    policy.draft_seconds = policy._step_seconds = 0.0  # free drafting: look-ahead grows the depth back
    for expected in (3, 4, 4):
        policy.grow(confident, torch.tensor(0), GREEDY, None)
        assert policy.current_depth == expected


def test_adaptive_levels_stop_where_the_next_does_not_pay():
    """Level by level: a level is drafted only if its predicted nodes pay for its time; the tree is the dynamic
    tree of the levels drafted and the size chosen."""
    from tests.test_trees import FakeDrafter

    curve = CostCurve((1, 64), (1.0, 1.0))
    confident = FakeDrafter(6, lambda path: torch.tensor([5.0, 0, 0, 0, 0, 0]) * (len(path) == 1))
    policy = AdaptiveTreePolicy(topk=2, depth=4, max_total=32, curve=curve, draft_seconds=0.5)
    policy.grow(confident, torch.tensor(0), GREEDY, None)
    assert policy.last_levels == 2  # no profile yet: the root's confident children predict a confident level 2
    assert policy.child_profile is not None and abs(policy.child_profile[0] - 1 / 6) < 1e-6  # ... it was uniform
    for _ in range(2):
        tree = policy.grow(confident, torch.tensor(0), GREEDY, None)
        assert policy.last_levels == 1 and policy.current_depth == 4  # uniform children do not pay for a second
        m = policy.last_budget.total_tokens
        ref = DynamicTreePolicy(topk=2, depth=1, total_tokens=m).grow(confident, torch.tensor(0), GREEDY, None)
        assert torch.equal(tree.tokens, ref.tokens) and torch.equal(tree.parents, ref.parents)
    for _ in range(policy.EXPLORE_EVERY - 2):
        policy.grow(confident, torch.tensor(0), GREEDY, None)
        assert policy.last_levels == 1
    policy.grow(confident, torch.tensor(0), GREEDY, None)
    assert policy.last_levels == 2  # exploration: the profile is refreshed once every EXPLORE_EVERY cycles
    policy.draft_seconds = 0.0  # free drafting: every predicted level pays
    tree = policy.grow(confident, torch.tensor(0), GREEDY, None)
    assert policy.last_levels == 4 and int(tree.depth.max()) == 4
    two = AdaptiveTreePolicy(topk=2, depth=2, max_total=32, curve=curve, draft_seconds=0.5)
    levels = []
    for _ in range(two.EXPLORE_EVERY + 2):
        two.grow(confident, torch.tensor(0), GREEDY, None)
        levels.append(two.last_levels)
    assert two.child_profile is not None  # the last level's children are learnt too
    assert levels == [2] + [1] * two.EXPLORE_EVERY + [2]  # a cycle that drafts both levels is not a shallow one


def test_observe_calibrates_an_overconfident_drafter():
    """A drafter sure of everything but never accepted: feedback shrinks the tree to the minimum."""
    from tests.test_trees import FakeDrafter

    curve = linear_curve(base=1.0, per_token=0.05, top=32)
    sure = FakeDrafter(6, lambda path: torch.tensor([30.0, 0, 0, 0, 0, 0]))
    policy = AdaptiveTreePolicy(topk=2, depth=4, max_total=32, curve=curve, adapt_depth=False, draft_seconds=0.0)
    first = policy.grow(sure, torch.tensor(0), GREEDY, None).num_nodes
    assert first > 2 and policy.calibration == 1.0
    for _ in range(30):
        policy.grow(sure, torch.tensor(0), GREEDY, None)
        policy.observe(0)
    assert policy.calibration < 0.1
    assert policy.grow(sure, torch.tensor(0), GREEDY, None).num_nodes == 2
    policy.observe(0)
    policy.observe(5)  # a second observe without a new tree is ignored
    assert policy.calibration < 0.1


def test_deferred_budget_sizes_from_the_previous_pool_without_its_own_sync():
    """Deferred mode: the first cycle reads its own values; later cycles only hand theirs to the loop's sync.

    (The fake drafter reads its paths on the host, so syncs are compared with an eager policy's, not with 0.)
    """
    from specdec.bench.syncs import HostSyncCounter
    from tests.test_trees import FakeDrafter

    curve = linear_curve(base=1.0, per_token=0.05, top=32)
    sure = FakeDrafter(6, lambda path: torch.tensor([30.0, 0, 0, 0, 0, 0]))
    unsure = FakeDrafter(6, lambda path: torch.zeros(6))
    options = dict(topk=2, depth=4, max_total=32, curve=curve, adapt_depth=False, draft_seconds=0.0)
    eager, policy = AdaptiveTreePolicy(**options), AdaptiveTreePolicy(**options, deferred=True)

    def syncs(p, drafter):
        with HostSyncCounter() as counter:
            tree = p.grow(drafter, torch.tensor(0), GREEDY, None)
        return counter.count, tree.num_nodes

    own, big = syncs(eager, sure)
    assert syncs(policy, sure) == (own, big) and policy.sync_payload() is None and big > 2  # first cycle
    deferred, size = syncs(policy, unsure)
    assert deferred == syncs(eager, unsure)[0] - 1  # no read of its own
    assert size == big  # sized from the confident first pool
    payload = policy.sync_payload()
    assert payload is not None and payload.dim() == 1
    policy.observe(0, payload.tolist())  # the loop's sync returns the unsure pool: the next tree is small
    assert policy.sync_payload() is None
    assert syncs(policy, sure)[1] < big
    policy.observe(0)  # a loop that carries no payload: the next cycle reads its own values again
    assert syncs(policy, sure)[0] == own


@pytest.mark.parametrize("kind", ["ngram", "eagle1"])
def test_deferred_budget_is_greedy_exact_and_calibrates(tiny, kind):
    curve = linear_curve(base=1.0, per_token=0.05, top=16)
    policy = AdaptiveTreePolicy(topk=3, depth=4, max_total=16, curve=curve, deferred=True)
    seen = []  # per cycle: (the loop carried a payload, the calibration took a prediction)
    observe = policy.observe

    def recording(accept_length, payload=None):
        before = policy._predicted
        observe(accept_length, payload)
        seen.append((payload is not None, policy._predicted != before))

    policy.observe = recording
    prompt = torch.randint(0, 32, (7,), generator=torch.Generator().manual_seed(1))
    vanilla, result = run_adaptive(tiny, policy, prompt, kind=kind)
    assert result.tokens == vanilla
    assert len(seen) > 1 and seen[0] == (False, True)  # the first cycle read its own values
    assert all(carried and calibrated for carried, calibrated in seen[1:])  # then every cycle's rode the loop's sync


def test_adaptive_policy_validates():
    curve = linear_curve()
    with pytest.raises(ValueError):
        AdaptiveTreePolicy(topk=2, depth=2, max_total=8, curve=curve, min_total=1)
    with pytest.raises(ValueError):
        AdaptiveTreePolicy(topk=0, depth=2, max_total=8, curve=curve)
    assert AdaptiveTreePolicy(topk=2, depth=2, max_total=60, curve=curve).max_nodes == 1 + 2 + 4


def test_adaptive_policy_at_temperature_uses_the_multiround_verifier(tiny):
    curve = linear_curve(base=1.0, per_token=0.05, top=16)
    policy = AdaptiveTreePolicy(topk=3, depth=3, max_total=16, curve=curve)
    sampling = SamplingParams(temperature=1.0, seed=0)
    _, result = run_adaptive(tiny, policy, torch.tensor([1, 2, 3, 4]), sampling=sampling, verifier=MultiRoundVerifier())
    assert len(result.tokens) == 30 and result.metrics.cycles >= 1


def test_methods_default_to_adaptive_and_can_force_a_size(tiny):
    target = HFTarget(tiny, max_len=256)
    adaptive = build_method("ngram", target)
    assert isinstance(adaptive.policy, AdaptiveTreePolicy)
    assert curve_path(target.model, target.device).is_file()  # measured once and cached
    fixed = build_method("ngram", target, MethodOptions(total_tokens=12))
    assert isinstance(fixed.policy, DynamicTreePolicy) and fixed.policy.total_tokens == 12
    assert fixed.policy.topk == MethodOptions().topk == DynamicTreePolicy().topk  # one set of defaults
    assert DynamicTreePolicy().total_tokens == 24 and MethodOptions().depth == DynamicTreePolicy().depth


def test_methods_sample_their_tree_at_temperature_above_zero(tiny):
    """One generator per method: at T > 0 a drafter with a real q draws the sampled tree of
    ``MethodOptions.sampled_tree``, verified by the stochastic multi-round rule; at T = 0 the same generator grows
    the adaptive dynamic tree (greedy verifier). An n-gram drafter or ``sampled_tree=None`` keep the dynamic tree at
    every temperature; a fixed size sizes the dynamic tree only (no option changes another's meaning); an unknown
    shape is refused by name."""
    target = HFTarget(tiny, max_len=256)
    hot = SamplingParams(temperature=1.0, seed=0)
    options = MethodOptions(small_lm_layers=1)
    gen = build_method("small-lm", target, options)
    policy, verifier = gen.parts_for(hot)
    assert isinstance(policy, StochasticTreePolicy) and isinstance(verifier, StochasticMultiRoundVerifier)
    assert policy.shape.paths == [tuple(p) for p in SAMPLED_SHAPES[options.sampled_tree]]
    assert verifier.max_children == 3  # r3d: three children at the root
    result = gen.generate(torch.tensor([1, 2, 3, 4]), hot, StopCondition(max_new_tokens=12))
    assert len(result.tokens) == 12 and set(result.metrics.tree_sizes) == {policy.max_nodes}
    policy, verifier = gen.parts_for(GREEDY)
    assert isinstance(policy, AdaptiveTreePolicy) and isinstance(verifier, GreedyVerifier)
    assert isinstance(build_method("ngram", target).policy.for_sampling(hot), AdaptiveTreePolicy)
    unsampled = options.replace(sampled_tree=None)
    assert isinstance(build_method("small-lm", target, unsampled).policy.for_sampling(hot), AdaptiveTreePolicy)
    fixed = build_method("small-lm", target, options.replace(total_tokens=8))
    assert isinstance(fixed.parts_for(hot)[0], StochasticTreePolicy)  # the sampled tree stays at T > 0
    policy, verifier = fixed.parts_for(GREEDY)
    assert isinstance(policy, DynamicTreePolicy) and policy.total_tokens == 8
    policy, verifier = build_method("small-lm", target, unsampled.replace(total_tokens=8)).parts_for(hot)
    assert isinstance(policy, DynamicTreePolicy) and isinstance(verifier, MultiRoundVerifier)
    with pytest.raises(ValueError, match="unknown sampled tree 'nope'; choose from chain2"):
        MethodOptions(sampled_tree="nope")


def reference_choose_budget(curve, values, depths=None, max_total=None, min_total=2, fixed=0.0, step=0.0):
    """The choice written as one loop over depth cuts (the definition :func:`choose_budget` vectorises)."""
    probs = sorted(
        (
            (min(1.0, math.exp(v)) if v == v else 0.0, d, i)
            for i, (v, d) in enumerate(zip(values, depths or [1] * len(values), strict=True))
        ),
        key=lambda t: (-t[0], t[2]),
    )
    n = len(probs)
    hi = min(max_total if max_total is not None else n + 1, n + 1)
    lo = max(1, min(min_total, hi))
    best = None
    for d in range(1, max((p[1] for p in probs), default=0) + 1) if depths is not None else [None]:
        kept = [p for p in probs if d is None or p[1] <= d]
        extra = fixed + (d * step if d is not None else 0.0)
        for m in range(lo, min(len(kept) + 1, hi) + 1):
            tau = 1.0 + math.fsum(p[0] for p in kept[: m - 1])
            rate = tau / (curve.cost(m) + extra)
            if best is None or rate > best[0] * (1 + 1e-9):
                best = (rate, m, max((p[1] for p in kept[: m - 1]), default=0))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_choice_equals_the_loop_over_depth_cuts(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(0, 30, (1,), generator=g))
    values = (torch.rand(n, generator=g) * -6).tolist()
    depths = torch.randint(1, 6, (n,), generator=g).tolist()
    curve = linear_curve(base=float(torch.rand(1, generator=g)) + 0.1, per_token=float(torch.rand(1, generator=g)))
    step, fixed = float(torch.rand(1, generator=g)), float(torch.rand(1, generator=g))
    max_total = int(torch.randint(0, 40, (1,), generator=g))
    min_total = 1 + seed % 3
    if n and seed % 4 == 0:
        values[0] = float("nan")  # a NaN value counts as probability 0
    for deps in (None, depths):
        kw = dict(max_total=max_total, min_total=min_total, fixed_seconds=fixed)
        got = choose_budget(curve, values, depths=deps, step_seconds=step, **kw)
        want = reference_choose_budget(curve, values, deps, max_total, min_total, fixed=fixed, step=step)
        if want is None:
            assert got.total_tokens == 1
            continue
        assert got.expected_tokens_per_second == pytest.approx(want[0], rel=1e-9)
        assert got.total_tokens == want[1]
        if deps is not None:
            assert got.depth == want[2]
    # the deepest cut with every level's drafting time is the choice over the whole pool
    per_depth = budgets_by_depth(curve, values, depths, max_total, min_total, fixed_seconds=fixed, step_seconds=step)
    if per_depth and per_depth[-1] is not None:
        whole = choose_budget(
            curve, values, max_total=max_total, min_total=min_total, fixed_seconds=fixed + max(depths) * step
        )
        assert (per_depth[-1].total_tokens, per_depth[-1].expected_tau) == (whole.total_tokens, whole.expected_tau)


def test_a_noisy_probe_is_measured_again_and_never_trusted(tiny, monkeypatch):
    """A probe whose times dip with more tokens (a busy machine; once it sized every adaptive tree of a Zen 3 for a
    forward twice as cheap as it was) runs again; one that keeps dipping is kept flattened, marked noisy, with a
    warning, and measured again when next used instead of being read back."""

    target = HFTarget(tiny, max_len=128)
    dipping, steady = [0.010, 0.012, 0.009, 0.020], [0.010, 0.011, 0.012, 0.020]  # 4 tokens 25 % faster than 2
    calls = []

    def probe(answers):
        def run(target, sizes, trees, repeats):
            calls.append(1)
            return list(answers[min(len(calls), len(answers)) - 1])

        return run

    monkeypatch.setattr(cost_probe, "probe", probe([dipping, steady]))
    curve = measure_forward_cost(target, sizes=(1, 2, 4, 8), repeats=1, context=16)
    assert len(calls) == 2 and curve.seconds == tuple(steady) and not curve.meta["noisy"]
    calls.clear()
    busy = [dipping, [0.012, 0.016, 0.010, 0.021], [0.011, 0.013, 0.0095, 0.024]]  # dips that move between tries
    monkeypatch.setattr(cost_probe, "probe", probe(busy))
    with pytest.warns(UserWarning, match="the forward-cost probe is noisy on this machine: a tree of 4 tokens"):
        curve = measure_forward_cost(target, sizes=(1, 2, 4, 8), repeats=1, context=16)
    assert len(calls) == cost_probe.PROBE_ATTEMPTS and curve.meta["noisy"]
    assert curve.seconds == (0.011, 0.013, 0.013, 0.024)  # the last try, flattened
    calls.clear()
    monkeypatch.setattr(cost_probe, "probe", probe([steady]))
    again = forward_cost_curve(target, sizes=(1, 2, 4, 8), repeats=1, context=16)
    assert calls and again.seconds == tuple(steady) and not again.meta["noisy"]  # measured again, not read back
    calls.clear()
    assert forward_cost_curve(target) == again and not calls  # a steady curve is read back


def test_a_dip_every_try_repeats_is_the_machines_and_kept(tiny, monkeypatch):
    """A dip that every try times alike (within DIP_TOLERANCE at every size) is not a busy spell: on the 2026-11-30
    H200 a 16-token forward took 7.5-7.8 ms and a 24-token one 4.7-5.0 ms in all six probes (each after three tries
    that dipped), and each probe was flagged noisy, so every method of the bench measured the curve again. It is kept
    (flattened), not noisy, with no warning, and read back next time."""
    import warnings

    target = HFTarget(tiny, max_len=128)
    tries = [[0.010, 0.012, 0.009, 0.020], [0.0105, 0.0125, 0.0092, 0.0205], [0.0102, 0.0121, 0.0091, 0.0198]]
    calls = []

    def probe(target, sizes, trees, repeats):
        calls.append(1)
        return list(tries[len(calls) - 1])

    monkeypatch.setattr(cost_probe, "probe", probe)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        curve = forward_cost_curve(target, refresh=True, sizes=(1, 2, 4, 8), repeats=1, context=16)
    assert len(calls) == cost_probe.PROBE_ATTEMPTS and not curve.meta["noisy"] and curve.meta["steady_dip"] == 4
    assert curve.seconds == (0.0102, 0.0121, 0.0121, 0.020)  # each size's median over the tries, flattened
    calls.clear()
    assert forward_cost_curve(target, sizes=(1, 2, 4, 8), repeats=1, context=16) == curve and not calls

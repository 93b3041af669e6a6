"""The kit says what it could have caught: exact pipeline laws, planted bugs, power and coverage."""

from __future__ import annotations

import pytest
import torch

from specdec import DynamicTreePolicy, HFTarget, NGramDrafter, SamplingParams, SpeculativeGenerator
from specdec.models import tiny_llama
from specdec.testing import VerifyCase, assert_lossless_exact, e2e_check
from specdec.testing.broken import (
    BonusFromParentRowVerifier,
    ResidualNotRenormalisedVerifier,
    SharedCoinsVerifier,
    WrongTemperatureQVerifier,
)
from specdec.testing.controls import CONTROLS, applicable_controls
from specdec.testing.coverage import node_events
from specdec.testing.e2e import exact_sequence_distribution
from specdec.testing.pipeline import NotEnumerableError, pipeline_law
from specdec.testing.power import g_test_power
from specdec.tree import DraftTree
from specdec.trees import StaticTreePolicy, StochasticTreePolicy
from specdec.verify import MultiRoundVerifier
from specdec.verify.plan import VerifyPlan
from specdec.verify.walk import end_nodes

PROMPT = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
HOT = SamplingParams(temperature=1.0)  # every token has p > 0: later siblings carry probability
CUT = SamplingParams(temperature=1.0, top_k=3)  # the issue's setting: siblings outside the top 3 have p = 0


def _model():
    return tiny_llama(vocab_size=6, hidden_size=16, num_layers=2, logit_scale=1.5, seed=1)


def _pipeline(model, verifier=None, policy=None) -> SpeculativeGenerator:
    policy = policy or DynamicTreePolicy(topk=2, depth=3, total_tokens=6)
    return SpeculativeGenerator(HFTarget(model, max_len=64), NGramDrafter(6), policy, verifier)


F64 = torch.float64


def _tree(parents: list[int], tokens: list[int]) -> DraftTree:
    return DraftTree.from_parents(torch.tensor(tokens), torch.tensor(parents), max_depth=2)


def _sto_case(p_root: list[float], q_root: list[float], parents=(-1, 0, 0), temperature: float = 1.0) -> VerifyCase:
    """V=3, D=1, children drawn from q under the root (tests/test_verify_exact.py's case)."""
    logits = (torch.log(torch.tensor(p_root, dtype=F64)), torch.tensor([[0.0, 1.0, 2.0]] * 3, dtype=F64))
    q = (torch.tensor(q_root, dtype=F64), torch.full((3, 3), 1 / 3, dtype=F64))
    return VerifyCase(logits, parents, SamplingParams(temperature=temperature), draft_probs=q)


def test_pipeline_law_is_the_target_law_and_a_bug_moves_it() -> None:
    """The enumeration through the loop reproduces the target's law for correct pipelines (deterministic tree at
    T = 1 and T = 0.7 with top-k, a chain under block verification, greedy), and not with a planted bug."""
    model = _model()
    cases = [
        (HOT, None),
        (SamplingParams(temperature=0.7, top_k=3), None),
        (SamplingParams(temperature=0.0), None),
        (HOT, StaticTreePolicy.chain(3)),
    ]
    for sampling, policy in cases:
        law = pipeline_law(_pipeline(model, policy=policy), PROMPT, sampling, 3)
        exact = exact_sequence_distribution(model, PROMPT, sampling, 3)
        assert float((law.law - exact).abs().max()) < 1e-6, sampling
        assert law.replays > 0 and law.coverage.per_run("cycles") > 0
    bugged = pipeline_law(_pipeline(model, ResidualNotRenormalisedVerifier()), PROMPT, HOT, 3)
    assert float((bugged.law - exact_sequence_distribution(model, PROMPT, HOT, 3)).abs().max()) > 1e-4


def test_sampled_trees_are_not_enumerated() -> None:
    decoder = _pipeline(_model(), policy=StochasticTreePolicy([[0], [1], [0, 0]]))
    try:
        pipeline_law(decoder, PROMPT, HOT, 3)
    except NotEnumerableError as e:
        assert "sampled tree" in str(e)
    else:
        raise AssertionError("a sampled tree was enumerated")


@pytest.mark.heavy  # 23 s; the README's test command runs the same case through examples/prove_verifier.py
def test_the_issues_case_is_never_a_plain_pass() -> None:
    """Issue: a top-k-3 pipeline with ResidualNotRenormalisedVerifier swapped in passed like the correct one. The
    kit now says it has no power there (the bug cannot change this pipeline's law) and, without the top-k cut, finds
    the bug exactly although the G-test alone (p > level at n = 300) does not."""
    model = _model()
    only = ["ResidualNotRenormalisedVerifier"]
    cut = e2e_check(_pipeline(model, ResidualNotRenormalisedVerifier()), model, PROMPT, CUT, 300, controls=only)
    assert cut.p_value > cut.level and cut.power is not None and cut.power.mode == "exact"
    assert "ResidualNotRenormalisedVerifier" in cut.verdict and cut.verdict.startswith("NO POWER")
    row = next(r for r in cut.power.controls if r.control.name == "ResidualNotRenormalisedVerifier")
    assert row.unchanged and row.path_per_run > 0 and "top-k" in row.describe(300)
    hot = e2e_check(_pipeline(model, ResidualNotRenormalisedVerifier()), model, PROMPT, HOT, 300, controls=only)
    assert hot.p_value > hot.level  # the G-test alone misses it at this n ...
    assert hot.verdict == "FAIL" and hot.power.pipeline_max_diff > 1e-4  # ... the exact law does not
    assert hot.summary().startswith("FAIL (the pipeline's exact law differs")  # and the headline says which failed
    good = e2e_check(_pipeline(model), model, PROMPT, HOT, n_samples=300)
    assert good.passed and good.power.pipeline_max_diff < 1e-6
    caught = {r.control.name for r in good.power.controls if r.caught}
    assert {"ResidualNotRenormalisedVerifier", "SharedCoinsVerifier", "BonusFromParentRowVerifier"} <= caught
    assert "SharedCoinsVerifier" in good.summary() and "coverage per run" in good.summary()


@pytest.mark.heavy  # 16 s on an Intel Xeon (family 6 model 106): CI's second step; the quick suite keeps the power rows
def test_cache_compaction_needs_a_later_cycle() -> None:
    """IndexOrderCompactionTarget shows only in a cycle after one that accepted a later sibling: no power on 3
    tokens (with the hint to compare more), caught exactly on 4."""
    model = _model()
    three = e2e_check(_pipeline(model), model, PROMPT, HOT, 100, controls=["IndexOrderCompactionTarget"])
    assert three.power.powerless == ["IndexOrderCompactionTarget"] and "more tokens" in three.summary()
    four = e2e_check(_pipeline(model), model, PROMPT, HOT, 100, n_tokens=4, controls=["IndexOrderCompactionTarget"])
    assert four.power.powerless == [] and four.verdict == "pass"


@pytest.mark.heavy  # 12 s there; exact mode's controls run in the quick suite (test_new_controls_are_caught_exactly)
def test_sampled_mode_runs_each_control_through_the_loop() -> None:
    model = _model()
    decoder = _pipeline(model, policy=StochasticTreePolicy([[0], [1], [0, 0]]))
    report = e2e_check(decoder, model, PROMPT, SamplingParams(temperature=1.5), 400, controls=["IgnoresQVerifier"])
    assert report.power.mode.startswith("sampled") and report.passed
    (row,) = report.power.controls
    assert row.caught and row.p_value <= report.level and report.verdict == "pass"
    assert report.coverage.per_run("later_siblings") > 0


def test_applicable_controls_follow_the_tree_and_sampling() -> None:
    model = _model()
    names = {c.name for c in applicable_controls(_pipeline(model), HOT)}
    assert "ResidualNotRenormalisedVerifier" in names and "StaleQVerifier" not in names
    assert "OneSidedWarpVerifier" not in names  # T = 1 without top-k/top-p: the warp is the identity
    greedy = {c.name for c in applicable_controls(_pipeline(model), SamplingParams())}
    assert "GreedyBonusOffByOneVerifier" in greedy and "SharedCoinsVerifier" not in greedy
    sampled = _pipeline(model, policy=StochasticTreePolicy([[0], [1]]))
    names = {c.name for c in applicable_controls(sampled, SamplingParams(temperature=0.7))}
    assert {"StaleQVerifier", "WrongTemperatureQVerifier"} <= names
    assert len({c.name for c in CONTROLS}) == len(CONTROLS)


def test_shared_coins_stop_law_is_its_walk() -> None:
    """SharedCoinsVerifier.stop_law (used by the exact enumeration) is the law of its own walk: one coin compared
    with every accept probability, checked on a fine grid of coins."""
    tree = _tree([-1, 0, 0, 1, 1, 2], [0, 1, 2, 3, 4, 5])
    accept = torch.tensor([1.0, 0.3, 0.6, 0.5, 0.9, 0.2], dtype=torch.float64)
    plan = VerifyPlan(accept_prob=accept, residual=torch.full((6, 6), 1 / 6, dtype=torch.float64))
    law = SharedCoinsVerifier.stop_law(tree, plan)
    coins = (torch.arange(100_000, dtype=torch.float64) + 0.5) / 100_000
    grid = torch.bincount(end_nodes(tree, coins[:, None] < accept[None, :]), minlength=6).double() / coins.numel()
    assert torch.allclose(law, grid, atol=1e-4) and abs(float(law.sum()) - 1.0) < 1e-12


def test_node_events() -> None:
    """Root with children 1, 2; node 1 with children 3, 4; node 2 with child 5."""
    ev = node_events(_tree([-1, 0, 0, 1, 1, 2], [0, 1, 2, 3, 4, 5]))
    assert ev["rejections"].tolist() == [1, 1, 1, 0, 1, 1]  # node 3: first child of a first child, a leaf
    assert ev["later_siblings"].tolist() == [1, 1, 1, 0, 1, 1]
    assert ev["residual_bonuses"].tolist() == [1, 1, 1, 0, 0, 0]
    assert ev["deep_stops"].tolist() == [0, 1, 1, 1, 1, 1]
    assert ev["off_index_paths"].tolist() == [0, 0, 1, 1, 1, 1]  # path 0-2 is not nodes 0, 1
    assert ev["multi_tests"].tolist() == [1, 1, 1, 1, 1, 1]


def test_g_test_power_controls() -> None:
    """Power of a lossless law is the level (no more than the false-positive rate); of a far law, 1."""
    exact = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    assert g_test_power(exact, exact, 1000, 0.01, sims=400) <= 0.03
    assert g_test_power(torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64), exact, 1000, 0.01) == 1.0
    assert (
        g_test_power(
            torch.tensor([0.5, 0.29, 0.2, 0.01], dtype=torch.float64),
            torch.cat([exact, exact.new_zeros(1)]),
            1000,
            1e-3,
        )
        == 1.0
    )


def test_new_controls_are_caught_exactly() -> None:
    """WrongTemperatureQVerifier by the exact cycle suite at T != 1 (and harmless at T = 1); BonusFromParentRow
    and SharedCoins by the exact pipeline law (above, test_the_issues_case_is_never_a_plain_pass)."""
    case = _sto_case([0.1, 0.5, 0.4], [0.5, 0.3, 0.2], parents=(-1, 0, 0), temperature=0.5)
    try:
        assert_lossless_exact(WrongTemperatureQVerifier(F64), [case])
    except AssertionError as e:
        assert "not lossless" in str(e)
    else:
        raise AssertionError("WrongTemperatureQVerifier passed at T = 0.5")
    assert_lossless_exact(WrongTemperatureQVerifier(F64), [_sto_case([0.1, 0.5, 0.4], [0.5, 0.3, 0.2], (-1, 0, 0))])
    model = _model()
    for bug in (BonusFromParentRowVerifier(MultiRoundVerifier()), SharedCoinsVerifier(MultiRoundVerifier())):
        law = pipeline_law(_pipeline(model, bug), PROMPT, HOT, 3).law
        assert float((law - exact_sequence_distribution(model, PROMPT, HOT, 3)).abs().max()) > 1e-4, bug


def test_every_planted_bug_is_a_control() -> None:
    """Each bug of specdec.testing.broken can be planted by the kit, except the traversal ones: no policy's trees are
    verified by TraversalVerifier unless pinned (their controls are caught in tests/test_verify_exact.py); and the
    peeking level gate, a tree policy, where the kit plants verifiers and targets into the caller's pipeline (it is
    caught in tests/test_level_gate.py)."""
    from specdec.testing import broken

    planted = {c.name for c in CONTROLS}
    unplanted = {"TraversalStaleQVerifier", "TraversalStaleWeightVerifier", "PeekingGatePolicy"}
    assert set(broken.__all__) - planted == unplanted


def test_reversed_sibling_order_is_caught() -> None:
    """Child order: caught exactly on sampled siblings by the cycle suite and on a deterministic tree by the
    pipeline law; harmless on a single child."""
    from specdec.testing.broken import ReversedSiblingsVerifier
    from specdec.verify import StochasticMultiRoundVerifier

    sto = StochasticMultiRoundVerifier(F64)
    try:
        assert_lossless_exact(ReversedSiblingsVerifier(sto), [_sto_case([0.1, 0.5, 0.4], [0.5, 0.3, 0.2])])
    except AssertionError as e:
        assert "not lossless" in str(e)
    else:
        raise AssertionError("ReversedSiblingsVerifier passed on two sampled siblings")
    assert_lossless_exact(ReversedSiblingsVerifier(sto), [_sto_case([0.1, 0.5, 0.4], [0.5, 0.3, 0.2], (-1, 0))])
    model = _model()
    law = pipeline_law(_pipeline(model, ReversedSiblingsVerifier(MultiRoundVerifier())), PROMPT, HOT, 3).law
    assert float((law - exact_sequence_distribution(model, PROMPT, HOT, 3)).abs().max()) > 1e-4


def test_what_cannot_be_enumerated_falls_back_to_sampling() -> None:
    """Trees past the walk's enumeration limit, and a verifier whose verify() is not the shared walk (without a
    stop_law), are sampled instead of enumerated; a single control may be named as a string."""
    from specdec.testing.pipeline import enumerable

    class OwnWalk(MultiRoundVerifier):
        def verify(self, tree, target_logits, sampling, generator):
            return super().verify(tree, target_logits, sampling, generator)

    model = _model()
    assert "overrides verify()" in enumerable(_pipeline(model, OwnWalk()), HOT)
    big = _pipeline(model, policy=DynamicTreePolicy(topk=4, depth=4, total_tokens=20))
    assert "nodes" in enumerable(big, HOT)
    report = e2e_check(big, model, PROMPT, HOT, 60, controls="SharedCoinsVerifier")
    assert report.power.mode.startswith("sampled") and [r.control.name for r in report.power.controls] == [
        "SharedCoinsVerifier"
    ]


def test_settings_that_decide_the_outcome_are_refused() -> None:
    """No samples gave a "pass" and alpha = 0 passed anything; a precomputed law of the wrong shape was used as is."""
    model = _model()
    for kwargs, message in (
        ({"n_samples": 0}, "n_samples must be"),
        ({"n_samples": 50, "alpha": 0.0}, "alpha must be"),
        ({"n_samples": 50, "n_tests": 0}, "n_tests must be"),
        ({"n_samples": 50, "exact": torch.full((6, 6), 1 / 36)}, "exact must be"),
    ):
        with pytest.raises(ValueError, match=message):
            e2e_check(_pipeline(model), model, PROMPT, HOT, **kwargs)

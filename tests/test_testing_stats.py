"""The statistical checks: G-test arithmetic, calibration and power, and black-box verifier checks.

False-positive budget of this file: the checks of correct verifiers form one Bonferroni family at alpha = 1e-3
(each check at 1e-3 / 6), so for a random choice of seeds they would wrongly fail with probability <= 1e-3; at
the fixed seeds used here they are deterministic.
"""

from __future__ import annotations

import math

import pytest
import torch

from specdec.interfaces import Verdict, Verifier
from specdec.sampling import SamplingParams, sample, warp
from specdec.testing import (
    VerifyCase,
    assert_same_distribution,
    empirical_verify_check,
    g_test,
    sample_cycle_outputs,
    target_distribution,
)
from specdec.testing.broken import (
    IgnoresQVerifier,
    OneSidedWarpVerifier,
    OnlyZeroRejectedResidualVerifier,
    ResidualNotRenormalisedVerifier,
    StaleQVerifier,
)
from specdec.verify import ChainVerifier, GreedyVerifier, MultiRoundVerifier, StochasticMultiRoundVerifier

F64 = torch.float64
N_SAMPLES = 2000

# ------------------------------------------------------------------------------------------------ g_test


def _g(counts: list[float], expected: list[float]) -> float:
    return 2 * sum(o * math.log(o / e) for o, e in zip(counts, expected, strict=True) if o > 0)


def test_g_test_matches_closed_forms() -> None:
    # df = 1: chi-square survival is erfc(sqrt(x / 2)); df = 2: exp(-x / 2).
    g1 = _g([30, 70], [50, 50])
    assert g_test(torch.tensor([30, 70]), torch.tensor([0.5, 0.5])) == pytest.approx(math.erfc(math.sqrt(g1 / 2)))
    g2 = _g([10, 40, 50], [20, 30, 50])
    assert g_test(torch.tensor([10, 40, 50]), torch.tensor([0.2, 0.3, 0.5])) == pytest.approx(math.exp(-g2 / 2))
    assert g_test(torch.tensor([20, 30, 50]), torch.tensor([2.0, 3.0, 5.0])) == pytest.approx(1.0)  # normalised


def test_g_test_pools_small_cells() -> None:
    # Expected (50, 45, 3, 2): the two small cells pool into one cell with expected 5 -> df = 2.
    p = g_test(torch.tensor([50, 40, 6, 4]), torch.tensor([0.5, 0.45, 0.03, 0.02], dtype=F64))
    assert p == pytest.approx(math.exp(-_g([50, 40, 10], [50, 45, 5]) / 2))
    # Expected (60, 38, 1, 1): the pool (2) is still small and joins the smallest big cell -> df = 1.
    p = g_test(torch.tensor([55, 40, 3, 2]), torch.tensor([0.6, 0.38, 0.01, 0.01], dtype=F64))
    assert p == pytest.approx(math.erfc(math.sqrt(_g([55, 45], [60, 40]) / 2)))


def test_g_test_edge_cases() -> None:
    assert g_test(torch.tensor([5, 1, 0]), torch.tensor([0.5, 0.0, 0.5])) == 0.0  # impossible outcome observed
    assert g_test(torch.tensor([5, 0, 5]), torch.tensor([0.5, 0.0, 0.5])) == pytest.approx(1.0)
    assert g_test(torch.tensor([0, 0]), torch.tensor([0.5, 0.5])) == 1.0  # no observations
    assert g_test(torch.tensor([7, 0]), torch.tensor([1.0, 0.0])) == 1.0  # a single possible cell
    with pytest.raises(ValueError):
        g_test(torch.tensor([1, 2]), torch.tensor([0.5, 0.25, 0.25]))


def test_g_test_is_calibrated_and_powerful() -> None:
    """Under H0 the p-values are close to uniform (false-positive rate ~ alpha); a 0.1 shift is always found."""
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01], dtype=F64)
    p_values = torch.tensor(
        [
            g_test(torch.bincount(torch.multinomial(probs, 400, True, generator=gen), minlength=10), probs)
            for _ in range(400)
        ]
    )
    assert 0.02 <= float((p_values < 0.05).double().mean()) <= 0.09
    assert float((p_values < 0.01).double().mean()) <= 0.03
    assert 0.44 <= float(p_values.mean()) <= 0.56
    shifted = probs.clone()
    shifted[0] -= 0.1
    shifted[1] += 0.1
    for _ in range(20):
        counts = torch.bincount(torch.multinomial(shifted, 2000, True, generator=gen), minlength=10)
        assert g_test(counts, probs) < 1e-3


def test_assert_same_distribution_uses_bonferroni() -> None:
    samples = torch.tensor([0] * 40 + [1] * 60)  # G-test p-value ~0.045 against (0.5, 0.5)
    probs = torch.tensor([0.5, 0.5])
    with pytest.raises(AssertionError, match="p-value"):
        assert_same_distribution(samples, probs, alpha=0.05, n_tests=1)
    assert 0.025 < assert_same_distribution(samples, probs, alpha=0.05, n_tests=2) < 0.05
    with pytest.raises(ValueError):
        assert_same_distribution(torch.tensor([2]), probs)


# ------------------------------------------------------------------------------------------------ cases

ROWS = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]], dtype=F64)
Q_ROWS = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]], dtype=F64)


def _tables(root: list[float], rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """V = 3, D = 2 probability tables: ``root`` after the empty prefix, then fixed rows."""
    return (torch.tensor(root, dtype=F64), rows, torch.stack([rows.roll(i, 0) for i in range(3)]))


def _det(
    p_root: list[float], parents: tuple[int, ...], tokens: tuple[int, ...], sampling: SamplingParams
) -> VerifyCase:
    logits = tuple(torch.log(t) for t in _tables(p_root, ROWS))
    return VerifyCase(logits, parents, sampling, tokens=tokens, name=f"det{parents}")


def _sto(p_root: list[float], q_root: list[float], parents: tuple[int, ...], temperature: float = 1.0) -> VerifyCase:
    logits = tuple(torch.log(t) for t in _tables(p_root, ROWS))
    q = _tables(q_root, Q_ROWS)
    return VerifyCase(logits, parents, SamplingParams(temperature=temperature), draft_probs=q, name=f"sto{parents}")


T1 = SamplingParams(temperature=1.0)
TREE = (-1, 0, 0, 1)  # root -> {1, 2}, 1 -> {3}


class _VanillaVerifier(Verifier):
    """Not a PlanVerifier: rejects everything and samples the root's p directly (a black box)."""

    def verify(self, tree, target_logits, sampling, generator) -> Verdict:
        accepted = torch.full((tree.max_depth + 1,), -1, dtype=torch.long)
        accepted[0] = 0
        bonus = sample(warp(target_logits[0], sampling), generator)
        return Verdict(accepted, torch.zeros((), dtype=torch.long), bonus)


CORRECT = [
    (MultiRoundVerifier(), _det([0.45, 0.45, 0.1], TREE, (0, 0, 1, 0), SamplingParams(temperature=0.8, top_k=2))),
    (StochasticMultiRoundVerifier(), _sto([0.1, 0.6, 0.3], [0.6, 0.1, 0.3], TREE)),
    (ChainVerifier(), _sto([0.1, 0.6, 0.3], [0.6, 0.1, 0.3], (-1, 0, 1), temperature=1.5)),
    (ChainVerifier(), _det([0.5, 0.3, 0.2], (-1, 0, 1), (0, 1, 2), T1)),
    (GreedyVerifier(), _det([0.2, 0.3, 0.5], TREE, (0, 2, 1, 0), SamplingParams(temperature=0.0))),
    (_VanillaVerifier(), _det([0.5, 0.3, 0.2], TREE, (0, 0, 1, 0), SamplingParams(temperature=0.7, top_p=0.9))),
]


@pytest.mark.parametrize(("verifier", "case"), CORRECT, ids=[type(v).__name__ for v, _ in CORRECT])
def test_correct_verifiers_pass_the_statistical_check(verifier: Verifier, case: VerifyCase) -> None:
    empirical_verify_check(verifier, case, n_samples=N_SAMPLES, seed=11, alpha=1e-3 / len(CORRECT))


BROKEN = [
    (ResidualNotRenormalisedVerifier(), _det([0.45, 0.45, 0.1], TREE, (0, 0, 1, 0), T1)),
    (OnlyZeroRejectedResidualVerifier(), _sto([0.1, 0.6, 0.3], [0.6, 0.1, 0.3], (-1, 0))),
    (IgnoresQVerifier(), _sto([0.8, 0.15, 0.05], [0.8, 0.15, 0.05], (-1, 0, 1))),
    (StaleQVerifier(), _sto([0.01, 0.09, 0.9], [0.97, 0.02, 0.01], (-1, 0, 0))),
    (OneSidedWarpVerifier(), _det([0.5, 0.3, 0.2], TREE, (0, 0, 1, 0), SamplingParams(temperature=0.3))),
]


@pytest.mark.parametrize(("verifier", "case"), BROKEN, ids=[type(v).__name__ for v, _ in BROKEN])
def test_broken_verifiers_fail_the_statistical_check(verifier: Verifier, case: VerifyCase) -> None:
    with pytest.raises(AssertionError, match="p-value"):
        empirical_verify_check(verifier, case, n_samples=1000, seed=11, alpha=1e-3)


def test_sample_cycle_outputs_shapes_and_greedy_sequence() -> None:
    case = _det([0.2, 0.3, 0.5], TREE, (0, 2, 1, 0), SamplingParams(temperature=0.0))
    seqs = sample_cycle_outputs(GreedyVerifier(), case, n_samples=5, seed=0)
    assert seqs.shape == (5, 3) and seqs.dtype == torch.long
    (greedy_seq,) = target_distribution(case).nonzero().tolist()  # T=0: a point mass
    assert all(row == greedy_seq for row in seqs.tolist())
    # Sampled outputs cover several sequences, all of positive exact probability.
    case = _det([0.45, 0.45, 0.1], TREE, (0, 0, 1, 0), T1)
    seqs = sample_cycle_outputs(MultiRoundVerifier(), case, n_samples=200, seed=1)
    target = target_distribution(case)
    assert all(float(target[tuple(row)]) > 0 for row in seqs.tolist())
    assert len({tuple(row) for row in seqs.tolist()}) > 5


# ------------------------------------------------------------------------------------------------ settings that decide


@pytest.mark.parametrize("alpha", [0.0, -1.0, 1.0, 2.0, float("nan")])
def test_a_level_outside_zero_one_is_refused(alpha: float) -> None:
    """alpha <= 0 never rejects (a wrong verifier passed at alpha = 0) and alpha >= 1 always does."""
    case = _det([0.45, 0.45, 0.1], TREE, (0, 0, 1, 0), T1)
    with pytest.raises(ValueError, match="alpha must be"):
        empirical_verify_check(ResidualNotRenormalisedVerifier(), case, n_samples=50, alpha=alpha)
    with pytest.raises(ValueError, match="alpha must be"):
        assert_same_distribution(torch.tensor([0, 1]), torch.tensor([0.5, 0.5]), alpha=alpha)


def test_no_samples_or_no_tests_are_refused() -> None:
    case = _det([0.45, 0.45, 0.1], TREE, (0, 0, 1, 0), T1)
    for n in (0, -3):
        with pytest.raises(ValueError, match="n_samples must be"):
            empirical_verify_check(MultiRoundVerifier(), case, n_samples=n)
    with pytest.raises(ValueError, match="n_tests must be"):
        assert_same_distribution(torch.tensor([0, 1]), torch.tensor([0.5, 0.5]), n_tests=0)
    with pytest.raises(ValueError, match="no samples"):
        assert_same_distribution(torch.tensor([], dtype=torch.long), torch.tensor([0.5, 0.5]))


class _BadVerdictVerifier(Verifier):
    """Returns a verdict that breaks the contract in one chosen way (the check must say which)."""

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def verify(self, tree, target_logits, sampling, generator) -> Verdict:
        accepted = torch.full((tree.max_depth + 1,), -1, dtype=torch.long)
        accepted[0] = 0
        length, bonus = torch.zeros((), dtype=torch.long), torch.tensor(0)
        if self.fault == "bonus":
            bonus = torch.tensor(tree.q_dist.shape[-1] if tree.q_dist is not None else 99)
        elif self.fault == "not-a-child":  # node 3's parent is 1, not the root
            accepted[1], length = 3, torch.ones((), dtype=torch.long)
        elif self.fault == "short":
            accepted = accepted[:1]
        return Verdict(accepted, length, bonus)


@pytest.mark.parametrize(
    ("fault", "message"),
    [("bonus", "bonus token"), ("not-a-child", "not a child"), ("short", "entries")],
)
def test_a_verdict_that_breaks_its_contract_fails_the_check_by_name(fault: str, message: str) -> None:
    case = _det([0.45, 0.45, 0.1], TREE, (0, 0, 1, 0), T1)
    with pytest.raises(AssertionError, match=f"invalid verdict: .*{message}"):
        empirical_verify_check(_BadVerdictVerifier(fault), case, n_samples=10)


def test_a_target_function_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match=r"returned shape \(4,\); vocab_size=3"):
        VerifyCase.from_functions(lambda prefix: torch.zeros(4), vocab_size=3, parents=(-1, 0), sampling=T1)

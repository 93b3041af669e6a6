"""The native forms of sampling's small per-cycle steps (:mod:`specdec.backends.native`): the sampled trees'
verification plan (``specdec::multiround_plan``, :mod:`specdec.verify.native`) and the inverse-CDF draws
(``specdec::sample_rows`` behind :func:`specdec.sampling.sample` and :func:`specdec.sampling.sample_distinct`).

Each is proven the way its tensor form is, and held to it: the exact suite enumerates the verifiers on the native plan
in float64 (a control that judges point masses as draws through the same kernel is caught), the plan's stop law and
bonus rows equal the tensor plan's, and the draws are the tensor form's indices bit for bit from the same generator.
Marked heavy: the first use builds the kernel library (the suite's other tests keep it out, ``SPECDEC_SKINNY=off``).
"""

from __future__ import annotations

import os
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.backends.native import runs_native
from specdec.sampling import sample, sample_distinct
from specdec.testing import VerifyCase, assert_lossless_exact
from specdec.testing.exact import stop_probabilities
from specdec.tree import DraftTree
from specdec.verify import MixedMultiRoundVerifier, StochasticMultiRoundVerifier
from specdec.verify.mixed import mixed_multiround_plan
from specdec.verify.native import native_plan
from specdec.verify.stochastic import stochastic_multiround_plan
from tests.test_skinny import kernel, needs_kernel  # noqa: F401 (the fixture needs_kernel uses)
from tests.test_verify_exact import EXACT, sto_cases
from tests.test_verify_mixed import mixed_cases

pytestmark = [pytest.mark.heavy, needs_kernel]
F64 = torch.float64


def native(on: bool = True) -> mock._patch:
    """``SPECDEC_SKINNY`` for the block: ``auto`` runs the native forms, ``off`` the tensor ones."""
    return mock.patch.dict(os.environ, {"SPECDEC_SKINNY": "auto" if on else "off"})


class Counted:
    """Wraps :func:`native_plan` where a verifier calls it, counting the plans it served (so a test that passes
    through the tensor form by mistake fails instead)."""

    def __init__(self) -> None:
        self.served = 0

    def __call__(self, *args, **kwargs):
        plan = native_plan(*args, **kwargs)
        self.served += plan is not None
        return plan


def exact_on_native(verifier, case: VerifyCase) -> None:
    counted = Counted()
    with native(), mock.patch(f"{type(verifier).__module__}.native_plan", counted):
        assert_lossless_exact(verifier, [case])
    assert counted.served > 0


@EXACT
@given(case=mixed_cases())
def test_the_mixed_verifier_on_the_native_plan_is_exactly_lossless(case: VerifyCase) -> None:
    exact_on_native(MixedMultiRoundVerifier(F64), case)


@EXACT
@given(case=sto_cases())
def test_the_stochastic_verifier_on_the_native_plan_is_exactly_lossless(case: VerifyCase) -> None:
    exact_on_native(StochasticMultiRoundVerifier(F64), case)


class PointsAsDraws(MixedMultiRoundVerifier):
    """Negative control: the native plan told that every child is a draw (the point masses judged against q)."""

    def plan(self, tree, target_logits, sampling):
        from specdec.sampling import warp

        p = warp(target_logits, sampling, self.dtype)
        return native_plan(tree, p, tree.q_dist.to(p.dtype), None, self.max_children)


def test_the_native_control_is_caught_on_a_fixed_case() -> None:
    """The point-mass flags reach the kernel: the same kernel told that the point mass is a draw is caught by the exact
    suite on a case where that changes the law (the verifier itself passes on it)."""
    v = 3
    q = (torch.tensor([0.6, 0.3, 0.1], dtype=F64), torch.full((v, v), 1 / v, dtype=F64))
    p = (torch.tensor([0.1, 0.2, 0.7], dtype=F64), torch.full((v, v), 1 / v, dtype=F64))
    from specdec.sampling import SamplingParams

    case = VerifyCase(
        tuple(t.log() for t in p),
        (-1, 0, 0),
        SamplingParams(temperature=1.0),
        draft_probs=q,
        point_mass=(False, True, False),
        point_tokens=(torch.tensor([2, 2, 2]), torch.zeros(v, 3, dtype=torch.long)),
        name="control",
    )
    with native():
        assert_lossless_exact(MixedMultiRoundVerifier(F64), [case])
        with pytest.raises(AssertionError):
            assert_lossless_exact(PointsAsDraws(F64), [case])


def _same_law(tree: DraftTree, a, b, atol: float) -> None:
    stop = stop_probabilities(tree, a).double()
    torch.testing.assert_close(stop, stop_probabilities(tree, b).double(), rtol=0, atol=atol)
    reached = stop > 1e-9  # unreachable states' rows are rounding noise in either form
    rows_a, rows_b = a.residual_rows()[reached].double(), b.residual_rows()[reached].double()
    torch.testing.assert_close(rows_a, rows_b, rtol=0, atol=atol)


@settings(EXACT, max_examples=60)
@given(case=st.one_of(mixed_cases(), sto_cases()), width=st.sampled_from([None, 1, 2]))
def test_the_native_plan_is_the_tensor_plan(case: VerifyCase, width: int | None) -> None:
    """Float64, every enumerated tree of the case, the real width and bounds below it: the same stop law and the
    same bonus rows wherever the walk can stop (mixed plan; with no point masses also the stochastic one)."""
    from specdec.sampling import warp

    for tokens, _ in case.enumerate_trees()[:6]:
        tree, logits = case.build_tree(tokens)
        p = warp(logits, case.sampling, F64)
        q = tree.q_dist.to(F64)
        points = tree.point_mass if tree.point_mass is not None else torch.zeros(tree.num_nodes, dtype=torch.bool)
        with native():
            fast = native_plan(tree, p, q, points, width)
        _same_law(tree, fast, mixed_multiround_plan(tree, p, q, points, width), 1e-12)
        if not points.any():
            _same_law(tree, fast, stochastic_multiround_plan(tree, p, q, width), 1e-12)


def test_float32_rows_of_a_real_vocabulary_agree() -> None:
    """Float32 at SmolLM2's vocabulary (the production dtype): an ``r3d``-shaped tree with a point mass beside two
    draws, laws within 1e-6 of the float64 plan, as the tensor form is."""
    g = torch.Generator().manual_seed(3)
    vocab = 49152
    parents = torch.tensor([-1, 0, 0, 0, 1, 2])
    points = torch.tensor([False, False, True, False, False, False])
    logits = torch.randn(6, vocab, generator=g) * 3
    p = torch.softmax(logits, -1)
    q = torch.softmax(0.5 * logits + 2 * torch.randn(6, vocab, generator=g), -1)  # a draft that half knows the target
    q[3:] = 0
    top_q = q.topk(2).indices  # the likeliest draws; the point mass is the target's argmax
    tokens = torch.stack([top_q[0, 0], top_q[0, 0], p[0].argmax(), top_q[0, 1], top_q[1, 0], top_q[2, 0]])
    tree = DraftTree.from_parents(tokens, parents, 2, q, torch.ones(6), point_mass=points)
    with native():
        fast = native_plan(tree, p, q, points)
    exact = mixed_multiround_plan(tree, p.double(), q.double(), points)
    tensor = mixed_multiround_plan(tree, p, q, points)
    assert float(stop_probabilities(tree, exact)[0]) > 0.01  # the walk stops at the root: its residual row is read
    _same_law(tree, fast, exact, 1e-6)
    _same_law(tree, tensor, exact, 1e-6)


def test_the_switch_and_the_device_decide() -> None:
    p = torch.rand(2, 5)
    with native(False):
        assert not runs_native(p)
        tree = DraftTree.from_parents(torch.tensor([0, 1]), torch.tensor([-1, 0]), 1, p, torch.ones(2))
        assert native_plan(tree, p, p) is None
    with native():
        assert runs_native(p) and runs_native(p.double())
        assert not runs_native(p.bfloat16())


@pytest.mark.parametrize(
    "change, message",
    [
        ({"parents": torch.tensor([0, 0, 1])}, "parents\\[0\\] must be -1"),
        ({"parents": torch.tensor([-1, 2, 0])}, "must lie in"),
        ({"tokens": torch.tensor([0, 9, 1])}, "outside the vocabulary"),
        ({"q": torch.rand(3, 4)}, "one shape"),
        ({"q": torch.rand(3, 5, dtype=F64)}, "one dtype"),
        ({"point_mass": torch.zeros(2, dtype=torch.bool)}, "\\[N\\] expected"),
    ],
)
def test_bad_input_is_refused_by_name(change: dict, message: str) -> None:
    args = {
        "p": torch.rand(3, 5),
        "q": torch.rand(3, 5),
        "parents": torch.tensor([-1, 0, 0]),
        "tokens": torch.tensor([0, 1, 2]),
        "point_mass": torch.zeros(3, dtype=torch.bool),
    } | change
    with native():
        from specdec.backends import skinny

        skinny.load()
        with pytest.raises(RuntimeError, match=message):
            torch.ops.specdec.multiround_plan(*args.values(), 3)


def _both(fn, seed: int = 5):
    with native(False):
        slow = fn(torch.Generator().manual_seed(seed))
    with native():
        fast = fn(torch.Generator().manual_seed(seed))
    return slow, fast


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("vocab", [1, 3, 50, 49152])
def test_the_draws_are_the_tensor_forms_bit_for_bit(dtype: torch.dtype, vocab: int) -> None:
    """``sample`` (rows, a single row) and ``sample_distinct`` give the same indices from the same generator in both
    forms, over peaked and flat rows and rows with zeros; a different seed gives different draws (the comparison
    could fail)."""
    g = torch.Generator().manual_seed(vocab)
    for scale in (0.5, 4.0, 12.0):
        probs = torch.softmax(torch.randn(4, vocab, generator=g, dtype=dtype) * scale, -1)
        probs[:, ::3] = 0 if vocab > 3 else probs[:, ::3]
        k = min(3, int((probs > 0).sum(-1).min()))
        for fn in (
            lambda gen, probs=probs: sample(probs, gen),
            lambda gen, probs=probs: sample(probs[0], gen),
            lambda gen, probs=probs, k=k: sample_distinct(probs, k, gen),
        ):
            slow, fast = _both(fn)
            assert torch.equal(slow, fast), (scale, slow, fast)
    if vocab == 49152:  # a flat row: another seed draws other indices
        flat = torch.full((4, vocab), 1.0 / vocab, dtype=dtype)
        slow, _ = _both(lambda gen: sample(flat, gen), seed=5)
        _, other = _both(lambda gen: sample(flat, gen), seed=6)
        assert not torch.equal(slow, other)


def test_the_draws_keep_the_contract_at_the_edges() -> None:
    """A zero entry is never drawn, even where the row's mass sits on one index; a row with NaN or with no positive
    entry gives ``V - 1`` (the loops check the logits for NaN), as the tensor form does."""
    g = torch.Generator().manual_seed(0)
    peaked = torch.zeros(2000, 7, dtype=F64)
    peaked[:, 3] = 1 - 1e-15
    peaked[:, 5] = 1e-15
    with native():
        drawn = sample(peaked, g)
        assert set(drawn.tolist()) <= {3, 5}
        both = sample_distinct(peaked[:50], 2, g)
        assert (both.sort(-1).values == torch.tensor([3, 5])).all()
        bad = torch.tensor([[0.2, float("nan"), 0.3], [0.0, 0.0, 0.0]])
        assert sample(bad, g).tolist() == [2, 2]
    with native(False):
        assert sample(bad, g).tolist() == [2, 2]

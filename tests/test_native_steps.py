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

from specdec.backends import skinny
from specdec.backends.native import draws, nucleus, runs_native
from specdec.sampling import SamplingParams, sample, sample_distinct, warp
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
        p = warp(target_logits, sampling, self.dtype)
        return native_plan(tree, p, tree.q_dist.to(p.dtype), None, self.max_children)


def test_the_native_control_is_caught_on_a_fixed_case() -> None:
    """The point-mass flags reach the kernel: the same kernel told that the point mass is a draw is caught by the exact
    suite on a case where that changes the law (the verifier itself passes on it)."""
    v = 3
    q = (torch.tensor([0.6, 0.3, 0.1], dtype=F64), torch.full((v, v), 1 / v, dtype=F64))
    p = (torch.tensor([0.1, 0.2, 0.7], dtype=F64), torch.full((v, v), 1 / v, dtype=F64))
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
        skinny.load()
        with pytest.raises(RuntimeError, match=message):
            torch.ops.specdec.multiround_plan(*args.values(), 3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: torch.ops.specdec.sample_rows(torch.rand(2, 3), torch.rand(2, 4, dtype=F64)), "cannot draw 4"),
        (lambda: torch.ops.specdec.sample_rows(torch.rand(2, 3), torch.rand(2, 1)), "float64"),
        (lambda: torch.ops.specdec.sample_rows(torch.rand(2, 0), torch.rand(2, 1, dtype=F64)), "V > 0"),
        (lambda: _residual(nodes=torch.tensor([3])), "outside the tree"),
        (lambda: _residual(t=torch.zeros(2)), "t \\[N\\]"),
    ],
)
def test_bad_input_to_the_residual_and_the_draws_is_refused_by_name(call, message: str) -> None:
    skinny.load()
    with pytest.raises(RuntimeError, match=message):
        call()


def _residual(nodes: torch.Tensor | None = None, t: torch.Tensor | None = None) -> torch.Tensor:
    nodes = torch.tensor([0]) if nodes is None else nodes
    t = torch.zeros(3) if t is None else t
    p = torch.rand(3, 5)
    parents, tokens, points = torch.tensor([-1, 0, 0]), torch.tensor([0, 1, 2]), torch.zeros(3, dtype=torch.bool)
    return torch.ops.specdec.multiround_residual(p, p, t, parents, tokens, points, nodes)


def test_a_residual_with_no_mass_left_is_p_in_both_forms() -> None:
    """A draw from q = p is accepted with probability 1, so the row after it, ``max(0, p - q)``, is empty: both forms
    return ``p`` there (a state reached with probability 0, where the walk must still read a distribution)."""
    p = torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]], dtype=F64)
    tree = DraftTree.from_parents(torch.tensor([0, 1]), torch.tensor([-1, 0]), 1, p, torch.ones(2))
    with native():
        fast = native_plan(tree, p, p)
    slow = mixed_multiround_plan(tree, p, p, torch.zeros(2, dtype=torch.bool))
    assert float(fast.accept_prob[1]) == 1.0
    root = torch.tensor([0])
    assert torch.equal(fast.residual_at(root), p[:1]) and torch.equal(slow.residual_at(root), p[:1])


def _both(fn, seed: int = 5):
    """``fn`` in the tensor form and in the native one, each from a fresh generator of ``seed``; the native call must
    reach ``specdec::sample_rows`` (a silent fallback to the tensor form would compare it with itself)."""
    with native(False):
        slow = fn(torch.Generator().manual_seed(seed))
    calls = []
    with native(), mock.patch("specdec.sampling.draws", lambda *a: calls.append(1) or draws(*a)):
        fast = fn(torch.Generator().manual_seed(seed))
    assert calls, "the native draws did not run"
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


def test_the_draws_edge_shapes_are_the_tensor_forms() -> None:
    """No draw, a ``[B, F, V]`` input, more draws than positive entries (both forms repeat ``V - 1``), a NaN at index
    ``V - 1`` alone (drawn first, then the row as it is) and a NaN elsewhere (every draw ``V - 1``)."""
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(3, 2, 40, generator=g), -1)
    sparse = torch.tensor([[0.0, 0.5, 0.0, 0.5]])
    nan_last = torch.tensor([[0.2, 0.3, 0.5, float("nan")]])
    nan_first = torch.tensor([[float("nan"), 0.3, 0.5, 0.2]])
    for fn in (
        lambda gen: sample_distinct(probs[0], 0, gen),
        lambda gen: sample(probs, gen),
        lambda gen: sample_distinct(sparse, 3, gen),
        lambda gen: sample_distinct(nan_last, 3, gen),
        lambda gen: sample_distinct(nan_first, 2, gen),
    ):
        slow, fast = _both(fn)
        assert torch.equal(slow, fast), (slow, fast)
    assert _both(lambda gen: sample_distinct(nan_last, 3, gen))[1][0, 0] == 3


def _near_the_cut(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``[M]`` bool: rows whose cut lies within float32 rounding of ``top_p`` (the mass before the last kept or the
    first dropped token within 1e-6 of it): there the two forms, like the tensor form's own two ways, may cut one
    token apart."""
    p = probs.double().sort(-1, descending=True).values
    before = p.cumsum(-1) - p  # the mass before each token, in descending order
    kept = (before < top_p).sum(-1, keepdim=True)  # the exact cut: tokens [0, kept) stay
    last = before.gather(-1, kept - 1)  # below top_p
    first_out = before.gather(-1, kept.clamp(max=p.shape[-1] - 1))  # at least top_p (or the last token again)
    return ((top_p - last).squeeze(-1) < 1e-6) | ((first_out - top_p).abs().squeeze(-1) < 1e-6)


@pytest.mark.parametrize("top_p, top_k", [(0.5, 0), (0.9, 0), (0.95, 0), (0.9, 50), (1e-6, 0)])
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_top_p_keeps_the_tensor_forms_tokens(top_p: float, top_k: int, temperature: float) -> None:
    """``warp`` with top-p (and top-k before it): the native cut keeps the same tokens as the tensor form's on every
    row whose cut is not within rounding of ``top_p``, with the same probabilities (float32 and float64; peaked to
    flat rows, 50 to 49152 columns; a tiny ``top_p`` keeps the first token only). Negative control: the same rows
    cut at ``top_p - 0.05`` keep other tokens somewhere."""
    g = torch.Generator().manual_seed(int(top_p * 1000) + top_k)
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
    calls, compared = [], 0
    for vocab in (50, 2000, 49152):
        for scale, dtype in ((0.5, torch.float32), (2.0, F64), (6.0, torch.float32)):
            logits = torch.randn(8, vocab, generator=g, dtype=dtype) * scale
            with native(False):
                slow = warp(logits, params, dtype)
            with native(), mock.patch("specdec.sampling.nucleus", lambda *a: calls.append(1) or nucleus(*a)):
                fast = warp(logits, params, dtype)
            far = ~_near_the_cut(warp(logits, SamplingParams(temperature=temperature, top_k=top_k), F64), top_p)
            compared += int(far.sum())
            assert torch.equal(fast[far] > 0, slow[far] > 0), (vocab, scale)
            torch.testing.assert_close(fast[far], slow[far], rtol=1e-5, atol=1e-9)
            if top_p == 1e-6:
                assert ((fast > 0).sum(-1) == 1).all()
            if top_p == 0.9 and vocab == 49152:
                with native():
                    lower = warp(logits, SamplingParams(temperature=temperature, top_p=0.85, top_k=top_k), dtype)
                assert not torch.equal(lower > 0, fast > 0)
    assert calls, "the native cut did not run"
    assert compared >= 0.6 * 9 * 8  # most rows: only flat rows of 49152 tokens put a cut within 1e-6 of top_p


def test_top_p_leaves_a_nan_row_as_it_is() -> None:
    """A row with a NaN is returned unchanged (the loops check the logits for NaN and raise); the others are cut."""
    probs = torch.tensor([[0.5, float("nan"), 0.5], [0.7, 0.2, 0.1]])
    with native():
        out = nucleus(probs.clone(), 0.5)
    assert torch.equal(out[0].isnan(), probs[0].isnan()) and out[0, 0] == 0.5
    assert out[1].tolist() == [1.0, 0.0, 0.0]

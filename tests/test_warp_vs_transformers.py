"""``warp`` means what Hugging Face transformers means by temperature, top-k and top-p.

``warp`` is shared by vanilla and speculative decoding, so a wrong warp (say, the nucleus computed before the
temperature) is invisible to every losslessness test: both sides would be wrong together. Here the reference is
transformers itself: the processor list that ``GenerationMixin._get_logits_processor`` builds from a
``GenerationConfig`` (so its order and its ``min_tokens_to_keep`` are transformers' own, not a transcription),
applied the way ``GenerationMixin._sample`` applies it: logits cast to float32, the processors, then softmax
(``do_sample=True``) or argmax (``do_sample=False``).

Compared, on random logits (vocabularies from 1 token up to 32000; ties; very peaked and very flat rows; ``-inf``
entries; float32, bfloat16 and float16 inputs; shapes ``[V]``, ``[N, V]`` and ``[B, T, V]``): the support (which
tokens have p > 0) exactly, and the probabilities to float32 tolerance.

Two boundaries are implementation-defined, and are handled on purpose:

* A token whose nucleus mass-before lies within float32 rounding of ``top_p``: whether it is kept depends on how
  each side sums the mass (transformers sums from the least likely token up and compares with ``1 - top_p``; we
  sum from the most likely down and compare with ``top_p``). The property skips such cases (``assume``);
  ``test_nucleus_boundary_hit_exactly`` pins the exact case, where both sides drop the token (a nucleus that
  reaches ``top_p`` exactly is complete).
* Equal logits straddling the nucleus boundary: both sides keep the same *number* of the tied tokens, but which
  ones follows the order its sort gives equal keys (we sort descending, transformers ascending; neither asks for a
  stable sort). So under top-p the comparison is up to a permutation within each group of equal logits
  (:func:`canonical`); ``test_tie_at_the_nucleus_boundary`` shows the two sides choosing differently. Top-k ties are
  not ambiguous: both keep every token tied with the k-th. Greedy ties are not ambiguous: both take the first index.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, event, find, given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.utils import GenerationMixin

from specdec.sampling import SamplingParams, warp

WarpFn = Callable[[torch.Tensor, SamplingParams], torch.Tensor]
Case = tuple[torch.Tensor, SamplingParams]

SETTINGS = settings(
    deadline=None,
    max_examples=200,
    derandomize=True,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
SMALL = 12  # rows up to this vocabulary are drawn element by element, wider ones from a seeded generator
BIG_VOCABS = [257, 4096, 32000]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread is fastest, and immune to spinning on a shared, busy CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------ transformers' side


class _Model(GenerationMixin):
    """Just enough of a model for ``_get_logits_processor`` (it reads ``config`` only for other processors)."""

    config = SimpleNamespace(is_encoder_decoder=False)


def hf_processors(params: SamplingParams) -> LogitsProcessorList:
    """The processor list transformers' ``generate`` builds for these settings, in its order."""
    if params.greedy:
        config = GenerationConfig(do_sample=False)
    else:
        config = GenerationConfig(
            do_sample=True, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p
        )
    return _Model()._get_logits_processor(config, device="cpu")


def hf_distribution(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``[..., V]`` logits -> ``[..., V]``: the distribution transformers' ``_sample`` draws the next token from."""
    scores = logits.reshape(-1, logits.shape[-1]).to(torch.float32)  # [N, V], as _sample casts them
    scores = hf_processors(params)(None, scores)  # input_ids: unused by these processors
    if params.greedy:
        probs = torch.zeros_like(scores).scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)
    else:
        probs = torch.softmax(scores, dim=-1)
    return probs.reshape(logits.shape)


# ------------------------------------------------------------------------------------------------ the check


def _scaled(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``[N, V]`` float32 logits after temperature, computed as both sides compute them."""
    x = logits.reshape(-1, logits.shape[-1]).to(torch.float32)
    return x if params.temperature in (0.0, 1.0) else x / params.temperature


def canonical(probs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``[N, V]`` probs with each group of equal ``values`` sorted descending in place (the group keeps its slots).

    Two distributions that differ only in which of some equal-logit tokens carry the mass become equal.
    """
    slots = torch.argsort(values, dim=-1, stable=True)  # group-contiguous; each group's slots in index order
    # Sorted by value, then by probability descending: two stable sorts.
    by_prob = torch.argsort(probs, dim=-1, descending=True, stable=True)
    by_value_then_prob = by_prob.gather(-1, torch.argsort(values.gather(-1, by_prob), dim=-1, stable=True))
    return torch.empty_like(probs).scatter_(-1, slots, probs.gather(-1, by_value_then_prob))


def nucleus_margin(logits: torch.Tensor, params: SamplingParams) -> float:
    """Smallest ``|mass_before - top_p|`` over every row's tokens (float64), ``inf`` when top-p is off.

    ``mass_before`` of a token is the mass of the tokens sorted above it, after temperature and top-k: the token is
    kept iff ``mass_before < top_p``. Within float32 rounding of ``top_p`` the two sides may decide differently.
    """
    if params.greedy or params.top_p >= 1.0:
        return math.inf
    x = _scaled(logits, params).double()
    if params.top_k and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, -math.inf)
    p = torch.softmax(torch.sort(x, dim=-1, descending=True).values, dim=-1)
    mass_before = p.cumsum(-1) - p
    return (mass_before - params.top_p).abs().min().item()


def rounding_slack(vocab: int) -> float:
    """How far from ``top_p`` a float32 mass sum over ``vocab`` terms can land (generous)."""
    return 1e-6 + 4e-6 * math.sqrt(vocab)


def mismatch(logits: torch.Tensor, params: SamplingParams, warp_fn: WarpFn = warp) -> str | None:
    """Why ``warp_fn(logits, params)`` is not transformers' distribution, or None if it is."""
    ours, theirs = warp_fn(logits, params), hf_distribution(logits, params)
    if ours.shape != logits.shape:
        return f"shape {tuple(ours.shape)} for logits {tuple(logits.shape)}"
    vocab = logits.shape[-1]
    ours, theirs = ours.reshape(-1, vocab).to(torch.float32), theirs.reshape(-1, vocab)
    if not params.greedy and params.top_p < 1.0:  # only top-p leaves the choice among ties to a sort
        values = _scaled(logits, params)
        ours, theirs = canonical(ours, values), canonical(theirs, values)
    for r in range(ours.shape[0]):
        ours_support, theirs_support = ours[r] > 0, theirs[r] > 0
        if not torch.equal(ours_support, theirs_support):
            only_ours = ours_support & ~theirs_support
            only_theirs = theirs_support & ~ours_support
            return (
                f"row {r}: support differs: {int(ours_support.sum())} tokens (only ours: "
                f"{only_ours.nonzero().flatten().tolist()[:8]}) vs transformers {int(theirs_support.sum())} "
                f"(only theirs: {only_theirs.nonzero().flatten().tolist()[:8]})"
            )
        if not torch.allclose(ours[r], theirs[r], rtol=1e-5, atol=1e-7):
            worst = (ours[r] - theirs[r]).abs().max().item()
            return f"row {r}: probabilities differ by up to {worst:.3g}"
    return None


def comparable(logits: torch.Tensor, params: SamplingParams) -> bool:
    """No row's nucleus boundary lies within float32 rounding of ``top_p``."""
    return nucleus_margin(logits, params) > rounding_slack(logits.shape[-1])


def _record_coverage(logits: torch.Tensor, params: SamplingParams) -> None:
    """Events for ``--hypothesis-show-statistics``: which parts of the transform the example exercised."""
    vocab = logits.shape[-1]
    event(f"vocab {'1' if vocab == 1 else f'<= {SMALL}' if vocab <= SMALL else '<= 100' if vocab <= 100 else vocab}")
    event(f"dtype {str(logits.dtype).removeprefix('torch.')}, {logits.dim()}-d")
    if params.greedy:
        event("greedy")
        return
    values = _scaled(logits, params)
    finite = torch.isfinite(values)
    by_top_k = finite & _top_k_mask(values, params.top_k)
    by_top_p = finite & ~by_top_k & (hf_distribution(logits, params).reshape(-1, vocab) == 0)
    if bool(by_top_k.any()):
        event("top-k drops a finite token")
    if bool(by_top_p.any()):
        event("top-p drops a finite token")
    kept = (~by_top_k & ~by_top_p & finite).float()
    if params.top_p < 1.0 and not torch.equal(canonical(kept, values), kept):
        event("tie straddles the nucleus boundary")


def check_against_transformers(case: Case, warp_fn: WarpFn = warp) -> None:
    logits, params = case
    assume(comparable(logits, params))
    problem = mismatch(logits, params, warp_fn)
    _record_coverage(logits, params)
    assert problem is None, f"{params!r}, logits {logits.tolist() if logits.numel() <= 64 else logits.shape}: {problem}"


# ------------------------------------------------------------------------------------------------ strategies

ROW_KINDS = ["spread", "ties", "peaked", "flat", "near_flat"]


@st.composite
def small_row(draw: st.DrawFn, vocab: int) -> list[float]:
    """One row of ``vocab <= SMALL`` logits, element by element (so a counterexample shrinks to a readable row)."""
    kind = draw(st.sampled_from(ROW_KINDS))
    row_of = lambda elems: draw(st.lists(elems, min_size=vocab, max_size=vocab))
    if kind == "spread":
        row = row_of(st.floats(-20.0, 20.0, width=32))
    elif kind == "ties":
        row = row_of(st.sampled_from([-3.0, -1.0, 0.0, 0.0, 1.0, 2.5]))
    elif kind == "peaked":
        row = row_of(st.floats(-3.0, 3.0, width=32))
        row[draw(st.integers(0, vocab - 1))] += draw(st.sampled_from([12.0, 30.0, 90.0]))
    elif kind == "flat":
        row = [draw(st.floats(-50.0, 50.0, width=32))] * vocab
    else:
        c = draw(st.floats(-50.0, 50.0, width=32))
        row = [c + 1e-3 * d for d in row_of(st.floats(-1.0, 1.0, width=32))]
    for i in draw(st.lists(st.integers(0, vocab - 1), max_size=vocab)):  # -inf entries (banned tokens)
        row[i] = -math.inf
    if all(v == -math.inf for v in row):  # a row needs a finite entry (check_finite refuses one without)
        row[draw(st.integers(0, vocab - 1))] = draw(st.floats(-5.0, 5.0, width=32))
    return row


def seeded_row(kind: str, vocab: int, seed: int) -> torch.Tensor:
    """One row of ``vocab > SMALL`` logits (up to a realistic vocabulary), from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    scale = [0.5, 3.0, 10.0][seed % 3]
    if kind == "spread":
        row = scale * torch.randn(vocab, generator=g)
    elif kind == "ties":
        row = torch.randint(-3, 4, (vocab,), generator=g).float()
    elif kind == "peaked":
        row = torch.randn(vocab, generator=g)
        row[torch.randint(vocab, (3,), generator=g)] += torch.tensor([12.0, 30.0, 90.0])[seed % 3]
    elif kind == "flat":
        row = torch.full((vocab,), float(seed % 7))
    else:
        row = seed % 7 + 1e-3 * torch.randn(vocab, generator=g)
    banned = torch.rand(vocab, generator=g) < [0.0, 0.3, 0.99][(seed // 3) % 3]
    banned[torch.randint(vocab, (1,), generator=g)] = False
    return row.masked_fill(banned, -math.inf)


@st.composite
def samplings(draw: st.DrawFn, vocab: int) -> SamplingParams:
    temperature = draw(st.one_of(st.sampled_from([0.0, 1.0, 1.0, 0.5, 0.7, 2.0]), st.floats(0.01, 10.0)))
    top_k = draw(st.one_of(st.just(0), st.integers(1, vocab + 2)))
    top_p = draw(st.one_of(st.just(1.0), st.sampled_from([0.5, 0.9, 0.95]), st.floats(1e-4, 0.9999)))
    return SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    vocab = draw(st.one_of(st.integers(1, SMALL), st.integers(SMALL + 1, 100), st.sampled_from(BIG_VOCABS)))
    shape = draw(st.sampled_from([(), (2,), (3,), (2, 2)]) if vocab <= 100 else st.sampled_from([(), (2,)]))
    n_rows = math.prod(shape)
    if vocab <= SMALL:
        rows = [torch.tensor(draw(small_row(vocab))) for _ in range(n_rows)]
    else:
        rows = [seeded_row(draw(st.sampled_from(ROW_KINDS)), vocab, draw(st.integers(0, 2**16))) for _ in range(n_rows)]
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.bfloat16, torch.float16]))
    logits = torch.stack(rows).reshape(*shape, vocab).to(dtype)
    return logits, draw(samplings(vocab))


# ------------------------------------------------------------------------------------------------ the property


@SETTINGS
@given(cases())
def test_warp_is_transformers_sampling_distribution(case: Case) -> None:
    check_against_transformers(case)


def test_transformers_composition_is_the_one_compared() -> None:
    """The reference really is temperature -> top-k -> top-p, each keeping at least one token (``num_beams=1``)."""
    processors = hf_processors(SamplingParams(temperature=0.7, top_k=5, top_p=0.9))
    assert [type(p) for p in processors] == [TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper]
    assert processors[1].top_k == 5 and processors[2].min_tokens_to_keep == 1
    assert hf_processors(SamplingParams(temperature=1.0, top_k=0, top_p=1.0)) == []  # 0 and 1.0 mean "off"
    assert hf_processors(SamplingParams(temperature=0.0, top_k=5, top_p=0.5)) == []  # greedy: no warpers at all


# ------------------------------------------------------------------------------------- the two boundaries


@pytest.mark.parametrize(("vocab", "top_p", "kept"), [(4, 0.5, 2), (8, 0.25, 2), (8, 0.375, 3), (2, 0.5, 1)])
def test_nucleus_boundary_hit_exactly(vocab: int, top_p: float, kept: int) -> None:
    """Uniform rows whose masses are exact in float32: a token whose mass-before equals ``top_p`` is dropped."""
    logits, params = torch.zeros(vocab), SamplingParams(temperature=1.0, top_p=top_p)
    assert nucleus_margin(logits, params) == 0.0  # the case the property skips
    assert int((hf_distribution(logits, params) > 0).sum()) == kept
    assert int((warp(logits, params) > 0).sum()) == kept


def test_tie_at_the_nucleus_boundary() -> None:
    """Three equal logits, each above ``top_p`` (0.297 > 0.25): both sides keep one of them, each its own choice.

    Each keeps the tied token its sort puts on the kept side: ``warp`` the first of a descending sort, transformers
    the last of an ascending one. Where torch's CPU sort keeps equal keys in index order (as it does for short rows)
    that is the first tied token for us and the last for transformers. Equal up to the tie.
    """
    logits, params = torch.tensor([[1.0, 1.0, 1.0, 0.0]]), SamplingParams(temperature=1.0, top_p=0.25)
    ours, theirs = warp(logits, params), hf_distribution(logits, params)
    for probs in (ours, theirs):
        assert int((probs > 0).sum()) == 1 and bool((probs[0, :3] > 0).any())  # one token, one of the tied three
    assert ours[0, torch.sort(logits, descending=True).indices[0, 0]] == 1.0
    assert theirs[0, torch.sort(logits).indices[0, -1]] == 1.0
    assert mismatch(logits, params) is None  # equal up to the tie


def test_top_k_and_greedy_ties_are_not_ambiguous() -> None:
    """Top-k keeps every token tied with the k-th on both sides; greedy takes the first maximal index on both."""
    logits = torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0]])
    top_k = SamplingParams(temperature=1.0, top_k=2)
    assert (warp(logits, top_k) > 0).tolist() == [[True, True, True, True, False]]
    assert torch.equal(warp(logits, top_k) > 0, hf_distribution(logits, top_k) > 0)
    greedy = SamplingParams(temperature=0.0)
    tied = torch.tensor([[0.0, 3.0, 3.0]])
    assert warp(tied, greedy).tolist() == hf_distribution(tied, greedy).tolist() == [[0.0, 1.0, 0.0]]


# ------------------------------------------------------------------------------------- negative controls


def _top_p_mask(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """True where the nucleus of ``softmax(x)`` drops a token (``warp``'s own rule)."""
    sorted_x, order = torch.sort(x, dim=-1, descending=True)
    sorted_p = torch.softmax(sorted_x, dim=-1)
    drop_sorted = sorted_p.cumsum(-1) - sorted_p >= top_p
    return torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)


def _top_k_mask(x: torch.Tensor, top_k: int) -> torch.Tensor:
    if not top_k or top_k >= x.shape[-1]:
        return torch.zeros_like(x, dtype=torch.bool)
    return x < torch.topk(x, top_k, dim=-1).values[..., -1:]


def warp_nucleus_before_temperature(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Broken: the nucleus of the untempered distribution."""
    if params.greedy:
        return warp(logits, params)
    x = logits.to(torch.float32)
    drop = _top_k_mask(x, params.top_k)
    if params.top_p < 1.0:
        drop |= _top_p_mask(x.masked_fill(drop, -math.inf), params.top_p)
    return torch.softmax((x / params.temperature).masked_fill(drop, -math.inf), dim=-1)


def warp_top_p_before_top_k(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Broken: the nucleus of the full distribution, not of the top-k survivors."""
    if params.greedy:
        return warp(logits, params)
    x = logits.to(torch.float32) / params.temperature
    drop = _top_p_mask(x, params.top_p) if params.top_p < 1.0 else torch.zeros_like(x, dtype=torch.bool)
    x = x.masked_fill(drop, -math.inf)
    return torch.softmax(x.masked_fill(_top_k_mask(x, params.top_k), -math.inf), dim=-1)


def warp_nucleus_without_crossing_token(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Broken: keeps tokens whose cumulative mass *including* themselves is below ``top_p`` (and the top one)."""
    if params.greedy or params.top_p >= 1.0:
        return warp(logits, params)
    x = logits.to(torch.float32) / params.temperature
    x = x.masked_fill(_top_k_mask(x, params.top_k), -math.inf)
    sorted_x, order = torch.sort(x, dim=-1, descending=True)
    drop_sorted = torch.softmax(sorted_x, dim=-1).cumsum(-1) >= params.top_p
    drop_sorted[..., 0] = False
    return torch.softmax(x.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), -math.inf), -1)


BROKEN = [
    # (warp, a case it gets wrong, worked by hand)
    (
        warp_nucleus_before_temperature,
        # T = 4 flattens p from (.67, .24, .09) to (.42, .33, .25): the nucleus at 0.8 grows from 2 tokens to 3.
        (torch.tensor([2.0, 1.0, 0.0]), SamplingParams(temperature=4.0, top_p=0.8)),
    ),
    (
        warp_top_p_before_top_k,
        # Top-3 of (.4, .3, .2, .1) renormalises to (.44, .33, .22): its nucleus at 0.75 has 2 tokens, not 3.
        (torch.tensor([0.4, 0.3, 0.2, 0.1]).log(), SamplingParams(temperature=1.0, top_k=3, top_p=0.75)),
    ),
    (
        warp_nucleus_without_crossing_token,
        # (.5, .3, .2) at 0.6: the nucleus is {.5, .3} (the token crossing 0.6 belongs to it), not {.5}.
        (torch.tensor([0.5, 0.3, 0.2]).log(), SamplingParams(temperature=1.0, top_p=0.6)),
    ),
]


@pytest.mark.parametrize(("broken", "known"), BROKEN, ids=[b.__name__ for b, _ in BROKEN])
def test_the_check_rejects_a_wrong_warp(broken: WarpFn, known: Case) -> None:
    logits, params = known
    assert comparable(logits, params)
    assert mismatch(logits, params) is None  # the real warp agrees on the hand-worked case...
    assert mismatch(logits, params, broken) is not None  # ...and the broken one does not

    # Hypothesis finds a counterexample on its own, from the same strategy (no shrinking: it takes a while).
    found = find(
        cases(),
        lambda case: comparable(*case) and mismatch(*case, broken) is not None,
        settings=settings(SETTINGS, max_examples=1000, phases=[Phase.generate]),
    )
    assert mismatch(*found) is None  # a disagreement of the broken warp, not of warp

    # And the property test itself, run on the broken warp, fails.
    property_on_broken = settings(SETTINGS, phases=[Phase.generate])(
        given(cases())(lambda case: check_against_transformers(case, broken))
    )
    with pytest.raises(AssertionError, match="support differs|probabilities differ"):
        property_on_broken()

"""The few-row attention (``specdec::skinny_attention``, ``skinny_attention.cpp``): SDPA's result, each row's bits
independent of the other rows, and with the skinny GEMM a float32 SmolLM2 whose tree rows are its 1-token steps.

Marked heavy: the first use builds the kernel library (about a minute on 2 cores); ``make test`` keeps it out
(``SPECDEC_SKINNY=off``). Each variant runs where the CPU has its instructions: the AVX2 one on every x86 CPU with
AVX2 and FMA (AVX-512 ones included), the AVX-512 one where the CPU has AVX-512; the model-level tests run the one
this CPU runs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec.backends import skinny
from specdec.backends.cpu import cpu_flags
from specdec.backends.gqa import GQA_SKINNY, _register_gqa_attention, set_attention
from specdec.target import HFTarget
from tests.test_invariant import rows_match_steps, smollm2

pytestmark = pytest.mark.heavy
MIN = torch.finfo(torch.float32).min


@pytest.fixture(autouse=True)
def kernel() -> None:
    reason = skinny.unavailable() if cpu_flags() else "no /proc/cpuinfo: the CPU's flags are unknown"
    if reason is not None:
        pytest.skip(f"skinny kernel unavailable: {reason}")


ISAS = [
    pytest.param(1, id="avx2"),
    pytest.param(
        2, id="avx512", marks=pytest.mark.skipif("avx512f" not in cpu_flags(), reason="this CPU has no AVX-512")
    ),
]


def attention(q, k, v, mask, scale=0.125, isa=0) -> torch.Tensor:
    return torch.ops.specdec.skinny_attention(q, k, v, mask, scale, isa)


def tree_mask(rows: int, keys: int, seed: int) -> torch.Tensor:
    """``[rows, keys]`` bool: a committed prefix, then a random tree-like pattern (each row sees itself)."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.ones(rows, keys, dtype=torch.bool)
    allowed[:, keys - rows :] = (torch.rand(rows, rows, generator=g) < 0.5).tril() | torch.eye(rows, dtype=torch.bool)
    return allowed


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("heads, kv, size", [(9, 3, 64), (4, 4, 32), (8, 2, 80), (2, 1, 128)])
@pytest.mark.parametrize("rows, keys", [(1, 1), (1, 300), (8, 260), (19, 77)])
def test_matches_sdpa(isa: int, heads: int, kv: int, size: int, rows: int, keys: int) -> None:
    g = torch.Generator().manual_seed(rows * keys + size)
    q = torch.randn(2, heads, rows, size, generator=g)
    k, v = (torch.randn(2, kv, keys, size, generator=g) for _ in range(2))
    allowed = torch.stack([tree_mask(rows, keys, 0), tree_mask(rows, keys, 1)])[:, None]
    additive = torch.zeros(allowed.shape).masked_fill_(~allowed, MIN)
    expected = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=allowed, scale=0.125, enable_gqa=heads != kv
    ).transpose(1, 2)
    if isa == 2 and size % 16:
        with pytest.raises(RuntimeError, match="multiple of 8 \\(16 for AVX-512\\)"):
            attention(q, k, v, allowed, isa=isa)
        return
    for mask in (allowed, additive):
        torch.testing.assert_close(attention(q, k, v, mask, isa=isa).double(), expected, atol=2e-6, rtol=1e-5)
    nomask = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.125, enable_gqa=heads != kv)
    torch.testing.assert_close(attention(q, k, v, None, isa=isa).double(), nomask.transpose(1, 2), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("isa", ISAS)
def test_a_row_is_bitwise_its_seen_keys_alone_and_the_check_can_fail(isa: int) -> None:
    """Each row of a tree call equals the same query alone over only the keys it sees (a 1-token step's view), and
    trailing masked slots (a static cache's capacity) change nothing. Negative control: the same keys in another
    order give other bits (the comparison sees a change of summation order)."""
    g = torch.Generator().manual_seed(0)
    rows, keys, capacity = 16, 300, 512
    q = torch.randn(1, 9, rows, 64, generator=g)
    k, v = (torch.randn(1, 3, capacity, 64, generator=g) for _ in range(2))
    allowed = torch.zeros(rows, capacity, dtype=torch.bool)
    allowed[:, :keys] = tree_mask(rows, keys, 3)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # the strides a model's projection gives it
    out = attention(q, k, v, torch.zeros(rows, capacity).masked_fill_(~allowed, MIN)[None, None], isa=isa)
    assert torch.equal(out, attention(q, k[:, :, :keys], v[:, :, :keys], allowed[None, None, :, :keys], isa=isa))
    changed = 0
    for t in range(rows):
        seen = allowed[t].nonzero().squeeze(1)
        alone = attention(q[:, :, t : t + 1], k[:, :, seen], v[:, :, seen], None, isa=isa)
        assert torch.equal(alone[:, 0], out[:, t]), f"row {t}"
        flipped = seen.flip(0)
        changed += not torch.equal(
            attention(q[:, :, t : t + 1], k[:, :, flipped], v[:, :, flipped], None, isa=isa), alone
        )
    assert changed == rows


@pytest.mark.parametrize("isa", ISAS)
def test_a_mask_shared_by_the_batch_and_values_that_hide_a_key(isa: int) -> None:
    """A ``[1, 1, T, S]`` mask serves every batch row bitwise as its expanded copy does (the keys each chunk of rows
    sees are gathered once per call and shared), and an additive value at or below -1e30, float32's minimum or NaN
    hides its key exactly as -inf does. Negative control: one batch row's mask hiding one more key changes that row's
    output and no other."""
    g = torch.Generator().manual_seed(11)
    batch, rows, keys = 3, 6, 200
    q = torch.randn(batch, 9, rows, 64, generator=g)
    k, v = (torch.randn(batch, 3, keys, 64, generator=g) for _ in range(2))
    additive = torch.zeros(rows, keys).masked_fill_(~tree_mask(rows, keys, 5), float("-inf"))[None, None]
    shared = attention(q, k, v, additive, isa=isa)
    assert torch.equal(shared, attention(q, k, v, additive.expand(batch, 1, rows, keys).contiguous(), isa=isa))
    hiding = additive.clone()
    hidden = hiding[0, 0, :, keys - rows :] == float("-inf")  # the tree's unseen slots
    fills = torch.tensor([-1e30, torch.finfo(torch.float32).min, float("nan"), -1e38])
    hiding[0, 0, :, keys - rows :][hidden] = fills[torch.arange(int(hidden.sum())) % 4]
    assert torch.equal(attention(q, k, v, hiding, isa=isa), shared)
    one_more = additive.expand(batch, 1, rows, keys).clone()
    one_more[1, 0, :, 0] = float("-inf")  # every row saw key 0 (the prefix)
    out = attention(q, k, v, one_more, isa=isa)
    assert torch.equal(out[0], shared[0]) and torch.equal(out[2], shared[2]) and not torch.equal(out[1], shared[1])


def test_a_row_that_sees_no_key_gets_zeros_and_bad_input_is_refused() -> None:
    q, k = torch.randn(1, 2, 2, 8), torch.randn(1, 1, 5, 8)
    mask = torch.zeros(1, 1, 2, 5, dtype=torch.bool)
    mask[0, 0, 1, :3] = True
    out = attention(q, k, k, mask)
    assert torch.equal(out[0, 0], torch.zeros(2, 8)) and out[0, 1].abs().sum() > 0
    with pytest.raises(RuntimeError, match="float32"):
        attention(q.double(), k.double(), k.double(), None)
    with pytest.raises(RuntimeError, match="isa is 0"):
        attention(q, k, k, None, isa=3)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        attention(torch.randn(1, 2, 1, 6), torch.randn(1, 1, 5, 6), torch.randn(1, 1, 5, 6), None)
    with pytest.raises(RuntimeError, match="mask"):
        attention(q, k, k, torch.zeros(1, 2, 2, 5))  # one mask per head: the attention function runs SDPA for it


def test_the_attention_function_runs_the_kernel_only_on_what_it_serves(monkeypatch) -> None:
    """``specdec_sdpa_skinny`` gives SDPA's result either way, and hands SDPA a prefill, a per-head mask, another
    dtype and more rows than the largest tree (the kernel is not called for them)."""
    from specdec.backends import gqa

    calls = []
    real = torch.ops.specdec.skinny_attention
    monkeypatch.setattr(torch.ops.specdec, "skinny_attention", lambda *a: calls.append(1) or real(*a))
    module = torch.nn.Module()
    module.is_causal = True
    g = torch.Generator().manual_seed(0)
    k, v = (torch.randn(1, 2, 70, 16, generator=g) for _ in range(2))
    cases = [  # (query rows, mask, dtype, served by the kernel)
        (4, torch.zeros(1, 1, 4, 70), torch.float32, True),
        (1, None, torch.float32, True),
        (70, None, torch.float32, False),  # a causal prefill
        (4, torch.zeros(1, 4, 4, 70), torch.float32, False),  # one mask per head
        (4, torch.zeros(1, 1, 4, 70, dtype=torch.float64), torch.float64, False),
        (65, torch.zeros(1, 1, 65, 70), torch.float32, False),  # past the largest tree
    ]
    for rows, mask, dtype, served in cases:
        q = torch.randn(1, 4, rows, 16, generator=g, dtype=dtype)
        calls.clear()
        out = gqa._gqa_skinny(module, q, k.to(dtype), v.to(dtype), mask)[0]
        expected = gqa._gqa_sdpa(module, q, k.to(dtype), v.to(dtype), mask)[0]
        assert len(calls) == int(served), (rows, served)
        torch.testing.assert_close(out, expected, atol=2e-6, rtol=1e-5)


@pytest.mark.slow
def test_smollm2_float32_tree_rows_are_bitwise_single_steps_on_the_skinny_kernels() -> None:
    """Every linear on the skinny GEMM and the attention on the few-row kernel: float32 tree rows are bitwise the
    1-token steps (no float64 attention needed). Negative control: with SDPA's attention they are not."""
    target = skinny_smollm2(40 + 16)
    assert all(rows_match_steps(target.model, False, seed=2, target=target))
    set_attention(target.model, "sdpa")
    assert not all(rows_match_steps(target.model, False, seed=2, target=target))


def test_the_attention_is_chosen_by_measurement_whatever_runs_the_linears(monkeypatch, tmp_path) -> None:
    """``SPECDEC_ATTENTION=auto`` (the default) takes the few-row attention where its measured ``T(1) + T(8)`` is
    within the tie margin of SDPA's (cached per machine and head shape), with stock or skinny linears alike; ``sdpa``
    never, ``few-row`` wherever it serves the model; nothing is measured with ``SPECDEC_SKINNY=off``,
    ``SPECDEC_KERNELS=rule`` or on a CPU that keeps SDPA (:data:`~specdec.backends.attention_choice.SDPA_KEPT`)
    unless ``SPECDEC_KERNELS=measure``."""
    from specdec.backends import attention_choice
    from specdec.models import tiny_llama

    monkeypatch.setenv("SPECDEC_SKINNY", "auto")
    monkeypatch.setenv("SPECDEC_KERNELS", "auto")
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)  # the suite's forced profile means the rule: no measuring
    monkeypatch.delenv("SPECDEC_ATTENTION", raising=False)
    monkeypatch.setattr(attention_choice, "SDPA_KEPT", {})
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    for skinny_one_row, fits in ((65.0, True), (90.0, False)):  # SDPA 160 us; the tie margin 5 %: up to 168 us
        monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / str(fits)))
        times = {"sdpa": {"1": 60.0, "8": 100.0}, "skinny-attention": {"1": skinny_one_row, "8": 100.0}}
        measured = []
        fake = lambda *shape, m=measured, t=times: m.append(shape) or t  # noqa: E731
        monkeypatch.setattr(attention_choice, "_measure", fake)
        assert attention_choice.skinny_attention_fits(model)[0] is fits  # stock linears: measured all the same
        skinny.skinny_linears(model)
        assert attention_choice.skinny_attention_fits(model)[0] is fits and measured == [(4, 2, 16)]  # cached
        monkeypatch.setenv("SPECDEC_ATTENTION", "sdpa")
        assert attention_choice.skinny_attention_fits(model) == (False, "")
        monkeypatch.setenv("SPECDEC_ATTENTION", "few-row")
        assert attention_choice.skinny_attention_fits(model)[0] is True  # asked for: whatever it measured
        monkeypatch.delenv("SPECDEC_ATTENTION")
        model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    monkeypatch.setenv("SPECDEC_KERNELS", "rule")
    assert attention_choice.skinny_attention_fits(model) == (False, "")
    monkeypatch.setenv("SPECDEC_KERNELS", "auto")
    from specdec.backends.cpu import cpu_info

    here = cpu_info()
    kept = (here.get("vendor_id", ""), here.get("cpu family", ""), here.get("model", ""))
    monkeypatch.setattr(attention_choice, "SDPA_KEPT", {kept: "this CPU, kept by an A/B"})
    assert attention_choice.skinny_attention_fits(model) == (False, "")
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    fits, why = attention_choice.skinny_attention_fits(model)  # measured after all: the cached 90 us table
    assert not fits and "T(1) + T(8)" in why
    monkeypatch.setenv("SPECDEC_SKINNY", "off")
    assert attention_choice.skinny_attention_fits(model) == (False, "")
    monkeypatch.setenv("SPECDEC_ATTENTION", "few-row")
    assert attention_choice.skinny_attention_fits(model) == (False, "")  # the kernels are off: it cannot serve
    monkeypatch.setenv("SPECDEC_ATTENTION", "on")
    with pytest.raises(ValueError, match="SPECDEC_ATTENTION"):
        attention_choice.skinny_attention_fits(model)


def test_auto_runs_the_few_row_attention_beside_packed_linears_without_claiming_row_invariance(monkeypatch) -> None:
    """``weights="auto"`` with the few-row attention chosen (here asked for; the suite's forced oneDNN profile keeps
    every linear packed): the target's attention runs on the kernel, its tree logits equal SDPA's target's within
    float rounding, and it is not called row-invariant (``Execution.skinny_forward`` False, ``describe()`` says
    "few-row attention"). ``skinny_forward`` holds once every linear is on the skinny GEMM, and not where a linear
    subclass the fast path does not touch remains (negative control)."""
    from specdec.backends import attention_choice
    from specdec.models import tiny_llama
    from specdec.tree import DraftTree

    monkeypatch.setenv("SPECDEC_SKINNY", "auto")
    targets = {}
    for mode in ("few-row", "sdpa"):
        monkeypatch.setenv("SPECDEC_ATTENTION", mode)
        model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
        targets[mode] = HFTarget(model, max_len=64, weights="auto", static_shapes=False)
    few, sdpa = targets["few-row"], targets["sdpa"]
    assert few.execution.attention == GQA_SKINNY and sdpa.execution.attention != GQA_SKINNY
    assert few.execution.packed and not few.execution.skinny_forward
    assert "few-row attention" in few.execution.describe() and "row-invariant" not in few.execution.describe()
    tree = DraftTree.from_parents(torch.tensor([3, 5, 7, 9]), torch.tensor([-1, 0, 0, 1]), 2)
    prompt = torch.arange(1, 20)
    logits = []
    for target in (few, sdpa):
        target.prefill(prompt)
        logits.append(target.forward_tree(tree).logits)
    assert torch.allclose(logits[0], logits[1], atol=1e-5, rtol=1e-5)
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    skinny.skinny_linears(model)
    assert attention_choice.skinny_forward(model)

    class Quantized(torch.nn.Linear):  # a linear subclass: neither plain nor on a kernel of the fast path
        pass

    model.lm_head = Quantized(64, 64)
    assert not attention_choice.skinny_forward(model)


def test_padded_single_rows_beside_the_few_row_attention_get_their_own_cost_curve() -> None:
    """Row-invariant numerics pad some packed linears' single rows to two; with the few-row attention such a target
    must not share ``weights="auto"``'s cost curve (same weights and attention labels, another 1-token cost)."""
    from specdec.budget import _backend_label
    from specdec.models import tiny_llama

    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    target = HFTarget(model, max_len=32, weights="packed", static_shapes=False)
    _register_gqa_attention()
    assert set_attention(target.model, GQA_SKINNY)
    plain = _backend_label(target.model)
    assert plain.endswith("+attention") and "+1pad" not in plain
    next(m for m in target.model.modules() if hasattr(m, "pad_single_row")).pad_single_row = True
    assert _backend_label(target.model) == plain.replace("+attention", "+1pad+attention")


def skinny_smollm2(max_len: int) -> HFTarget:
    """SmolLM2 float32 with every linear on the skinny GEMM and the few-row attention (set by hand: the measured
    choice is this CPU's). On a copy of the cached model: stock weights are served as they are (no copy of its own),
    so swapping the linears in place would leave the cached model without plain linears for the other tests."""
    from specdec.backends.kernels import shared_copy

    model = shared_copy(smollm2(torch.float32)[0])
    target = HFTarget(model, max_len=max_len, weights="stock", static_shapes=False, in_place=False)
    skinny.skinny_linears(target.model)
    _register_gqa_attention()
    assert set_attention(target.model, GQA_SKINNY)
    return target


@pytest.mark.slow
def test_smollm2_float32_eagle3_greedy_equals_vanilla_token_for_token_on_the_skinny_kernels() -> None:
    """No near-tie allowance: float32 greedy EAGLE-3 on the skinny kernels emits plain decoding's tokens, on the two
    MT-bench prompts of the bfloat16 form of this test (``tests/test_invariant.py``)."""
    from specdec.assets import chat_ids, mtbench_prompts
    from specdec.generate import StopCondition
    from specdec.methods import MethodOptions, build_method
    from specdec.sampling import SamplingParams

    target = skinny_smollm2(512)
    tokenizer = smollm2(torch.float32)[1]
    vanilla, spec = build_method("vanilla", target), build_method("eagle3", target, MethodOptions())
    stop, greedy = StopCondition(max_new_tokens=128), SamplingParams(temperature=0.0)
    for q in (mtbench_prompts()[1], mtbench_prompts()[16]):
        ids = chat_ids(tokenizer, q)
        result = spec.generate(ids, greedy, stop)
        assert result.tokens == vanilla.generate(ids, greedy, stop).tokens
        assert result.metrics.tau > 1.1


@pytest.mark.parametrize("skinny_linears", [True, False])
def test_invariant_float32_takes_the_few_row_attention_not_float64(monkeypatch, tmp_path, skinny_linears) -> None:
    """``invariant=True`` on a float32 target whose attention the kernel serves: the few-row attention on a float32
    cache (not float64 SDPA), with the linears on the skinny GEMM where measured faster (costs patched) or packed
    with single rows padded as probed; either way tree rows are bitwise 1-token steps and greedy tokens are the stock
    target's. Negative control: with ``SPECDEC_SKINNY=off`` the float64 attention serves it, as before."""
    from specdec.backends.gqa import GQA_INVARIANT
    from specdec.backends.kernel_times import KernelTable
    from specdec.generate import StopCondition, VanillaGenerator
    from specdec.models import tiny_llama
    from specdec.sampling import SamplingParams

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECDEC_SKINNY", "auto")
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)
    ms = {"stock": 1.0, "packed": 0.8, "skinny": 0.4 if skinny_linears else 2.0}
    monkeypatch.setattr(KernelTable, "cost", lambda self, shape, kernel: ms[kernel])
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, logit_scale=1.5, seed=0)  # heads of 16

    def greedy(target: HFTarget) -> list[int]:
        stop = StopCondition(max_new_tokens=16, eos_token_ids=())
        return list(VanillaGenerator(target).generate(torch.arange(5), SamplingParams(temperature=0.0), stop).tokens)

    want = greedy(HFTarget(model, max_len=64, weights="stock", static_shapes=False))
    target = HFTarget(model, max_len=64, static_shapes=False, invariant=True)
    execution = target.execution
    assert execution.invariant and execution.attention == GQA_SKINNY and execution.cache_dtype is None
    assert (execution.skinny > 0) is skinny_linears and "few-row attention" in execution.describe()
    assert all(rows_match_steps(target.model, True, target=target))
    assert greedy(target) == want
    monkeypatch.setenv("SPECDEC_SKINNY", "off")
    before = HFTarget(model, max_len=64, static_shapes=False, invariant=True).execution
    assert before.attention == GQA_INVARIANT and before.cache_dtype == torch.float64 and before.skinny == 0


@pytest.mark.slow
def test_smollm2_float32_invariant_batched_greedy_rows_equal_each_prompt_alone(monkeypatch) -> None:
    """Issue 49's greedy proof on the real target, with no near-tie allowance: float32 SmolLM2 under
    ``invariant=True`` (the few-row attention and the measured linears), three MT-bench prompts of different lengths
    decoded together by EAGLE-3 give each prompt's tokens decoded alone."""
    from specdec.assets import chat_ids, mtbench_prompts
    from specdec.generate import StopCondition
    from specdec.methods import MethodOptions, build_method
    from specdec.sampling import SamplingParams

    monkeypatch.setenv("SPECDEC_SKINNY", "auto")
    model, tokenizer = smollm2(torch.float32)
    target = HFTarget(model, max_len=384, static_shapes=False, invariant=True, in_place=False)
    assert target.execution.attention == GQA_SKINNY and target.execution.invariant
    spec = build_method("eagle3", target, MethodOptions())
    prompts = [chat_ids(tokenizer, mtbench_prompts()[i]) for i in (0, 1, 16)]
    stop, greedy = StopCondition(max_new_tokens=48), SamplingParams(temperature=0.0)
    alone = [spec.generate(p, greedy, stop).tokens for p in prompts]
    assert len({tuple(a) for a in alone}) == len(prompts)  # a row handed another's tokens would show
    batch = spec.generate_batch(prompts, greedy, stop, speculate="always")
    assert [r.tokens for r in batch] == alone

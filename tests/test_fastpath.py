"""The CPU fast path: a transformation of the model that keeps its outputs, its state dict and its hooks."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from specdec.backends import (
    GQA_ATTENTION,
    BackendError,
    FastPathWarning,
    PackedLinear,
    apply,
    execution_label,
    pack_linears,
    resolve,
    unpack_linears,
)
from specdec.generate import StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.tree import DraftTree


def model(seed: int = 0):
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, seed=seed)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_packed_linear_equals_linear(bias, rows):
    lin = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear(lin)
    x = torch.randn(2, rows, 24)
    torch.testing.assert_close(packed(x), lin(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed.weight, lin.weight.detach(), atol=0, rtol=0)  # rebuilt exactly
    assert set(packed.state_dict()) == set(lin.state_dict())
    back = packed.to_linear()
    torch.testing.assert_close(back.weight, lin.weight, atol=0, rtol=0)


def test_packed_linear_refuses_other_dtypes():
    packed = PackedLinear(nn.Linear(8, 8))
    with pytest.raises(TypeError, match="float32 CPU"):
        packed(torch.randn(2, 8, dtype=torch.float64))


def test_apply_backend_keeps_outputs_state_dict_and_ties():
    stock, fast = model(1), model(1)
    state = {k: v.clone() for k, v in stock.state_dict().items()}
    report = apply(fast, "auto")
    assert report.weights == "packed" and report.packed > 0 and report.attention == GQA_ATTENTION
    assert execution_label(fast) == "packed" and resolve(fast)[0] == "packed"
    ids = torch.randint(0, 32, (1, 11))
    with torch.no_grad():
        torch.testing.assert_close(fast(ids).logits, stock(ids).logits, atol=1e-4, rtol=1e-4)
    saved = fast.state_dict()
    assert set(saved) == set(state)
    for k, v in state.items():
        torch.testing.assert_close(saved[k], v, atol=0, rtol=0)
    assert apply(fast, "packed").packed == report.packed  # idempotent
    assert apply(fast, "stock").weights == "stock"
    assert execution_label(fast) == "stock" and fast.config._attn_implementation == "sdpa"
    for k, v in state.items():
        torch.testing.assert_close(fast.state_dict()[k], v, atol=0, rtol=0)


def test_tied_weight_is_kept_and_shared():
    m = model(2)
    m.lm_head.weight = m.model.embed_tokens.weight  # tie
    apply(m, "auto")
    assert isinstance(m.lm_head, PackedLinear)
    assert m.lm_head.weight is m.model.embed_tokens.weight  # kept, not a copy
    o = m.model.layers[0].self_attn.o_proj
    assert isinstance(o, PackedLinear) and o._weight is None  # untied: released
    assert m.model.layers[0].self_attn.q_proj.stack.linear._weight is None  # stacked q/k/v: released too


def test_hooks_move_with_the_module():
    m = model(3)
    seen = []
    handle = m.lm_head.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    apply(m, "auto")
    with torch.no_grad():
        m(torch.tensor([[1, 2, 3]]))
    assert seen == [torch.Size([1, 3, 32])]
    handle.remove()  # the handle still reaches the hook where it now lives
    with torch.no_grad():
        m(torch.tensor([[1, 2, 3]]))
    assert len(seen) == 1


def test_fallback_warns_once_and_runs_stock():
    m = model(4).to(torch.float64)
    with pytest.warns(FastPathWarning, match="run float32 or bfloat16"):
        target = HFTarget(m, max_len=32)
    assert target.execution.weights == "stock" and execution_label(m) == "stock"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HFTarget(m, max_len=32, weights="stock")  # asking for stock is not a fallback: no warning


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_without_invariant_numerics_warns(dtype):
    """A bfloat16/float16 target that ``auto`` cannot give the row-invariant numerics (stock weights here) says that
    greedy output may then differ from vanilla's, once; asking for them off explicitly, or a float32 target, is
    silent. On a CPU without native instructions for the dtype, the one warning that says so says it too."""
    with pytest.warns(FastPathWarning, match="numerics.*greedy output may differ") as caught:
        target = HFTarget(model(4).to(dtype), max_len=32, weights="stock")
    assert not target.execution.invariant
    assert len([w for w in caught if "greedy output may differ" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.filterwarnings("error", ".*greedy output may differ", FastPathWarning)  # it may still warn it is slow
        HFTarget(model(4).to(dtype), max_len=32, weights="stock", invariant=False)
        HFTarget(model(4), max_len=32, weights="stock")


class QuantizedLinear(nn.Linear):
    """Stand-in for a quantized projection: an nn.Linear subclass the fast path must not touch."""


def test_linear_subclasses_are_left_stock_with_a_warning():
    m = model(5)
    attn = m.model.layers[0].self_attn
    old = attn.q_proj
    attn.q_proj = QuantizedLinear(old.in_features, old.out_features, bias=False)
    attn.q_proj.weight = old.weight
    with pytest.warns(FastPathWarning, match="not plain nn.Linear"):
        report = apply(m, "auto")
    assert report.weights == "packed" and report.skipped == 1
    assert type(attn.q_proj) is QuantizedLinear


def test_no_linear_at_all_falls_back():
    with pytest.warns(FastPathWarning, match="no plain nn.Linear"):
        assert apply(nn.Sequential(nn.ReLU(), nn.LayerNorm(4)), "auto").weights == "stock"


def test_unknown_or_conflicting_choices_are_refused():
    with pytest.raises(BackendError, match="unknown weights 'gpu-magic'"):
        HFTarget(model(6), max_len=16, weights="gpu-magic")
    with pytest.raises(BackendError, match="static shapes compile plain weights"):
        HFTarget(model(6), max_len=16, weights="packed", static_shapes=True)
    with pytest.raises(BackendError, match="static_shapes must be"):
        HFTarget(model(6), max_len=16, static_shapes="yes")


def test_pack_unpack_counts():
    m = model(7)
    packed, skipped = pack_linears(m)
    assert packed == 3 * 7 + 1 and skipped == 0  # q k v o gate up down per layer, + lm_head
    assert unpack_linears(m) == packed


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_fast_and_stock_targets_agree_on_trees_and_greedy_decoding(attn):
    stock_model, fast_model = model(8), model(8)
    for m in (stock_model, fast_model):
        m.config._attn_implementation = attn
    stock, fast = HFTarget(stock_model, max_len=64, weights="stock"), HFTarget(fast_model, max_len=64)
    assert fast.execution.weights == "packed"
    assert fast.model.config._attn_implementation == (GQA_ATTENTION if attn == "sdpa" else "eager")
    assert fast_model.config._attn_implementation == attn  # the caller's model is left as it was
    prompt = torch.randint(0, 32, (9,), generator=torch.Generator().manual_seed(0))
    tree = DraftTree.from_parents(torch.tensor([3, 5, 7, 9, 11]), torch.tensor([-1, 0, 0, 1, 1]), 2)
    for t in (stock, fast):
        t.prefill(prompt)
    torch.testing.assert_close(fast.forward_tree(tree).logits, stock.forward_tree(tree).logits, atol=1e-4, rtol=1e-4)
    sampling, stop = SamplingParams(), StopCondition(max_new_tokens=12)
    a = VanillaGenerator(stock).generate(prompt, sampling, stop).tokens
    b = VanillaGenerator(fast).generate(prompt, sampling, stop).tokens
    assert a == b


@pytest.mark.slow
def test_smollm2_fast_path_matches_stock():
    """The real model: same greedy tokens, tree logits within float32 noise, prepacked copy only for the tied head."""
    from specdec.assets import chat_ids, mtbench_prompts
    from specdec.models import load_smollm2

    model, tokenizer = load_smollm2()
    stock, fast = HFTarget(model, max_len=256, weights="stock"), HFTarget(model, max_len=256)
    assert fast.execution.weights in ("packed", "packed-vocab") and stock.model is model
    assert fast.model.lm_head.weight is model.model.embed_tokens.weight  # the tied head is shared, not copied
    ids = chat_ids(tokenizer, mtbench_prompts()[0])
    sampling, stop = SamplingParams(), StopCondition(max_new_tokens=24)
    assert VanillaGenerator(fast).generate(ids, sampling, stop).tokens == (
        VanillaGenerator(stock).generate(ids, sampling, stop).tokens
    )
    tree = DraftTree.from_parents(torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([-1, 0, 0, 1, 2, 4]), 3)
    for t in (stock, fast):
        t.prefill(ids)
    a, b = stock.forward_tree(tree).logits, fast.forward_tree(tree).logits
    torch.testing.assert_close(b, a, atol=2e-3, rtol=1e-3)
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_deepcopy_of_a_packed_model_keeps_ties_and_outputs():
    import copy

    m = model(9)
    m.lm_head.weight = m.model.embed_tokens.weight
    apply(m, "auto")
    clone = copy.deepcopy(m)
    assert execution_label(clone) == "packed"
    assert clone.lm_head.weight is clone.model.embed_tokens.weight  # still tied, in the copy
    assert clone.lm_head.weight is not m.lm_head.weight
    ids = torch.tensor([[4, 5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(clone(ids).logits, m(ids).logits, atol=0, rtol=0)
    apply(clone, "stock")
    assert execution_label(clone) == "stock" and execution_label(m) == "packed"


def test_int8_is_for_drafters_only():
    from specdec.backends import Int8Linear

    with pytest.raises(ValueError, match="for drafters only"):
        HFTarget(model(10), max_len=16, weights="int8")
    assert resolve(model(10), "auto", draft=True)[0] == "int8"
    assert resolve(model(10), "packed", draft=True)[0] == "packed"
    lin = nn.Linear(64, 48)
    q = Int8Linear(lin)
    x = torch.randn(5, 64)
    with torch.no_grad():
        ref = lin(x)
        err = (q(x) - ref).abs().max() / ref.abs().max()
    assert float(err) < 0.03  # int8 weights and activations: about 1 % of the output range
    assert q.weight is lin.weight


def test_auto_packs_what_pays_on_this_kind_of_cpu(monkeypatch):
    """``"auto"``: every linear where oneDNN wins (AMD), only vocabulary projections where MKL is fast (Intel)."""
    from specdec.backends import VOCAB_ROWS, cpu_gemm_profile

    def net() -> nn.Module:
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, VOCAB_ROWS))

    monkeypatch.setenv("SPECDEC_CPU_GEMM", "onednn")
    everything = net()
    assert cpu_gemm_profile() == "onednn" and apply(everything, "auto").packed == 2
    assert execution_label(everything) == "packed"

    monkeypatch.setenv("SPECDEC_CPU_GEMM", "mkl")
    stock, mixed = net(), net()
    mixed.load_state_dict(stock.state_dict())
    report = apply(mixed, "auto")
    assert report.packed == 1 and isinstance(mixed[2], PackedLinear) and type(mixed[0]) is nn.Linear
    assert report.weights == execution_label(mixed) == "packed-vocab" and "vocabulary projection" in report.reason
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(mixed(x), stock(x), atol=1e-4, rtol=1e-4)
    assert apply(mixed, "packed").packed == 2  # asked for by name: everything
    # a model with only small linears stays stock on such a CPU, without a fallback warning
    small = nn.Sequential(nn.Linear(8, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert apply(small, "auto").weights == "stock" and execution_label(small) == "stock"
    # a bad override is an error
    monkeypatch.setenv("SPECDEC_CPU_GEMM", "fast")
    with pytest.raises(ValueError, match="SPECDEC_CPU_GEMM"):
        cpu_gemm_profile()


def test_a_target_leaves_the_callers_model_as_it_was():
    """``HFTarget(model)`` runs a transformed copy that shares the caller's tensors: the caller's modules, attention
    implementation, training flag and parameters are unchanged, and the copy's outputs equal the stock model's.
    Control: ``in_place=True`` (the documented opt-in) does transform the caller's model."""
    m = model(11)
    m.train()
    before = {name: type(mod) for name, mod in m.named_modules()}
    params = {name: p for name, p in m.named_parameters()}
    target = HFTarget(m, max_len=32)
    assert target.execution.weights == "packed" and target.model is not m
    assert {name: type(mod) for name, mod in m.named_modules()} == before
    assert m.training and m.config._attn_implementation == "sdpa"
    assert all(p is params[name] for name, p in m.named_parameters())
    shared = {id(p) for p in target.model.parameters()}
    assert id(m.model.embed_tokens.weight) in shared  # tensors the backend does not change are shared, not copied
    ids = torch.tensor([[1, 2, 3, 4]])
    m.eval()
    with torch.no_grad():
        torch.testing.assert_close(target.model(ids).logits, m(ids).logits, atol=1e-4, rtol=1e-4)
    HFTarget(m, max_len=32, in_place=True)
    assert isinstance(m.lm_head, PackedLinear)  # the control: in place means in place


def test_static_shapes_leave_no_process_wide_setting_changed():
    """The compiled path raises dynamo's recompile limit for its own calls only."""
    limit = torch._dynamo.config.recompile_limit
    target = HFTarget(model(12), max_len=32, static_shapes=True, buckets=(1,))
    VanillaGenerator(target).generate(torch.tensor([1, 2, 3]), SamplingParams(), StopCondition(max_new_tokens=2))
    assert torch._dynamo.config.recompile_limit == limit


def test_a_low_precision_dtype_without_native_instructions_is_kept_with_one_warning(monkeypatch) -> None:
    """bf16 on a CPU without avx512_bf16/amx_bf16 runs (through float32 conversions): the target keeps the dtype and
    says so once; with the instructions there is no such warning."""
    import warnings

    from specdec.backends import cpu
    from specdec.models import tiny_llama
    from specdec.target import HFTarget

    model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=2, seed=0).to(torch.bfloat16)
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2"}))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        target = HFTarget(model, max_len=32)
    slow = [w for w in seen if "without native instructions" in str(w.message)]
    assert len(slow) == 1 and "avx512_bf16" in str(slow[0].message)
    assert next(target.model.parameters()).dtype == torch.bfloat16
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        HFTarget(model, max_len=32)
    assert not [w for w in seen if "without native instructions" in str(w.message)]

"""Row-invariant numerics: a row's logits are bitwise the same in a 1-token step and in a tree forward.

With them, greedy speculative output equals vanilla greedy output token for token, with no near-tie allowance
(``tests/test_greedy_exact.py`` allows near-ties on the default float32 path). The negative controls show what the
exact comparisons catch: without the invariant numerics a bfloat16 SmolLM2 tree row differs from its 1-token step.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import nn

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends import (
    GQA_ATTENTION,
    GQA_INVARIANT,
    BackendError,
    PackedLinear,
    cpu,
    execution_label,
    kernels,
    row_probe,
)
from specdec.backends.gqa import _gqa_attention_invariant, _gqa_sdpa
from specdec.generate import StopCondition
from specdec.kvcache import PositionCache
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2, tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.tree import DraftTree
from tests.factories import skip_unless_packs

BF16 = frozenset({"avx512_bf16"})


@pytest.fixture
def native_bf16(monkeypatch):
    """An AMD-like CPU with native bfloat16, whatever this CPU is: the flags of the packed bfloat16 path's condition
    and oneDNN's GEMM profile (where ``auto`` packs every linear). Only the choice is simulated: a test that packs
    bfloat16 also needs this CPU's oneDNN to pack it (:func:`tests.factories.skip_unless_packs`)."""
    monkeypatch.setattr(cpu, "cpu_flags", lambda: BF16)
    monkeypatch.setenv("SPECDEC_CPU_GEMM", "onednn")


#: The two forms of a property of the invariant numerics: bfloat16, where ``auto`` turns them on (and this CPU packs
#: it), and float32 with ``invariant=True``, which every CPU runs.
FORMS = [(torch.float32, True), (torch.bfloat16, "auto")]


def tiny(dtype: torch.dtype = torch.float32) -> nn.Module:
    return tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0).to(dtype)


def test_auto_is_on_for_packed_bfloat16(native_bf16) -> None:
    skip_unless_packs(torch.bfloat16)
    bf16 = HFTarget(tiny(torch.bfloat16), max_len=32).execution
    assert bf16.weights == "packed" and bf16.invariant and bf16.attention == GQA_INVARIANT
    assert "row-invariant numerics" in bf16.describe() and bf16.label == "packed+invariant"
    off = HFTarget(tiny(torch.bfloat16), max_len=32, invariant=False)
    assert not off.execution.invariant and off.execution.attention == GQA_ATTENTION
    assert not any(m.pad_single_row for m in off.model.modules() if kernels.runs_packed(m))


def test_invariant_is_off_for_float32_unless_asked_and_pads_where_probed() -> None:
    fp32 = HFTarget(tiny(), max_len=32, weights="packed").execution
    assert not fp32.invariant and fp32.attention == GQA_ATTENTION
    forced = HFTarget(tiny(), max_len=32, weights="packed", invariant=True)
    assert forced.execution.invariant and forced.execution.attention == GQA_INVARIANT
    probed = [
        row_probe.single_row_padding(kernels.packed_linear(m)) for m in forced.model.modules() if kernels.runs_packed(m)
    ]
    assert [m.pad_single_row for m in forced.model.modules() if kernels.runs_packed(m)] == probed
    assert forced.execution.padded == sum(probed)


def test_invariant_refuses_what_it_cannot_serve(native_bf16) -> None:
    with pytest.raises(BackendError, match="every linear packed"):
        HFTarget(tiny(), max_len=32, weights="stock", invariant=True)
    model = tiny()
    with pytest.raises(BackendError, match="every linear packed"):
        HFTarget(model, max_len=32, weights="stock", invariant=True, in_place=True)
    assert execution_label(model) == "stock"  # refused before anything changed
    with pytest.raises(BackendError, match="invariant must be"):
        HFTarget(tiny(), max_len=32, invariant="yes")
    stock = HFTarget(tiny(torch.bfloat16), max_len=32, weights="stock").execution  # auto: off, and says why
    assert not stock.invariant and "greedy output may differ" in stock.reason


@pytest.mark.parametrize("measured", ["stock", None])
def test_invariant_true_packs_every_linear_whatever_auto_measured(monkeypatch, tmp_path, measured) -> None:
    """``invariant=True`` with ``weights="auto"`` packs every linear even where the measured table chose stock, or
    could not decide (too noisy) and the rule keeps stock (MKL's on an Intel CPU): the numerics were asked for, and a
    noisy measurement must not turn them into an error (a CI run on the Xeon f6m207 failed so). Control: the same
    table and rule leave linears stock under ``invariant="auto"``, so the patches do reach the choice."""
    from specdec.backends import choice
    from specdec.backends.kernel_times import KernelTable

    skip_unless_packs(torch.float32)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECDEC_SKINNY", "off")
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)  # a forced profile would mean the rule, not measuring
    monkeypatch.setattr(choice, "cpu_gemm_profile", lambda: "mkl")  # the rule where the table is undecided: stock
    monkeypatch.setattr(KernelTable, "choice", lambda self, shape: measured)
    control = HFTarget(tiny(), max_len=48, static_shapes=False).execution
    assert control.weights != "packed" and not control.invariant  # stacked groups may win their own measurement
    target = HFTarget(tiny(), max_len=64, static_shapes=False, invariant=True)
    assert target.execution.invariant and target.execution.weights == "packed"
    assert all(rows_match_steps(target.model, True, target=target))


def test_bfloat16_packing_needs_native_instructions(monkeypatch) -> None:
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.warns(kernels.FastPathWarning, match="without native instructions"):  # one warning: the slow dtype's
        target = HFTarget(tiny(torch.bfloat16), max_len=32)
    assert target.execution.weights == "stock" and not target.execution.invariant
    assert "native bfloat16" in target.execution.reason


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_linear_runs_its_dtype_and_pads_single_rows(dtype) -> None:
    skip_unless_packs(dtype)
    torch.manual_seed(0)
    linear = nn.Linear(96, 40).to(dtype)
    packed = PackedLinear(linear, keep_weight=True)
    x = torch.randn(5, 96).to(dtype)
    with torch.no_grad():
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(packed(x), linear(x), atol=tol, rtol=tol)
        packed.pad_single_row = True
        assert torch.equal(packed(x[:1]), packed(x[:2])[:1])
        assert packed(x[:1]).dtype == dtype
    with pytest.raises(TypeError, match="runs"):
        packed(x.double())


def tree_and_paths(vocab: int, seed: int) -> tuple[DraftTree, list[list[int]]]:
    """A branching tree of 9 nodes (root, two children, their children) and the token path to every node."""
    g = torch.Generator().manual_seed(seed)
    parents = torch.tensor([-1, 0, 0, 1, 1, 2, 3, 3, 5])
    tokens = torch.randint(0, vocab, (9,), generator=g)
    tree = DraftTree.from_parents(tokens, parents, 3)
    paths = []
    for i in range(9):
        path, j = [], i
        while j >= 0:
            path.insert(0, int(tokens[j]))
            j = int(parents[j])
        paths.append(path)
    return tree, paths


@torch.no_grad()
def rows_match_steps(
    model: nn.Module | None,
    invariant,
    seed: int = 0,
    context: int = 40,
    target: HFTarget | None = None,
    tree_paths: tuple[DraftTree, list[list[int]]] | None = None,
) -> list[bool]:
    """For every node of a tree (``tree_paths``: the tree and each node's token path; default a branching tree of 9
    nodes, :func:`tree_and_paths`): is its tree-forward logits row bitwise its path's 1-token-step logits?

    One target serves both sides (``target``, or one built here): the tree forward over the prompt, then each path's
    1-token steps from the prompt again (a step writes where the tree's rows were and sees only the prompt and its own
    path, as a step after a rejected tree does)."""
    # weights="packed": invariant numerics need every linear packed, which auto does not choose on every CPU
    target = target or HFTarget(model, max_len=context + 16, weights="packed", invariant=invariant)
    assert target.execution.invariant == invariant
    prompt = torch.randint(0, target.vocab_size, (context,), generator=torch.Generator().manual_seed(seed + 1))
    tree, paths = tree_paths or tree_and_paths(target.vocab_size, seed)
    target.prefill(prompt)
    rows = target.forward_tree(tree).logits.clone()
    same = []
    for i, path in enumerate(paths):
        target.length = context
        for token in path:
            logits = target.decode_one(torch.tensor(token)).logits
        same.append(torch.equal(logits[0], rows[i]))
    return same


@functools.cache
def smollm2(dtype: torch.dtype):
    return load_smollm2(dtype=dtype)


@pytest.mark.slow
def test_smollm2_bfloat16_tree_rows_are_bitwise_single_steps() -> None:
    skip_unless_packs(torch.bfloat16)  # the float32 form: the next test
    model, _ = smollm2(torch.bfloat16)
    target = HFTarget(model, max_len=505 + 16, weights="packed", invariant=True)  # one for every context
    # 505 + 1 keys in a step, 505 + 9 in the tree: SDPA's CPU kernel splits the keys into blocks of 512
    for context in (40, 186, 505):
        assert all(rows_match_steps(model, True, context=context, target=target)), f"context {context}"
    # negative control: the same comparison without the invariant numerics fails (the test can fail)
    assert not all(rows_match_steps(model, False))


@pytest.mark.slow
def test_smollm2_float32_invariant_tree_rows_are_bitwise_single_steps() -> None:
    model, _ = smollm2(torch.float32)
    assert all(rows_match_steps(model, True, seed=2))


@pytest.mark.heavy
def test_smollm2_bfloat16_eagle3_greedy_equals_vanilla_token_for_token() -> None:
    """No near-tie allowance: the bfloat16 path's greedy speculative output is vanilla's, on two MT-bench prompts whose
    output diverged at tokens 113 and 93 while the key sum ran in float32 (contexts across 192 keys). In CI's heavy
    step: 82 s where bfloat16 packs without native instructions (an Intel Xeon, family 6 model 106); the property at
    the heart of it, tree rows bitwise 1-token steps, runs in the quick suite (above)."""
    skip_unless_packs(torch.bfloat16)  # float32's greedy = vanilla: tests/test_greedy_exact.py
    model, tokenizer = smollm2(torch.bfloat16)
    target = HFTarget(model, max_len=512, weights="packed", invariant=True)
    vanilla, spec = build_method("vanilla", target), build_method("eagle3", target, MethodOptions())
    stop, greedy = StopCondition(max_new_tokens=128), SamplingParams(temperature=0.0)
    for q in (mtbench_prompts()[1], mtbench_prompts()[16]):  # mtbench/82, mtbench/97
        ids = chat_ids(tokenizer, q)
        result = spec.generate(ids, greedy, stop)
        assert result.tokens == vanilla.generate(ids, greedy, stop).tokens
        assert result.metrics.tau > 1.1  # accepted drafts, not only bonus tokens


@pytest.mark.parametrize("dtype, on", FORMS)
def test_invariant_numerics_get_their_own_cost_curve(native_bf16, dtype, on) -> None:
    """The adaptive budget caches one cost curve per execution: the invariant attention costs more per tree row."""
    from specdec.budget import curve_path

    skip_unless_packs(dtype)
    model = tiny(dtype)
    invariant = HFTarget(model, max_len=32, weights="packed", invariant=on).model
    variable = HFTarget(model, max_len=32, weights="packed", invariant=False).model
    assert curve_path(invariant, torch.device("cpu"), 2) != curve_path(variable, torch.device("cpu"), 2)
    assert curve_path(invariant, torch.device("cpu"), 2).name.endswith("packed+invariant.json")


def test_a_row_that_sees_no_key_gets_zeros_not_nan() -> None:
    """A left-padded batch (the continuous batcher's 2-D mask): padding rows see no key. The invariant attention
    gives them 0 as SDPA does, so no NaN reaches the cache, and the real rows match the ordinary attention."""
    model = tiny()
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        out = {
            inv: HFTarget(model, max_len=32, weights="packed", invariant=inv).model(input_ids=ids, attention_mask=mask)
            for inv in (True, False)
        }
    assert torch.isfinite(out[True].logits).all()
    torch.testing.assert_close(out[True].logits[0, 3:], out[False].logits[0, 3:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out[True].logits[1], out[False].logits[1], atol=1e-4, rtol=1e-4)


def test_small_lm_drafter_keeps_the_targets_numerics(native_bf16, monkeypatch) -> None:
    """The small-LM drafter runs the target's own modules: building it must not switch their row padding (a GEMM
    whose single rows need padding, so that invariant numerics pad every linear and variable ones none)."""
    from specdec.drafters import SmallLMDrafter

    _fake_gemm(monkeypatch, lambda rows: rows == 1)
    forms = [(torch.float32, True), (torch.float32, False)]
    forms += [] if cpu.packing_error(torch.bfloat16) else [(torch.bfloat16, False)]
    for dtype, invariant in forms:
        target = HFTarget(tiny(dtype), max_len=32, weights="packed", invariant=invariant)
        SmallLMDrafter.from_target(target, num_layers=1)
        padding = {m.pad_single_row for m in target.model.modules() if kernels.runs_packed(m)}
        assert padding == {invariant}, dtype


@pytest.mark.parametrize("dtype, on", FORMS)
def test_invariant_targets_cache_keys_and_values_in_float64(native_bf16, dtype, on) -> None:
    """The invariant attention runs in float64 and reads its keys/values from a float64 cache (no conversion per
    forward); every other path keeps the model's dtype, and a static cache refuses another dtype."""
    from specdec.drafters import SmallLMDrafter

    skip_unless_packs(dtype)
    target = HFTarget(tiny(dtype), max_len=32, weights="packed", invariant=on)
    assert target.execution.invariant and target.execution.cache_dtype == torch.float64
    target.prefill(torch.arange(5))
    target.forward_tree(DraftTree.from_parents(torch.tensor([1, 2]), torch.tensor([-1, 0]), 1))
    layer = target.cache.layers[0]
    assert layer.keys.dtype == layer.values.dtype == torch.float64
    drafter = SmallLMDrafter.from_target(target, num_layers=1)  # the target's modules, so its attention too
    assert drafter.runner.cache.layers[0].dtype == torch.float64
    plain = HFTarget(tiny(dtype), max_len=32, weights="packed", invariant=False)
    plain.prefill(torch.arange(5))
    assert plain.execution.cache_dtype is None and plain.cache.layers[0].keys.dtype == dtype
    with pytest.raises(ValueError, match="static cache"):
        PositionCache(2, 8, static=True, dtype=torch.float64)


@pytest.mark.parametrize("masked", [False, True])
def test_invariant_attention_is_the_same_on_a_cache_of_the_models_dtype(masked) -> None:
    """bfloat16 keys/values are exact in float64: the float64 cache changes the cost, not one bit of the output
    (a mask, a 1-row step and the query's dtype kept), of the invariant attention or of the ordinary one."""

    class Module:
        is_causal = True

    g = torch.Generator().manual_seed(0)
    t, s = (4, 37) if masked else (1, 37)
    q = torch.randn(1, 9, t, 16, generator=g).bfloat16()
    k, v = (torch.randn(1, 3, s, 16, generator=g).bfloat16() for _ in range(2))
    mask = torch.rand(1, 1, t, s, generator=g) < 0.7 if masked else None
    out, _ = _gqa_attention_invariant(Module(), q, k, v, mask)
    again, _ = _gqa_attention_invariant(Module(), q, k.double(), v.double(), mask)
    assert out.dtype == torch.bfloat16 and out.shape == (1, t, 9, 16)
    assert torch.equal(out, again)
    # the ordinary attention reads either cache too (same bits): switching a target's attention keeps it working
    assert torch.equal(_gqa_sdpa(Module(), q, k, v, mask)[0], _gqa_sdpa(Module(), q, k.double(), v.double(), mask)[0])


@pytest.mark.parametrize("invariant", [True, False])
def test_no_forward_reads_a_cache_slot_it_did_not_write(monkeypatch, invariant) -> None:
    """Cache buffers are allocated uninitialised (``PositionLayer``): filled with NaN here, a read of a slot no
    forward wrote would reach the logits (a masked NaN still poisons attention: 0 * NaN) and fail the finite-logits
    check or change the tokens. Vanilla, a small-LM drafter (its own cache) and dynamic and stochastic trees with
    their commits run over them; the tokens equal those of zero-filled buffers."""
    from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
    from specdec.kvcache import PositionLayer
    from tests.factories import make_drafter, make_policy

    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=3)
    prompt = torch.randint(0, 64, (9,), generator=torch.Generator().manual_seed(4))
    stop = StopCondition(max_new_tokens=24)

    def run() -> list[list[int]]:
        target = HFTarget(model, max_len=64, weights="packed", invariant=invariant)
        out = [VanillaGenerator(target).generate(prompt, SamplingParams(temperature=0.0), stop).tokens]
        for policy, temperature in (("dynamic", 0.0), ("stochastic", 1.0)):
            drafter = make_drafter("small-lm", target.model, 64)
            gen = SpeculativeGenerator(target, drafter, make_policy(policy))  # each call picks its verifier
            out.append(gen.generate(prompt, SamplingParams(temperature=temperature, seed=5), stop).tokens)
        return out

    allocate = PositionLayer.lazy_initialization

    def filled_with(value: float):
        def lazy_initialization(self, key_states, value_states):
            allocate(self, key_states, value_states)
            self.keys.fill_(value)
            self.values.fill_(value)

        return lazy_initialization

    monkeypatch.setattr(PositionLayer, "lazy_initialization", filled_with(0.0))
    zero_filled = run()
    monkeypatch.setattr(PositionLayer, "lazy_initialization", filled_with(float("nan")))
    assert run() == zero_filled
    # negative control: a forward that does read unwritten slots (the length moved past the written prefix) fails
    target = HFTarget(model, max_len=64, weights="packed", invariant=invariant)
    target.prefill(prompt)
    target.length += 3
    with torch.no_grad():
        logits = target.decode_one(torch.tensor(1)).logits
    assert not torch.isfinite(logits).all()


def _fake_gemm(monkeypatch, variant) -> None:
    """Replace the packed GEMM by one that sums a row's products in reversed order where ``variant(rows)`` says so
    (another grouping of the same sums, as a kernel chosen by the number of rows would have). A second call replaces
    the first fake, it does not wrap it."""
    real = getattr(PackedLinear.gemm, "real", PackedLinear.gemm)

    def gemm(self, x):
        if not variant(x.reshape(-1, x.shape[-1]).shape[0]):
            return real(self, x)
        w = self.weight.float()
        return (x.float().flip(-1) @ w.flip(-1).T).to(x.dtype)

    gemm.real = real
    monkeypatch.setattr(PackedLinear, "gemm", gemm)
    monkeypatch.setattr(row_probe, "_PROBED", {})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_probe_finds_a_single_row_kernel_and_a_row_variant_one(monkeypatch, dtype) -> None:
    """row_invariance's negative controls: a GEMM that groups one row's sums otherwise is padded, one that groups
    them otherwise above 32 (or 16) rows runs in blocks of 32 (16), one whose grouping changes with the number of rows
    within every block is refused; the order-sensitive values show a grouping that normal random values hide behind
    bfloat16 rounding."""
    skip_unless_packs(dtype)
    torch.manual_seed(0)
    linear = PackedLinear(nn.Linear(1536, 96, bias=False).to(dtype))
    pad, block = row_probe.row_invariance(linear)  # whatever this CPU's kernel does: no error
    assert pad in (False, True) and block in (None, *row_probe.ROW_BLOCKS)  # (False, None) on AMD Zen 4
    _fake_gemm(monkeypatch, lambda rows: rows == 1)  # the fakes add to what the real kernel does
    assert row_probe.row_invariance(linear) == (True, block) and row_probe.single_row_padding(linear) is True
    for above in (32, 16):  # as oneDNN's bfloat16 GEMM above 32 rows on an Intel Xeon with AMX
        _fake_gemm(monkeypatch, lambda rows, above=above: rows > above)
        assert row_probe.row_invariance(linear) == (pad, min(above, block or above))
    _fake_gemm(monkeypatch, lambda rows: rows % 2 == 1)
    with pytest.raises(row_probe.RowVariantKernelError, match="in blocks of 16 rows, for 3$"):
        row_probe.row_invariance(linear)


def test_a_blocked_linear_gives_every_row_the_bits_of_its_block(monkeypatch) -> None:
    """``row_block``: a GEMM of more rows runs block by block, so a row of a 40-row forward gets the bits it gets
    among 8 (the fake kernel groups sums otherwise above 32 rows); unblocked it does not (the control)."""
    skip_unless_packs(torch.float32)
    torch.manual_seed(0)
    packed = PackedLinear(nn.Linear(1536, 96, bias=False))
    x = row_probe._order_sensitive(torch.Generator().manual_seed(1), 40, 96, 1536)[0]
    _fake_gemm(monkeypatch, lambda rows: rows > 32)
    with torch.no_grad():
        assert not torch.equal(packed(x)[:8], packed(x[:8]))  # the control: one 40-row GEMM
        row_probe.set_row_padding(packed, True)
        assert packed.row_block == 32  # and single rows padded where this CPU's kernel needs it
        assert torch.equal(packed(x.reshape(2, 20, -1)).reshape(40, -1)[32:], packed(x[32:]))
        assert torch.equal(packed(x)[:8], packed(x[:8])) and torch.equal(copy.deepcopy(packed)(x), packed(x))
        assert torch.equal(packed(x[:33])[17:], packed(x[17:33]))  # 33 rows run as 17 and 16
        row_probe.set_row_padding(packed, False)
        assert packed.row_block is None


def test_a_tree_of_40_nodes_gets_its_paths_bits_where_the_kernel_regroups_above_32_rows(monkeypatch) -> None:
    """A target's tree forward of 40 rows under invariant numerics, where the (fake) kernel groups sums otherwise above
    32 rows (as oneDNN's bfloat16 GEMM does on an Intel Xeon with AMX): every node's row equals its path's 1-token
    steps bit for bit, the stacked groups' GEMMs blocked too; with the blocks taken off, rows differ (the control)."""
    skip_unless_packs(torch.float32)
    _fake_gemm(monkeypatch, lambda rows: rows > 32)
    target = HFTarget(tiny(), max_len=64, weights="packed", invariant=True)
    packed = [kernels.packed_linear(m) for m in target.model.modules() if kernels.runs_packed(m)]
    assert any(type(m).__name__ == "StackedSlice" for m in target.model.modules())
    assert packed and all(lin.row_block == 32 for lin in packed)
    tokens = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(3))
    tree = DraftTree.from_parents(tokens, torch.tensor([-1] + [0] * 39), 1)  # a root and 39 children
    paths = [[int(tokens[0])]] + [[int(tokens[0]), int(t)] for t in tokens[1:]]
    assert all(rows_match_steps(None, True, context=8, target=target, tree_paths=(tree, paths)))
    for lin in packed:
        lin.row_block = None
    assert not all(rows_match_steps(None, True, context=8, target=target, tree_paths=(tree, paths)))


def test_a_kernel_that_is_not_row_invariant_turns_the_numerics_off(monkeypatch, native_bf16) -> None:
    """``auto`` gives the invariant numerics up with one warning and says why; ``invariant=True`` refuses."""

    def refuse(linear):
        raise row_probe.RowVariantKernelError("the packed probe GEMM gives other bits for 3 rows than for more")

    monkeypatch.setattr(row_probe, "row_invariance", refuse)
    with pytest.raises(BackendError, match="cannot be served on this CPU"):  # every CPU: float32, asked for
        HFTarget(tiny(), max_len=32, weights="packed", invariant=True)
    skip_unless_packs(torch.bfloat16)
    with pytest.warns(kernels.FastPathWarning, match="row-invariant numerics off"):
        target = HFTarget(tiny(torch.bfloat16), max_len=32)
    assert not target.execution.invariant and target.execution.attention == GQA_ATTENTION
    assert "other bits for 3 rows" in target.execution.reason and target.execution.cache_dtype is None
    with pytest.raises(BackendError, match="cannot be served on this CPU"):
        HFTarget(tiny(torch.bfloat16), max_len=32, invariant=True)


def test_the_continuous_batcher_caches_in_float64_under_the_invariant_attention() -> None:
    """The batcher (``regenerate --invariant on``) keys its cache dtype on the model's attention, as targets do."""
    from specdec.backends import apply
    from specdec.train.continuous import _Batch

    for invariant, dtype in ((True, torch.float64), (False, None)):
        model = tiny()
        apply(model, "packed", static_shapes=False, invariant=invariant)
        batch = _Batch(model, batch=2, capacity=16)
        assert batch.cache_dtype == dtype and batch.cache.layers[0].dtype == dtype

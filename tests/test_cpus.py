"""Every x86 CPU: the fast path where an instruction set is missing, and the kernel choice by measurement.

The CPUs met so far differ in what oneDNN and torch run: AVX2 only (AMD Zen 3: oneDNN refuses to pack bfloat16),
AVX-512 with native bfloat16 (Zen 4, Zen 5), AMX (Intel Xeon). A missing instruction set is simulated here by
patching the flags and oneDNN's answer to the packing trial (``cpu.cpu_flags``, ``cpu._pack_trial``), so each
CPU's fallback is proven on every CPU; the measured choice is checked with planted timings (which kernel wins is
this CPU's business, what ``auto`` does with a table is not) and once for real.
"""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

from specdec.backends import FastPathWarning, choice, cpu, execution_label, kernel_times, kernels, measured
from specdec.budget import curve_path, forward_cost_curve
from specdec.drafters import NGramDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing.broken import ResidualNotRenormalisedVerifier
from specdec.testing.e2e import exact_sequence_distribution
from specdec.testing.pipeline import pipeline_law
from specdec.trees import DynamicTreePolicy

#: oneDNN's refusal on AMD Zen 3 (torch 2.13), as the packing trial reports it.
ZEN3_REFUSAL = "mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl"


@pytest.fixture
def avx2_only(monkeypatch):
    """An AVX2-only CPU (AMD Zen 3) on whatever CPU runs the suite: no native bfloat16, and a oneDNN that refuses to
    pack bfloat16 while float32 packs."""
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(cpu, "_pack_trial", lambda dtype: None if dtype == torch.float32 else ZEN3_REFUSAL)


def caught(build) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = build()
    return out, [str(w.message) for w in seen if issubclass(w.category, FastPathWarning)]


def test_the_packing_trial_matches_this_cpu() -> None:
    """float32 packs on every x86 CPU; bfloat16 packs exactly where oneDNN's instruction sets are (AVX-512 BW/VL/DQ or
    AVX-NE-CONVERT), whatever the trial is told by flags: it asks oneDNN itself."""
    assert cpu.packing_error(torch.float32) is None
    flags = cpu.cpu_flags()
    if flags:  # /proc/cpuinfo readable
        expected = {"avx512bw", "avx512vl", "avx512dq"} <= flags or "avx_ne_convert" in flags
        assert (cpu.packing_error(torch.bfloat16) is None) == expected, cpu.packing_error(torch.bfloat16)
    assert "float16" in cpu.packing_error(torch.float16)


def test_bfloat16_that_cannot_be_packed_runs_stock_with_one_warning(avx2_only) -> None:
    model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=2, seed=0)
    bf16 = model.to(torch.bfloat16)
    for weights in ("auto", "packed"):
        target, said = caught(lambda w=weights: HFTarget(bf16, max_len=32, weights=w))
        assert target.execution.weights == "stock" and not target.execution.invariant
        assert len(said) == 1 and "without native instructions" in said[0], said
        assert "greedy output may differ" in said[0]
        if weights == "packed":  # asked for by name: the one warning says why it is not
            assert "cannot pack torch.bfloat16" in said[0] and "avx512bw" in target.execution.reason
    fp32 = tiny_llama(vocab_size=32, hidden_size=32, num_layers=2, seed=0)
    target, said = caught(lambda: HFTarget(fp32, max_len=32, weights="packed"))
    assert target.execution.weights == "packed" and not said  # float32 still packs there


def test_bfloat16_that_cannot_be_packed_decodes_exactly(avx2_only) -> None:
    """The fallback's output: greedy = the model's own greedy ``generate``; sampled speculative decoding's exact law
    (enumerated through the loop, :func:`~specdec.testing.pipeline.pipeline_law`) = the target's. Negative control: a
    verifier that does not renormalise the residual, on the same fallback target, moves the law."""
    model = exactness_model().to(torch.bfloat16)
    target, said = caught(lambda: HFTarget(model, max_len=64))
    assert target.execution.weights == "stock" and len(said) == 1
    assert_decodes_exactly(model, target)


def exactness_model() -> torch.nn.Module:
    return tiny_llama(vocab_size=6, hidden_size=16, num_layers=2, logit_scale=1.5, seed=1)


def assert_decodes_exactly(model: torch.nn.Module, target: HFTarget) -> None:
    """Greedy = ``model``'s own greedy ``generate``; sampled speculative decoding's exact law through the loop =
    the target's; negative control: a verifier that does not renormalise the residual moves the law."""
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    greedy, stop = SamplingParams(temperature=0.0), StopCondition(max_new_tokens=16, eos_token_ids=())
    tokens = VanillaGenerator(target).generate(prompt, greedy, stop).tokens
    with torch.no_grad():
        hf = model.generate(prompt[None], do_sample=False, max_new_tokens=16, min_new_tokens=16, pad_token_id=0)
    assert tokens == hf[0, len(prompt) :].tolist()
    hot = SamplingParams(temperature=1.0)
    exact = exact_sequence_distribution(model, prompt, hot, 3)

    def law(verifier=None) -> torch.Tensor:
        decoder = SpeculativeGenerator(target, NGramDrafter(vocab_size=6), DynamicTreePolicy(2, 3, 6), verifier)
        return pipeline_law(decoder, prompt, hot, 3).law

    assert (law() - exact).abs().max() < 1e-6
    assert (law(ResidualNotRenormalisedVerifier()) - exact).abs().max() > 1e-4  # the check can fail


# ------------------------------------------------------------------------------------------ measured choice
@pytest.fixture
def measuring(monkeypatch, tmp_path):
    """Measuring on (the suite's conftest forces the rule), with a cache of its own."""
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_times, "_TABLES", {})
    return tmp_path


def planted(monkeypatch, faster, calls: list | None = None) -> None:
    """``time_shape`` answers with planted times, proportional to the weight's size: ``faster(in, out)`` names the
    kernel that takes 1 us per 1,000 weights (the other takes twice that); ``calls`` collects the shapes measured."""

    def time_shape(mods, rows=kernel_times.ROWS, repeats=kernel_times.REPEATS):
        first = mods["stock"][0]
        if calls is not None:
            calls.append((first.in_features, first.out_features))
        win = faster(first.in_features, first.out_features)
        size = first.in_features * first.out_features * 1e-9
        return {k: {n: [size if k == win else 2 * size] * repeats for n in rows} for k in mods}

    monkeypatch.setattr(kernel_times, "time_shape", time_shape)


def model_fp32():
    return tiny_llama(vocab_size=96, hidden_size=32, num_layers=2, seed=0)


def packed_shapes(target: HFTarget) -> set[tuple[int, int]]:
    return {
        (m.in_features, m.out_features)
        for m in (kernels.packed_linear(x) for x in target.model.modules() if kernels.runs_packed(x))
    }


def test_auto_packs_what_measured_faster_and_caches_it_per_machine(measuring, monkeypatch) -> None:
    calls: list = []
    planted(monkeypatch, lambda n_in, n_out: "packed" if n_out == 96 else "stock", calls)  # only the vocabulary
    target = HFTarget(model_fp32(), max_len=32)
    assert target.execution.weights == execution_label(target.model) == "packed-some"  # 96 < VOCAB_ROWS
    assert packed_shapes(target) == {(32, 96)} and "kernels chosen by measurement" in target.execution.reason
    measured_once = sorted(calls)
    assert (32, 96) in measured_once and len(measured_once) == len(set(measured_once))  # each shape once
    [path] = (measuring / "kernels").glob("float32-*.json")
    assert json.loads(path.read_text())["key"] == measured.machine_key(torch.float32)
    planted(monkeypatch, lambda n_in, n_out: "packed", calls)  # would pack everything, were it asked
    monkeypatch.setattr(kernel_times, "_TABLES", {})  # a new process: the cache file answers
    assert packed_shapes(HFTarget(model_fp32(), max_len=32)) == {(32, 96)} and sorted(calls) == measured_once
    # another CPU (or torch, or thread count) never reuses the table: it is measured anew, under another name
    info = {**cpu.cpu_info(), "model name": "Another CPU"}
    monkeypatch.setattr(kernel_times, "cpu_info", lambda: info)
    target = HFTarget(model_fp32(), max_len=32)
    assert target.execution.weights == "packed" and len(calls) == 2 * len(measured_once)
    assert len(list((measuring / "kernels").glob("float32-*.json"))) == 2


def test_a_measured_subset_carries_to_siblings_and_the_cost_curve(measuring, monkeypatch) -> None:
    """A target whose measured choice packs some linears (``"packed-some"``, seen on an Intel Xeon, family 6 model
    106) gives its siblings the same subset: the dynamic tree's cost curve probes a sibling, which once failed there
    with ``unknown weights 'packed-some'`` before the first token of every speculative method."""
    planted(monkeypatch, lambda n_in, n_out: "packed" if n_out == 96 else "stock")
    target = HFTarget(model_fp32(), max_len=32)
    assert target.weights_choice == "auto"
    sibling = target.sibling(max_len=24)
    assert sibling.execution.weights == "packed-some" and packed_shapes(sibling) == {(32, 96)}
    curve = forward_cost_curve(target, sizes=(1, 2), repeats=1, context=8)
    assert curve.sizes == (1, 2) and packed_shapes(target) == {(32, 96)}


def test_stock_measured_faster_everywhere_is_a_choice_not_a_fallback(measuring, monkeypatch) -> None:
    planted(monkeypatch, lambda n_in, n_out: "stock")
    target, said = caught(lambda: HFTarget(model_fp32(), max_len=32))
    assert target.execution.weights == "stock" and not said
    assert "stock ran every linear faster" in target.execution.reason


def test_a_failed_or_tied_measurement_leaves_the_shape_to_the_rule(measuring, monkeypatch) -> None:
    """A kernel raising, a time of zero or noisy passes: one warning naming the shape, the rule (oneDNN's profile
    here: pack) decides it; a tie (under 5 %) is the rule's too, without a warning."""
    real = measured.time_shape

    def broken(mods, rows=kernel_times.ROWS, repeats=kernel_times.REPEATS):
        n_in, n_out = mods["stock"][0].in_features, mods["stock"][0].out_features
        if (n_in, n_out) == (32, 96):
            raise RuntimeError("a kernel failed")
        if n_out == 64:  # gate/up: a time of zero
            return {k: {n: [0.0] * repeats for n in rows} for k in mods}
        if n_in == 64:  # down: noisy passes
            return {k: {n: [1e-3, 1e-3, 9e-3, 9e-3, 1e-3, 9e-3, 1e-3] for n in rows} for k in mods}
        return {k: {n: [1e-3 if k == "stock" else 1.02e-3] * repeats for n in rows} for k in mods}  # a tie

    monkeypatch.setattr(kernel_times, "time_shape", broken)
    monkeypatch.setattr(choice, "cpu_gemm_profile", lambda: "onednn")  # the rule's profile, where choice reads it
    target, said = caught(lambda: HFTarget(model_fp32(), max_len=32))
    assert target.execution.weights == "packed"  # every shape went to the rule, which packs on this profile
    assert sorted(s.split(" linear failed")[0].split()[-1] for s in said) == ["32x64", "32x96", "64x32"], said
    assert any("a kernel failed" in s for s in said) and any("spread" in s for s in said)
    monkeypatch.setattr(kernel_times, "time_shape", real)
    assert measured.table_path(torch.float32).exists()  # the measured (tied) shapes are cached, failed ones not
    cached = json.loads(measured.table_path(torch.float32).read_text())["ms"]
    assert "32x96" not in cached and "32x32" in cached


def test_measuring_switched_off_applies_the_rule(measuring, monkeypatch) -> None:
    calls: list = []
    monkeypatch.setattr(choice, "cpu_gemm_profile", lambda: "onednn")  # the AMD rule, whatever CPU runs this
    planted(monkeypatch, lambda n_in, n_out: "stock", calls)
    monkeypatch.setenv("SPECDEC_KERNELS", "rule")
    assert HFTarget(model_fp32(), max_len=32).execution.weights == "packed" and not calls  # the onednn rule
    monkeypatch.setenv("SPECDEC_KERNELS", "auto")  # a CPU whose results row was measured under the rule keeps it
    zen4 = {**cpu.cpu_info(), "vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17"}
    monkeypatch.setattr(kernel_times, "cpu_info", lambda: zen4)
    assert measured.rule_kept().startswith("AMD Zen 4")
    assert HFTarget(model_fp32(), max_len=32).execution.weights == "packed" and not calls
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")  # unless asked to measure
    assert HFTarget(model_fp32(), max_len=32).execution.weights == "stock" and calls
    monkeypatch.setattr(kernel_times, "cpu_info", lambda: {**zen4, "model": "1"})  # Zen 3: no row before this one
    monkeypatch.setenv("SPECDEC_KERNELS", "auto")
    assert measured.rule_kept() is None and measured.measuring()
    xeon = {**zen4, "vendor_id": "GenuineIntel", "cpu family": "6", "model": "207"}  # its row re-run measured
    monkeypatch.setattr(kernel_times, "cpu_info", lambda: xeon)
    assert measured.rule_kept() is None and measured.measuring()
    monkeypatch.setenv("SPECDEC_KERNELS", "maybe")
    with pytest.raises(ValueError, match="SPECDEC_KERNELS"):
        HFTarget(model_fp32(), max_len=32)


def test_a_real_measurement_times_every_candidate(measuring) -> None:
    """On this CPU's kernels: every candidate and row count timed, or (the suite runs beside another worker) the
    shape given up as noisy with the warning that names it."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        table = measured.kernel_table([(576, 192, False)], torch.float32)  # SmolLM2's k projection
    if "576x192" in table.failed:
        assert "spread" in table.failed["576x192"] and any("576x192" in str(w.message) for w in seen)
        pytest.skip(f"this CPU was too busy to time the shape: {table.failed['576x192']}")
    ms = table.ms["576x192"]
    assert set(ms) == {"stock", "packed"} and all(set(by_rows) == {"1", "8"} for by_rows in ms.values())
    assert all(t > 0 for by_rows in ms.values() for t in by_rows.values())
    assert table.choice((576, 192, False)) in ("stock", "packed", None)
    lines = table.rows({"576x192": "packed"})
    assert lines[1].lstrip().startswith("576x192") and "(rule: packed)" in lines[1]


def test_a_dtype_without_native_instructions_says_what_it_costs_measured(measuring, avx2_only, monkeypatch) -> None:
    """The one warning gives the dtype's measured cost against float32 (both tables, planted here: bfloat16 stock
    takes half float32's time for 1 row and 3x for 8), for a 1-token step and for a draft tree."""

    def time_shape(mods, rows=kernel_times.ROWS, repeats=kernel_times.REPEATS):
        first = mods["stock"][0]
        size = first.in_features * first.out_features * 1e-9
        low = first.weight.dtype == torch.bfloat16
        scale = {1: 0.5, 8: 3.0} if low else {1: 1.0, 8: 1.0}
        return {k: {n: [size * scale[n] * (1 if k == "stock" else 1.5)] * repeats for n in rows} for k in mods}

    monkeypatch.setattr(kernel_times, "time_shape", time_shape)
    model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=2, seed=0).to(torch.bfloat16)
    _, said = caught(lambda: HFTarget(model, max_len=32))
    assert len(said) == 1 and "0.50x float32's time for 1 row" in said[0] and "3.00x for 8 rows" in said[0], said
    monkeypatch.setenv("SPECDEC_KERNELS", "rule")  # not measuring: the warning says no figure
    _, said = caught(lambda: HFTarget(model, max_len=32))
    assert len(said) == 1 and "float32's time" not in said[0]


# ------------------------------------------------------------------------------ one row stock, the rest packed
def one_row_stock_faster(monkeypatch) -> None:
    """Planted: stock takes half packed's time for 1 row and 3x for 8 (MKL's GEMV against oneDNN's GEMM on an Intel
    Xeon, family 6 model 106, had this form: 0.086 / 0.324 ms stock against 0.134 / 0.160 packed for 576 x 576)."""

    def time_shape(mods, rows=kernel_times.ROWS, repeats=kernel_times.REPEATS):
        size = mods["stock"][0].in_features * mods["stock"][0].out_features * 1e-9
        scale = {"stock": {1: 1.0, 8: 6.0}, "packed": {1: 2.0, 8: 2.0}}
        return {k: {n: [size * scale[k][n]] * repeats for n in rows} for k in mods}

    monkeypatch.setattr(kernel_times, "time_shape", time_shape)


def test_a_packed_linear_can_run_one_row_stock() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 96)
    packed = kernels.PackedLinear(linear)
    assert packed.single_rows("stock") == 96 * 32 * 4 and packed.single_rows("stock") == 96 * 32 * 4
    one, rows = torch.randn(1, 1, 32), torch.randn(8, 32)
    assert torch.equal(packed(one), torch.nn.functional.linear(one, linear.weight, linear.bias))
    assert torch.equal(packed(rows), packed.gemm(rows))  # more rows: the packed GEMM
    clone = copy.deepcopy(packed)
    assert clone.single_row_weight is not None and torch.equal(clone(one), packed(one))
    assert packed.single_rows(None) == 0 and packed.single_row_weight is None and packed.single_row_kernel is None
    with pytest.raises(ValueError, match="not 'gemv'"):
        packed.single_rows("gemv")
    packed.pad_single_row = True  # row-invariant numerics: a single row runs the tree's kernel
    with pytest.raises(ValueError, match="padded"):
        packed.single_rows("stock")
    tied = kernels.PackedLinear(linear, keep_weight=True)
    assert tied.single_rows("stock") == 0  # the kept (tied) weight serves: nothing added


def test_auto_runs_one_row_stock_where_it_measured_faster_and_decodes_exactly(measuring, monkeypatch) -> None:
    """Packed wins ``T(1) + T(8)`` (every linear packed), stock wins one row: a 1-token step runs stock, a tree
    packed; greedy output = HF ``generate``'s, the sampled law through the loop = the target's (negative control: a
    verifier that does not renormalise the residual moves it). Not where measuring is off, weights are asked for by
    name, or the numerics must be row-invariant."""
    one_row_stock_faster(monkeypatch)
    model = exactness_model()
    target = HFTarget(model, max_len=64)
    ex = target.execution
    assert ex.weights == "packed" and ex.single_stock == 1 + 2 * 4  # lm_head; per layer q/k/v, o, gate/up, down
    assert ex.single_bytes > 0 and "running a single row stock" in ex.describe() and ex.single_skinny == 0
    assert "packed, 1 row stock" in "\n".join(measured.kernel_table([(16, 6, False)], torch.float32).rows())
    assert curve_path(target.model, target.device).name.endswith("-packed+1stock.json")  # its own cost curve
    by_name = HFTarget(model, max_len=32, weights="packed")  # single rows packed: another curve
    assert curve_path(by_name.model, by_name.device).name.endswith("-packed.json")
    assert_decodes_exactly(model, target)
    assert target.sibling(max_len=32).execution.single_stock == ex.single_stock
    assert HFTarget(model, max_len=32, weights="packed").execution.single_stock == 0
    assert HFTarget(model, max_len=32, invariant=True).execution.single_stock == 0
    monkeypatch.setenv("SPECDEC_KERNELS", "rule")
    assert HFTarget(model, max_len=32).execution.single_stock == 0


def test_packed_is_charged_its_stock_single_row_where_that_measured_faster() -> None:
    """Stock 1 / 3 ms against packed 2 / 2.5 ms for 1 / 8 rows: summed raw, stock wins (4 < 4.5), but ``auto`` runs
    packed's single row stock (1 + 2.5 = 3.5), so packed wins; where stock's single row is not faster, the raw sum."""
    credited = kernel_times.KernelTable({}, {"8x8": {"stock": {"1": 1.0, "8": 3.0}, "packed": {"1": 2.0, "8": 2.5}}})
    assert credited.single_row_kernel((8, 8, False)) == "stock" and credited.cost((8, 8, False), "packed") == 3.5
    assert credited.choice((8, 8, False)) == "packed"
    raw = kernel_times.KernelTable({}, {"8x8": {"stock": {"1": 1.0, "8": 3.0}, "packed": {"1": 1.0, "8": 3.6}}})
    assert raw.single_row_kernel((8, 8, False)) is None and raw.cost((8, 8, False), "packed") == 4.6
    assert raw.choice((8, 8, False)) == "stock"


def test_a_single_row_goes_to_the_fastest_one_row_kernel_and_the_row_counts_key_the_table() -> None:
    """Of stock and skinny, the faster one-row kernel runs a packed shape's single row where it beats packed's by
    more than the tie margin (then packed is charged that row); an eager table timed at 1, 8 and 16 rows sums all
    three and is cached apart from the default one; a bfloat16 packed linear refuses the float32 kernel (where
    bfloat16 packs)."""
    times = {"stock": {"1": 1.5, "8": 9.0, "16": 12.0}, "packed": {"1": 2.0, "8": 2.0, "16": 2.2}}
    eager = {"key": {"rows": [1, 8, 16]}}
    table = kernel_times.KernelTable(eager["key"], {"8x8": {**times, "skinny": {"1": 1.0, "8": 3.0, "16": 6.0}}})
    assert table.single_row_kernel((8, 8, False)) == "skinny" and table.cost((8, 8, False), "packed") == 5.2
    assert table.choice((8, 8, False)) == "packed"  # 5.2 against skinny's 10.0 and stock's 22.5
    slow = kernel_times.KernelTable(eager["key"], {"8x8": {**times, "skinny": {"1": 1.9, "8": 3.0, "16": 6.0}}})
    assert slow.single_row_kernel((8, 8, False)) == "stock"  # skinny within the margin of packed's one row
    assert "rows" not in kernel_times.machine_key(torch.float32)  # the default tables' keys are unchanged
    assert kernel_times.machine_key(torch.float32, kernel_times.EAGER_KERNELS, (1, 8, 16))["rows"] == [1, 8, 16]
    assert kernel_times.table_path(torch.float32) != kernel_times.table_path(
        torch.float32, kernel_times.KERNELS, (1, 8, 16)
    )
    if cpu.packing_error(torch.bfloat16) is None:  # oneDNN packs bfloat16 here (not on AVX2-only CPUs)
        low = kernels.PackedLinear(torch.nn.Linear(32, 8).to(torch.bfloat16))
        with pytest.raises(ValueError, match="runs float32"):
            low.single_rows("skinny")


def test_a_table_timing_the_librarys_kernels_is_keyed_by_its_build(monkeypatch) -> None:
    """A changed kernel library (source, torch, flags) is timed again: the tables that time one of its kernels are
    named by its build; the stock/packed table is not (a library change leaves it valid)."""
    from specdec.backends import skinny

    tables = [(kernel_times.EAGER_KERNELS, (1, 8, 16)), (("int8", "w8"), kernel_times.ROWS)]
    before = [kernel_times.table_path(torch.float32, k, r) for k, r in tables]
    plain = kernel_times.table_path(torch.float32)
    assert kernel_times.machine_key(torch.float32, *tables[0])["library"] == skinny.library_name()
    monkeypatch.setattr(skinny, "library_name", lambda: "specdec_skinny_changed")
    assert all(kernel_times.table_path(torch.float32, k, r) != b for (k, r), b in zip(tables, before, strict=True))
    assert kernel_times.table_path(torch.float32) == plain and "library" not in kernel_times.machine_key(torch.float32)

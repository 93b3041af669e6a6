"""Which linears run on the skinny kernel, chosen by measurement (:mod:`specdec.backends.skinny_choice`).

What is shown, on tiny random Llamas with specdec's cache in a temporary folder:

* the rule (every linear stock) wherever the kernels are not measured: the suite's forced profile, the CPUs whose
  rows predate the kernel as a candidate (AMD Zen 3, unless ``SPECDEC_KERNELS=measure``);
* the measured table decides linear by linear (the table's choice patched both ways), and a package's name tells
  which linears run on the kernel: stock, some and all give three names (a key that only said "skinny" would hand a
  partial choice the full one's package);
* heavy: on eager shapes a linear takes the kernel where it beats both stock and packed (not within the tie
  margin, not under ``invariant=True`` where the few-row attention cannot serve the model: heads of 4 here;
  ``tests/test_skinny_attention.py`` has the route where it can), and greedy tokens stay the eager stock target's;
  ``static_shapes="aot"`` builds the package of the measured choice, whose greedy tokens are the eager stock
  target's; ``"auto"`` finds that package later without building; a model whose measured choice is stock is not
  handed it (eager, as no stock package is cached); a kernel package with the few-row attention calls its C shim,
  and its tree rows are bitwise its 1-token steps (SDPA's package: the control);
* heavy: a stackable group stays packed and stacked where its one GEMM beats its members on the kernel; a packed
  linear runs its single row on the kernel where that measured faster (and trees packed), and decodes exactly.
"""

from __future__ import annotations

import copy

import pytest
import torch

from specdec import package_timing
from specdec.backends import aot as aot_module
from specdec.backends import kernel_times, skinny, skinny_choice
from specdec.backends.aot import package_path
from specdec.backends.kernel_times import KernelTable
from specdec.backends.kernels import packed_linear, plain_linear, runs_packed
from specdec.budget import curve_path
from specdec.generate import StopCondition, VanillaGenerator
from specdec.models import cache_dir, tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from tests.test_cpus import assert_decodes_exactly, exactness_model

ZEN3 = {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "1"}


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """Kernels measured here (the suite forces the rule), in a cache of this test's own that reuses the machine's
    built kernel library (a build is a minute) and sees packages."""
    ext = cache_dir() / "ext"
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    if ext.is_dir():
        (tmp_path / "ext").symlink_to(ext)
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    monkeypatch.setenv("SPECDEC_PACKAGES", "on")
    monkeypatch.setenv("SPECDEC_SKINNY", "auto")


@pytest.fixture
def kernel(measured) -> None:
    reason = skinny.unavailable()
    if reason is not None:
        pytest.skip(f"skinny kernel unavailable: {reason}")


def choose(monkeypatch, pick) -> None:
    """Patch the table's choice: ``pick(shape) -> "skinny" | "stock"``."""
    monkeypatch.setattr(KernelTable, "choice", lambda self, shape: pick(shape))


def model():
    return tiny_llama(vocab_size=6, hidden_size=16, num_layers=2, logit_scale=1.5)


def greedy_tokens(target: HFTarget) -> list[int]:
    """16 greedy tokens after a 5-token prompt."""
    stop = StopCondition(max_new_tokens=16, eos_token_ids=())
    return list(VanillaGenerator(target).generate(torch.arange(5), SamplingParams(temperature=0.0), stop).tokens)


def test_the_rule_keeps_every_linear_stock_where_nothing_is_measured(monkeypatch) -> None:
    m = model()
    assert skinny_choice.package_kernels(m) == (0, "")  # the suite's forced profile: the rule
    assert not skinny.uses_skinny(m)
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)
    monkeypatch.setattr(skinny_choice, "cpu_info", lambda: ZEN3)
    monkeypatch.setattr(skinny_choice, "measuring", lambda: True)
    assert not skinny_choice.skinny_measures()  # its package row was measured stock: kept until re-run
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    monkeypatch.setenv("SPECDEC_SKINNY", "auto")
    assert skinny_choice.skinny_measures()
    monkeypatch.setenv("SPECDEC_SKINNY", "off")  # the switch wins
    assert not skinny_choice.skinny_measures()
    monkeypatch.setenv("SPECDEC_SKINNY", "maybe")
    with pytest.raises(ValueError, match="SPECDEC_SKINNY"):
        skinny_choice.skinny_measures()


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_the_table_decides_linear_by_linear_and_the_package_name_tells(monkeypatch) -> None:
    m = model()
    linears = [x for x in m.modules() if plain_linear(x)]
    names = {package_path(m).name}
    choose(monkeypatch, lambda shape: "skinny" if shape[1] == 6 else "stock")  # the lm_head (16 -> 6) only
    swapped, reason = skinny_choice.package_kernels(m)
    assert swapped == 1 and skinny.skinny_names(m) == ["lm_head"] and "measured faster on the skinny kernel" in reason
    names.add(package_path(m).name)
    skinny.plain_linears(m)
    assert not skinny.uses_skinny(m) and package_path(m).name in names  # undone: the stock name again
    choose(monkeypatch, lambda shape: "skinny")
    assert skinny_choice.package_kernels(m)[0] == len(linears)
    names.add(package_path(m).name)
    assert len(names) == 3


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_aot_builds_the_measured_package_and_auto_finds_it(monkeypatch) -> None:
    m = model()
    n = len([x for x in m.modules() if plain_linear(x)])
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    choose(monkeypatch, lambda shape: "skinny")
    fast = {"skinny": {"1": 1.0, "8": 1.0}, "stock": {"1": 2.0, "8": 2.0}}  # the whole packages' timing: the kernel's
    monkeypatch.setattr(package_timing, "_time", lambda models: (fast, []))  # tests/test_package_verdict.py: both
    built = HFTarget(m, max_len=64, static_shapes="aot")
    assert built.execution.skinny == n and built.execution.aot and not skinny.uses_skinny(m)  # a copy was changed
    assert "linears on the skinny kernel" in built.execution.describe() and built.execution.label == "stock+aot+skinny"
    assert greedy_tokens(built) == want and built.sibling(64).execution.skinny == n  # a sibling: the same package

    monkeypatch.setattr(aot_module, "build_package", no_build)
    auto = HFTarget(m, max_len=64)  # static_shapes="auto": the measured package is cached
    assert auto.execution.aot and auto.execution.skinny == n
    assert greedy_tokens(auto) == want
    choose(monkeypatch, lambda shape: "stock")  # control: a stock choice is not handed the skinny package
    assert not HFTarget(m, max_len=64).static


def no_build(*args, **kwargs):
    """``build_package`` where a cached package must be found instead."""
    raise AssertionError("a package was built again")


def costs(monkeypatch, skinny_ms: float) -> None:
    """Patch the tables' costs per output feature: stock 1 ms, packed 0.8 ms (so ``auto`` packs what stays off the
    kernel), the skinny kernel ``skinny_ms``."""
    ms = {"stock": 1.0, "packed": 0.8, "skinny": skinny_ms}
    monkeypatch.setattr(KernelTable, "cost", lambda self, shape, kernel: ms[kernel] * shape[1])


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_eager_shapes_take_the_kernel_where_it_beats_stock_and_packed(monkeypatch) -> None:
    m = model()
    n = len([x for x in m.modules() if plain_linear(x)])
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    costs(monkeypatch, 0.4)
    target = HFTarget(m, max_len=64, static_shapes=False)
    assert target.execution.skinny == n and target.execution.label == "stock+skinny" and not skinny.uses_skinny(m)
    assert greedy_tokens(target) == want
    sibling = target.sibling(32)  # another cache over the same prepared model (cost probes, several prompts)
    assert (
        target.weights_choice == "auto" and sibling.execution.skinny == n and sibling.execution.label == "stock+skinny"
    )
    # row-invariant numerics asked for keep every linear packed where the few-row attention cannot serve the model
    # (heads of 4 here); a kernel within the tie margin is not taken
    invariant = HFTarget(m, max_len=64, static_shapes=False, invariant=True).execution
    assert invariant.skinny == 0 and invariant.weights == "packed"
    costs(monkeypatch, 0.78)
    assert HFTarget(m, max_len=64, static_shapes=False).execution.skinny == 0


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_a_stacked_group_stays_packed_where_one_gemm_beats_its_members_on_their_best_kernels(monkeypatch) -> None:
    """Planted costs of a call overhead plus a cost per output feature, the kernel's overhead the dearest (5.5): alone,
    ``o_proj``, ``down_proj`` and ``q_proj`` (16 outputs) take the kernel (5.5 + 6.4 against 0.1 + 12.8 packed), ``k``
    and ``v`` (8) stay packed (6.5 against 8.7); ``q/k/v`` each on its best kernel cost 11.9 + 6.5 + 6.5 = 24.9
    against one stacked GEMM's 25.7, within the tie margin, so the group stays packed and stacked; ``gate/up`` (32 + 32)
    takes the kernel (36.6 against 51.3). Control: at an overhead of 4.5 the members' 23.9 beat the stacked GEMM, and
    ``q`` alone goes on the kernel, ``k`` and ``v`` packed, nothing stacked."""
    per_out = {"stock": 1.0, "packed": 0.8, "skinny": 0.4}
    m = model()
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    for overhead, expected, stacked in ((5.5, set(), 2), (4.5, {"q_proj"}, 0)):
        fixed = {"stock": 1.0, "packed": 0.1, "skinny": overhead}
        cost = lambda self, shape, kernel, fixed=fixed: fixed[kernel] + per_out[kernel] * shape[1]  # noqa: E731
        monkeypatch.setattr(KernelTable, "cost", cost)
        target = HFTarget(model(), max_len=64, static_shapes=False)
        on = {name.rsplit(".", 1)[-1] for name in skinny.skinny_names(target.model)}
        assert on == {"o_proj", "down_proj", "gate_proj", "up_proj"} | expected, (overhead, on)  # lm_head: packed
        assert target.execution.stacked == stacked and greedy_tokens(target) == want  # q/k/v: one group per layer


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_a_packed_linears_single_row_runs_on_the_kernel_where_it_measured_faster(monkeypatch) -> None:
    """Planted timings, per weight byte: the kernel runs 1 row in half packed's time but 8 and 16 rows slower (AMD
    Zen 4's form: oneDNN's one row is slow, its GEMM flat to 16 rows): every linear stays packed and stacked, and each
    packed linear runs a single row on the kernel (the output ``specdec::skinny_linear`` gives, bit for bit; more rows
    the packed GEMM's), with its own cost curve; the target decodes exactly (greedy = HF ``generate``, the sampled
    law through the loop = the target's, a broken verifier caught). Not with row-invariant numerics, nor with the
    kernel switched off (``SPECDEC_SKINNY=off``: stock and packed tie on one row here, so it runs packed)."""
    scale = {"stock": {1: 2.0, 8: 6.0, 16: 10.0}, "packed": {1: 2.0, 8: 2.0, 16: 2.2}, "skinny": {1: 1.0, 8: 3, 16: 6}}

    def time_shape(mods, rows=kernel_times.ROWS, repeats=kernel_times.REPEATS):
        first = next(iter(mods.values()))[0]
        size = first.in_features * first.out_features * 1e-9
        return {k: {n: [size * scale[k][n]] * repeats for n in rows} for k in mods}

    monkeypatch.setattr(kernel_times, "time_shape", time_shape)
    monkeypatch.setattr(kernel_times, "_TABLES", {})
    m = exactness_model()
    target = HFTarget(m, max_len=64, static_shapes=False)
    ex = target.execution
    assert ex.weights == "packed" and ex.skinny == 0 and ex.stacked == 4 and ex.single_stock == 0
    assert ex.single_skinny == 1 + 2 * 4 and "running a single row on the skinny kernel" in ex.describe()
    assert curve_path(target.model, target.device).name.endswith("-packed+1skinny.json")
    packed = next(packed_linear(x) for x in target.model.modules() if runs_packed(x))
    one, rows = torch.randn(1, 1, packed.in_features), torch.randn(8, packed.in_features)
    assert torch.equal(packed(one), torch.ops.specdec.skinny_linear(one, packed.single_row_weight, packed.bias))
    assert torch.equal(packed(rows), packed.gemm(rows))
    assert target.sibling(32).execution.single_skinny == ex.single_skinny
    assert_decodes_exactly(m, target)
    assert HFTarget(m, max_len=32, static_shapes=False, invariant=True).execution.single_skinny == 0
    monkeypatch.setenv("SPECDEC_SKINNY", "off")
    off = HFTarget(m, max_len=32, static_shapes=False).execution
    assert off.single_skinny == 0 and off.single_stock == 0 and off.weights == "packed"


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_aot_builds_the_coded_package_and_auto_finds_it(monkeypatch) -> None:
    """A model whose weights are exact block codes: ``aot`` builds its package on the codes where the coded form
    timed faster (costs patched), and ``static_shapes="auto"`` finds that package: it reads the table with the coded
    form, not the float32 one (a review found it looked for the other table's file, so it never found the package).
    Greedy tokens are the stock model's."""
    from tests.test_skinny_codes import gguf_like

    m = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, logit_scale=1.5, seed=0)
    with torch.no_grad():
        for i, linear in enumerate(x for x in m.modules() if plain_linear(x)):
            linear.weight.copy_(gguf_like("q4_1", *linear.weight.shape, seed=i))
    n = len([x for x in m.modules() if plain_linear(x)])
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    ms = {"stock": 1.0, "skinny": 0.5, "coded": 0.3}
    monkeypatch.setattr(KernelTable, "cost", lambda self, shape, name: ms.get(name))
    fast = {"skinny": {"1": 1.0, "8": 1.0}, "stock": {"1": 2.0, "8": 2.0}}
    monkeypatch.setattr(package_timing, "_time", lambda models: (fast, []))
    monkeypatch.setenv("SPECDEC_ATTENTION", "sdpa")  # heads of 16: the few-row attention could be measured faster
    built = HFTarget(m, max_len=64, static_shapes="aot")
    assert built.execution.coded == built.execution.skinny == n and built.execution.label == "stock+aot+skinny+coded"
    assert greedy_tokens(built) == want

    monkeypatch.setattr(aot_module, "build_package", no_build)
    auto = HFTarget(m, max_len=64)  # static_shapes="auto": the coded package is cached
    assert auto.execution.aot and auto.execution.coded == n
    assert greedy_tokens(auto) == want


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_a_kernel_package_runs_the_few_row_attention_and_its_tree_rows_are_its_steps(monkeypatch) -> None:
    """Linears on the skinny kernel and the few-row attention chosen (asked for here; measured by default): the
    package calls the attention's C shim instead of SDPA, under another name than SDPA's package (its compiled graph
    differs), and its float32 forward is row-invariant: each row of a 9-node tree is bitwise its path's 1-token step,
    and greedy tokens are the eager stock model's; ``static_shapes="auto"`` finds that package. Control: with
    ``SPECDEC_ATTENTION=sdpa`` the package calls SDPA, not the shim, claims no row invariance, and its tree rows are
    not all bitwise their steps. A model given on the few-row attention keeps it in its package whatever
    the variable says (the name and the compiled graph decided once)."""
    from specdec.backends.gqa import GQA_SKINNY, _register_gqa_attention, set_attention
    from tests.test_invariant import rows_match_steps
    from tests.test_skinny import _cpp_sources

    def wrapper(target: HFTarget) -> str:
        return next(text for name, text in _cpp_sources(str(package_path(target.model))) if "wrapper" in name)

    m = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, logit_scale=1.5, seed=0)  # heads of 16 (kernel's)
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    choose(monkeypatch, lambda shape: "skinny")
    fast = {"skinny": {"1": 1.0, "8": 1.0}, "stock": {"1": 2.0, "8": 2.0}}
    monkeypatch.setattr(package_timing, "_time", lambda models: (fast, []))
    targets, wrappers = {}, {}
    for mode in ("sdpa", "few-row"):
        monkeypatch.setenv("SPECDEC_ATTENTION", mode)
        targets[mode] = HFTarget(m, max_len=64, static_shapes="aot")
        targets[mode].warm_up()  # builds the package
        wrappers[mode] = (package_path(targets[mode].model), wrapper(targets[mode]))
    sdpa, few = targets["sdpa"], targets["few-row"]
    assert few.execution.attention == GQA_SKINNY and few.execution.skinny_forward and few.execution.aot
    assert sdpa.execution.attention != GQA_SKINNY and not sdpa.execution.skinny_forward
    assert wrappers["sdpa"][0] != wrappers["few-row"][0] and few.execution.label.endswith("+attention")
    for mode in ("sdpa", "few-row"):  # a prepared model keeps its package's name whatever the variable says now
        monkeypatch.setenv("SPECDEC_ATTENTION", mode)
        for t in (sdpa, few):
            del t.model._specdec_aot_name  # named again from the prepared model (its attention switched)
        assert [package_path(t.model) for t in (sdpa, few)] == [wrappers["sdpa"][0], wrappers["few-row"][0]]
    calls = {mode: text.count("aoti_torch_cpu_skinny_attention(") for mode, (_, text) in wrappers.items()}
    assert calls["few-row"] - calls["sdpa"] == 2, calls  # a call per layer (both declare the shims they may call)
    assert "scaled_dot_product" not in wrappers["few-row"][1] and "scaled_dot_product" in wrappers["sdpa"][1]
    assert greedy_tokens(few) == want and few.runner.compiled
    assert all(rows_match_steps(None, False, context=20, target=few))
    assert not all(rows_match_steps(None, False, context=20, target=sdpa))  # SDPA's rows: other bits
    monkeypatch.setattr(aot_module, "build_package", no_build)
    auto = HFTarget(m, max_len=64)  # static_shapes="auto" finds the few-row package (its name from the model given)
    assert auto.execution.aot and auto.execution.attention == GQA_SKINNY and greedy_tokens(auto) == want
    monkeypatch.setenv("SPECDEC_ATTENTION", "sdpa")  # a model given on the few-row attention keeps it, and its package
    given = copy.deepcopy(m)
    _register_gqa_attention()
    set_attention(given, GQA_SKINNY)
    kept = HFTarget(given, max_len=64, static_shapes="aot")  # a build fails (patched): the few-row package is loaded
    assert kept.execution.attention == GQA_SKINNY and package_path(kept.model) == wrappers["few-row"][0]
    assert greedy_tokens(kept) == want and kept.runner.compiled

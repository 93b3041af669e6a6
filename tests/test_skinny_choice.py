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
  handed it (eager, as no stock package is cached).
"""

from __future__ import annotations

import pytest
import torch

from specdec.backends import aot as aot_module
from specdec.backends import skinny, skinny_choice
from specdec.backends.aot import package_path
from specdec.backends.kernel_times import KernelTable
from specdec.backends.kernels import plain_linear
from specdec.generate import StopCondition, VanillaGenerator
from specdec.models import cache_dir, tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

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
    built = HFTarget(m, max_len=64, static_shapes="aot")
    assert built.execution.skinny == n and built.execution.aot and not skinny.uses_skinny(m)  # a copy was changed
    assert "linears on the skinny kernel" in built.execution.describe() and built.execution.label == "stock+aot+skinny"
    assert greedy_tokens(built) == want and built.sibling(64).execution.skinny == n  # a sibling: the same package

    def no_build(*args, **kwargs):
        raise AssertionError("a package was built again")

    monkeypatch.setattr(aot_module, "build_package", no_build)
    auto = HFTarget(m, max_len=64)  # static_shapes="auto": the measured package is cached
    assert auto.execution.aot and auto.execution.skinny == n
    assert greedy_tokens(auto) == want
    choose(monkeypatch, lambda shape: "stock")  # control: a stock choice is not handed the skinny package
    assert not HFTarget(m, max_len=64).static


def costs(monkeypatch, skinny_ms: float) -> None:
    """Patch the tables' costs: stock 1 ms, packed 0.8 ms (so ``auto`` packs what stays off the kernel), the skinny
    kernel ``skinny_ms``."""
    ms = {"stock": 1.0, "packed": 0.8, "skinny": skinny_ms}
    monkeypatch.setattr(KernelTable, "cost", lambda self, shape, kernel: ms[kernel])


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

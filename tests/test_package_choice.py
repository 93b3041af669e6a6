"""The kernel an ahead-of-time package runs each linear on, chosen by measurement
(:mod:`specdec.backends.package_choice`).

What is shown, on tiny random Llamas with specdec's cache in a temporary folder:

* the rule (every linear stock) wherever the kernels are not measured: the suite's forced profile, the CPUs whose
  package rows predate the choice (AMD Zen 3, unless ``SPECDEC_KERNELS=measure``);
* the measured table decides linear by linear (the table's choice patched both ways), and a package's name tells
  which linears run on the kernel: stock, some and all give three names (a key that only said "skinny" would hand a
  partial choice the full one's package);
* heavy: ``static_shapes="aot"`` builds the package of the measured choice, whose greedy tokens are the eager stock
  target's; ``"auto"`` finds that package later without building; a model whose measured choice is stock is not
  handed it (eager, as no stock package is cached).
"""

from __future__ import annotations

import pytest
import torch

from specdec.backends import aot as aot_module
from specdec.backends import package_choice, skinny
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


def test_the_rule_keeps_every_linear_stock_where_nothing_is_measured(monkeypatch) -> None:
    m = model()
    assert package_choice.package_kernels(m) == (0, "")  # the suite's forced profile: the rule
    assert not skinny.uses_skinny(m)
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)
    monkeypatch.setattr(package_choice, "cpu_info", lambda: ZEN3)
    monkeypatch.setattr(package_choice, "measuring", lambda: True)
    assert not package_choice.package_measures()  # its package row was measured stock: kept until re-run
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    assert package_choice.package_measures()


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_the_table_decides_linear_by_linear_and_the_package_name_tells(monkeypatch) -> None:
    m = model()
    linears = [x for x in m.modules() if plain_linear(x)]
    names = {package_path(m).name}
    choose(monkeypatch, lambda shape: "skinny" if shape[1] == 6 else "stock")  # the lm_head (16 -> 6) only
    swapped, reason = package_choice.package_kernels(m)
    assert swapped == 1 and skinny.skinny_names(m) == ["lm_head"] and "measured faster on the skinny kernel" in reason
    names.add(package_path(m).name)
    skinny.plain_linears(m)
    assert not skinny.uses_skinny(m) and package_path(m).name in names  # undone: the stock name again
    choose(monkeypatch, lambda shape: "skinny")
    assert package_choice.package_kernels(m)[0] == len(linears)
    names.add(package_path(m).name)
    assert len(names) == 3


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_aot_builds_the_measured_package_and_auto_finds_it(monkeypatch) -> None:
    m = model()
    n = len([x for x in m.modules() if plain_linear(x)])
    prompt, greedy = torch.arange(5), SamplingParams(temperature=0.0)
    stop = StopCondition(max_new_tokens=16, eos_token_ids=())
    want = VanillaGenerator(HFTarget(m, max_len=64, weights="stock", static_shapes=False)).generate(
        prompt, greedy, stop
    )
    choose(monkeypatch, lambda shape: "skinny")
    built = HFTarget(m, max_len=64, static_shapes="aot")
    assert built.execution.skinny == n and built.execution.aot and not skinny.uses_skinny(m)  # a copy was changed
    assert "linears on the skinny kernel" in built.execution.describe() and built.execution.label == "stock+aot+skinny"
    assert VanillaGenerator(built).generate(prompt, greedy, stop).tokens == want.tokens

    def no_build(*args, **kwargs):
        raise AssertionError("a package was built again")

    monkeypatch.setattr(aot_module, "build_package", no_build)
    auto = HFTarget(m, max_len=64)  # static_shapes="auto": the measured package is cached
    assert auto.execution.aot and auto.execution.skinny == n
    assert VanillaGenerator(auto).generate(prompt, greedy, stop).tokens == want.tokens
    choose(monkeypatch, lambda shape: "stock")  # control: a stock choice is not handed the skinny package
    assert not HFTarget(m, max_len=64).static

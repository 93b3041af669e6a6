"""The package's kernels decided by timing whole packages (:mod:`specdec.backends.package_verdict`).

What is shown (heavy: each test builds ahead-of-time packages of a tiny random Llama, in a cache of its own, with the
kernels measured and the shapes' table patched to put every linear on the skinny kernel):

* the real measurement: ``static_shapes="aot"`` builds both packages, times them, records the verdict with each
  package's times, keeps the winner's file only, and the target runs the winner with the eager stock target's greedy
  tokens;
* a verdict for stock (the timing patched) puts every linear back: the target runs the stock package, says why, and
  a later target (``"aot"`` or ``"auto"``) neither measures nor builds again; the control, a verdict for the kernel,
  keeps every linear on it and deletes the stock package instead;
* a package that cannot be built is not timed (the runner's eager fallback would have been): neither built, no
  verdict, and the target decodes as the runner's fallback does; only the kernel's not built, stock is recorded and
  runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec import package_timing
from specdec.backends import FastPathWarning
from specdec.backends import aot as aot_module
from specdec.backends.aot import PackageError, package_path
from specdec.backends.kernel_times import TIE
from specdec.backends.kernels import plain_linear, shared_copy
from specdec.backends.package_verdict import recorded
from specdec.backends.skinny import skinny_linears, uses_skinny
from specdec.target import HFTarget
from tests.test_skinny_choice import choose, greedy_tokens, kernel, measured, model  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.heavy, pytest.mark.usefixtures("kernel")]


def skinny_copy(m):
    """``m`` with every linear on the kernel (a shared copy; ``m`` itself is left as it was): the verdict's key."""
    copy = shared_copy(m)
    skinny_linears(copy)
    return copy


def paths(m) -> dict[str, Path]:
    """The two packages' paths for ``m``: stock, and every linear on the kernel."""
    return {"stock": package_path(m), "skinny": package_path(skinny_copy(m))}


def test_both_packages_are_built_and_timed_and_the_winner_runs(monkeypatch) -> None:
    m = model()
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    choose(monkeypatch, lambda shape: "skinny")
    target = HFTarget(m, max_len=64, static_shapes="aot")
    where = paths(m)
    verdict = recorded(skinny_copy(m))
    assert verdict is not None and set(verdict["ms"]) == {"skinny", "stock"}
    assert all(list(per) == ["1", "8"] and min(per.values()) > 0 for per in verdict["ms"].values())
    total = {name: sum(per.values()) for name, per in verdict["ms"].items()}
    assert (verdict["choice"] == "skinny") == (total["skinny"] < (1 - TIE) * total["stock"])
    loser = "stock" if verdict["choice"] == "skinny" else "skinny"
    assert where[verdict["choice"]].exists() and not where[loser].exists()
    n = len([x for x in m.modules() if plain_linear(x)])
    assert target.execution.skinny == (n if verdict["choice"] == "skinny" else 0)
    assert greedy_tokens(target) == want


def patched(monkeypatch, skinny_ms: float) -> None:
    """The packages' timing patched: the kernel's package ``skinny_ms`` per row count, the stock package 1 ms."""

    def times(models):
        return {"skinny": {"1": skinny_ms, "8": skinny_ms}, "stock": {"1": 1.0, "8": 1.0}}, []

    monkeypatch.setattr(package_timing, "_time", times)


def test_a_verdict_for_stock_puts_every_linear_back_and_is_kept(monkeypatch) -> None:
    m = model()
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    choose(monkeypatch, lambda shape: "skinny")
    patched(monkeypatch, 1.5)
    target = HFTarget(m, max_len=64, static_shapes="aot")
    assert target.execution.skinny == 0 and target.execution.label == "stock+aot"
    assert "whole packages timed here" in target.execution.reason and "stock 1.0 / 1.0 ms" in target.execution.reason
    assert greedy_tokens(target) == want and paths(m)["stock"].exists()

    def never(*args, **kwargs):
        raise AssertionError("measured or built again")

    monkeypatch.setattr(package_timing, "_time", never)
    monkeypatch.setattr(aot_module, "build_package", never)
    again = HFTarget(m, max_len=64, static_shapes="aot")
    auto = HFTarget(m, max_len=64)  # static_shapes="auto": the stock package is cached
    assert target.sibling(64).execution.label == "stock+aot"  # a sibling (the cost curve's probe) does not settle
    assert again.execution.skinny == 0 and auto.execution.aot and auto.execution.skinny == 0
    assert greedy_tokens(again) == want and greedy_tokens(auto) == want


def test_control_a_verdict_for_the_kernel_keeps_it_and_drops_the_stock_package(monkeypatch) -> None:
    m = model()
    choose(monkeypatch, lambda shape: "skinny")
    HFTarget(m, max_len=64, weights="stock", static_shapes="aot").warm_up()  # the stock package exists beforehand
    assert paths(m)["stock"].exists()
    patched(monkeypatch, 1.0 - 2 * TIE)
    target = HFTarget(m, max_len=64, static_shapes="aot")
    n = len([x for x in m.modules() if plain_linear(x)])
    assert target.execution.skinny == n and target.execution.label == "stock+aot+skinny"
    assert not paths(m)["stock"].exists()


def test_a_package_that_cannot_be_built_records_no_verdict(monkeypatch) -> None:
    m = model()
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    choose(monkeypatch, lambda shape: "skinny")

    def fails(*args, **kwargs):
        raise PackageError("export refused the model")

    monkeypatch.setattr(aot_module, "build_package", fails)
    with pytest.warns(FastPathWarning, match="ahead-of-time package cannot serve"):
        target = HFTarget(m, max_len=64, static_shapes="aot")
        assert greedy_tokens(target) == want  # the static forward eagerly, as the runner's fallback does
    assert recorded(skinny_copy(m)) is None  # eager times are not the package's: nothing recorded (measured again)


def test_a_kernel_package_that_cannot_be_built_loses_untimed(monkeypatch) -> None:
    m = model()
    want = greedy_tokens(HFTarget(m, 64, weights="stock", static_shapes=False))
    choose(monkeypatch, lambda shape: "skinny")
    build = aot_module.build_package

    def only_stock(model, *args, **kwargs):
        if uses_skinny(model):
            raise PackageError("the kernel's shim is missing")
        return build(model, *args, **kwargs)

    monkeypatch.setattr(aot_module, "build_package", only_stock)
    with pytest.warns(FastPathWarning, match="ahead-of-time package cannot serve"):
        target = HFTarget(m, max_len=64, static_shapes="aot")
    verdict = recorded(skinny_copy(m))
    assert verdict["choice"] == "stock" and verdict["failed"] == ["skinny"] and list(verdict["ms"]) == ["stock"]
    assert target.execution.skinny == 0 and "could not be built: skinny" in target.execution.reason
    assert greedy_tokens(target) == want and paths(m)["stock"].exists()

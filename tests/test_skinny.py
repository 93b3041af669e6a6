"""The skinny GEMM (``specdec::skinny_linear``, :mod:`specdec.backends.skinny`): exact enough, row-invariant bit for
bit, compilable, and refused with a reason where it cannot run.

Marked heavy: the first use builds the C++ kernel (about 40 s on 2 cores); the suite's other tests keep it out
(``SPECDEC_SKINNY=off``), its choice is tested in ``tests/test_skinny_choice.py``. Each variant runs where the CPU
has its instructions: the AVX2 one on every x86 CPU with AVX2 and FMA (AVX-512 CPUs included), the AVX-512 one where
the CPU has AVX-512.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specdec.backends import skinny
from specdec.backends.aot import MAX_ROWS
from specdec.backends.cpu import cpu_flags

pytestmark = pytest.mark.heavy


@pytest.fixture
def kernel() -> None:
    """Skip with the reason where the kernel cannot run (built on first use: only when a test asks, never at
    collection, so ``make test``, which leaves the heavy tests out, never builds it)."""
    reason = skinny.unavailable() if cpu_flags() else "no /proc/cpuinfo: the CPU's flags are unknown"
    if reason is not None:
        pytest.skip(f"skinny kernel unavailable: {reason}")


needs_kernel = pytest.mark.usefixtures("kernel")
ISAS = [
    pytest.param(1, id="avx2"),
    pytest.param(
        2, id="avx512", marks=pytest.mark.skipif("avx512f" not in cpu_flags(), reason="this CPU has no AVX-512")
    ),
]


def op(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, isa: int) -> torch.Tensor:
    return torch.ops.specdec.skinny_linear(x, w, b, isa)


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("k, n", [(576, 192), (577, 7), (3, 1), (1536, 33)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_a_float64_linear(isa: int, k: int, n: int, bias: bool) -> None:
    g = torch.Generator().manual_seed(k * n)
    w = torch.randn(n, k, generator=g) / k**0.5
    b = torch.randn(n, generator=g) if bias else None
    for rows in (1, 2, 5, 8, 16, 17, 40, 64, 65, 130):  # above 64 rows: a prefill, on torch's own GEMM
        x = torch.randn(2, rows, k, generator=g)
        y = op(x, w, b, isa)
        ref = F.linear(x.double(), w.double(), None if b is None else b.double())
        assert y.shape == (2, rows, n) and y.dtype == torch.float32
        assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5 * k**0.5), (rows, (y.double() - ref).abs().max())


def row_invariant(kernel, x: torch.Tensor, w: torch.Tensor) -> bool:
    """Every row of ``kernel(x, w)`` bitwise equal to the same row computed alone, and to the row inside every
    prefix of ``x`` (a tree of any size)."""
    alone = torch.cat([kernel(x[i : i + 1], w) for i in range(x.shape[0])])
    return all(torch.equal(kernel(x[:m], w), alone[:m]) for m in range(1, x.shape[0] + 1))


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
def test_a_row_is_bitwise_the_same_alone_or_in_a_tree(isa: int) -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 577, generator=g)
    x = torch.randn(64, 577, generator=g) * 10  # every tree size up to the largest: 1-16 rows in one pass, 17-64 in
    assert row_invariant(lambda a, b: op(a, b, None, isa), x, w)  # blocks of 6 rows and a remainder of 1-5

    # negative control: a kernel whose summation order depends on the number of rows is caught
    def drifting(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = op(a, b, None, isa)
        return y if a.shape[0] == 1 else (a.double() @ b.double().T).float()

    assert not row_invariant(drifting, x, w)


@needs_kernel
def test_a_prefill_beyond_the_largest_tree_runs_the_dense_gemm() -> None:
    """More rows than ``INVARIANT_ROWS`` (a prompt) take ``F.linear``'s bits, not the fixed order of the contract:
    the boundary is where the C++ says it is (a kernel that kept its own order past it would fail the first check,
    one that left it earlier the second)."""
    assert skinny.INVARIANT_ROWS == MAX_ROWS  # every tree the package runs is inside the fixed order
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(96, 577, generator=g), torch.randn(96, generator=g)
    x = torch.randn(skinny.INVARIANT_ROWS + 1, 577, generator=g) * 10
    assert torch.equal(op(x, w, b, 0), F.linear(x, w, b))
    tree = x[: skinny.INVARIANT_ROWS]
    assert torch.equal(op(tree, w, b, 0)[:1], op(tree[:1], w, b, 0))
    assert not torch.equal(op(tree, w, b, 0), F.linear(tree, w, b))  # the fixed order is not MKL's (power check)


@needs_kernel
def test_the_module_shares_the_linear_and_compiles() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 16, bias=False)).eval()
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        ref = model(x)
        weight = model[0].weight
        assert skinny.skinny_linears(model) == 2
        assert isinstance(model[0], skinny.SkinnyLinear) and model[0].weight is weight  # shared, not copied
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    assert torch.allclose(eager, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(compiled, eager)


@needs_kernel
def test_bad_input_is_refused_by_name() -> None:
    w = torch.randn(8, 16)
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.specdec.skinny_linear(torch.randn(2, 16, dtype=torch.float64), w)
    with pytest.raises(RuntimeError, match=r"x \[\.\.\., K\]"):
        torch.ops.specdec.skinny_linear(torch.randn(2, 15), w)
    with pytest.raises(RuntimeError, match="bias"):
        torch.ops.specdec.skinny_linear(torch.randn(2, 16), w, torch.randn(7))
    with pytest.raises(RuntimeError, match="isa"):
        torch.ops.specdec.skinny_linear(torch.randn(2, 16), w, None, 3)
    with pytest.raises(ValueError, match="float32"):
        skinny.SkinnyLinear(nn.Linear(16, 8, dtype=torch.bfloat16))
    x = torch.randn(2, 16, requires_grad=True)
    with pytest.raises(RuntimeError, match="autograd|derivative|backward"):
        torch.ops.specdec.skinny_linear(x, w).sum().backward()


def test_a_cpu_without_avx2_is_told_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skinny, "cpu_flags", lambda: frozenset({"sse4_2"}))
    with pytest.raises(skinny.SkinnyError, match="AVX2 and FMA"):
        skinny.load.__wrapped__()


@needs_kernel
def test_an_ahead_of_time_package_calls_the_c_shim(tmp_path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, 8)).eval()
    with torch.no_grad():
        skinny.skinny_linears(model)
        x = torch.randn(3, 32)
        program = torch.export.export(model, (x,))
        path = torch._inductor.aoti_compile_and_package(
            program, package_path=str(tmp_path / "m.pt2"), inductor_configs=skinny.package_options()
        )
        wrapper = next(p for p in _cpp_sources(path) if "wrapper" in p[0])[1]
        assert "aoti_torch_cpu_skinny_linear(" in wrapper  # the C shim, called directly
        assert "proxy_executor->call_function" not in wrapper  # not through the proxy executor
        assert torch.equal(torch._inductor.aoti_load_package(path)(x), model(x))


def _cpp_sources(package: str) -> list[tuple[str, str]]:
    import zipfile

    with zipfile.ZipFile(package) as z:
        return [(n, z.read(n).decode()) for n in z.namelist() if n.endswith(".cpp")]


@needs_kernel
def test_a_skinny_model_has_its_own_package_and_cost_curve_label() -> None:
    from specdec.backends.aot import package_path
    from specdec.backends.choice import execution_label

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8)).eval()
    stock_name, stock_label = package_path(model).name, execution_label(model)
    skinny.skinny_linears(model)
    assert skinny.uses_skinny(model)
    assert execution_label(model) == stock_label + "+skinny"  # the cost curve's cache name carries it
    assert package_path(model).name != stock_name  # never the stock package: another compiled graph


def test_every_kernel_source_ships_in_the_wheel() -> None:
    """The library is built on first use from :data:`~specdec.backends.skinny.SOURCES`: each must match the package
    data globs of ``pyproject.toml`` (a header left out once: a wheel install could not build nor key its tables)."""
    import fnmatch
    import re
    from pathlib import Path

    from specdec.backends import skinny

    package = Path(skinny.__file__).parents[1]
    toml = (package.parent / "pyproject.toml").read_text()
    line = re.search(r"^specdec = \[(.*)\]$", toml.split("[tool.setuptools.package-data]")[1], re.M)
    assert line, "no package data line for specdec in pyproject.toml"
    globs = re.findall(r'"([^"]+)"', line.group(1))
    for source in skinny.SOURCES:
        name = source.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(name, g) for g in globs), f"{name} is not in the package data"

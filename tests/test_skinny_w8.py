"""Int8 weights with float inputs for draft heads (``specdec::skinny_linear_w8``,
:class:`~specdec.backends.skinny.W8Linear`) and the measured choice between it and fbgemm's dynamic int8 GEMM
(:mod:`specdec.backends.draft_int8`).

Shown: the kernel computes the dequantized linear (float64 reference), a row's output is bitwise the same alone or
among up to 64 rows (negative control: fbgemm's kernel, whose inputs share one scale per call, is caught), a prompt's
prefill beyond that runs torch's GEMM, bad input is refused by name; the module keeps or releases the float weight;
the draft's choice follows the measured table linear by linear (a tie and a failed measurement each way), keeps the
rule where nothing is measured, and an EAGLE-3 drafter built under it holds the kernels the written table says.

Marked heavy: the first use builds the kernel library (about a minute on 2 cores); the rest of the suite runs with
``SPECDEC_SKINNY=off`` (the rule: fbgemm for every draft linear).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specdec.backends import draft_int8, skinny
from specdec.backends.kernel_times import KernelTable, kernel_table
from specdec.backends.kernels import Int8Linear
from specdec.backends.skinny import W8Linear
from specdec.drafters import Eagle3Drafter
from specdec.models import tiny_llama
from tests.factories import random_head
from tests.test_skinny import ISAS, kernel, needs_kernel  # noqa: F401 (kernel: the fixture needs_kernel names)
from tests.test_skinny_choice import measured  # noqa: F401 (a fixture: kernels measured, in a cache of the test's own)

pytestmark = pytest.mark.heavy


def quantized(n: int, k: int, seed: int) -> W8Linear:
    g = torch.Generator().manual_seed(seed)
    linear = nn.Linear(k, n)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(n, k, generator=g) / k**0.5)
        linear.bias.copy_(torch.randn(n, generator=g))
    return W8Linear(linear)


def op(x: torch.Tensor, m: W8Linear, isa: int, bias: bool = True) -> torch.Tensor:
    return torch.ops.specdec.skinny_linear_w8(x, m.qweight, m.scale, m.bias if bias else None, isa)


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("k, n", [(576, 192), (577, 7), (3, 1), (1541, 33)])
def test_matches_the_dequantized_linear_in_float64(isa: int, k: int, n: int) -> None:
    m = quantized(n, k, seed=k * n)
    w = m.qweight.double() * m.scale.double()[:, None]
    g = torch.Generator().manual_seed(0)
    for rows in (0, 1, 2, 5, 8, 9, 16, 17, 40, 64, 65, 130):  # above 64 rows: a prefill, on torch's own GEMM
        for bias in (False, True):
            x = torch.randn(rows, k, generator=g) if rows % 2 == 0 else torch.randn(1, rows, k, generator=g)
            y = op(x, m, isa, bias)
            ref = F.linear(x.double(), w, m.bias.double() if bias else None)
            assert y.shape == (*x.shape[:-1], n) and y.dtype == torch.float32
            assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5 * k**0.5), (rows, (y - ref).abs().max())


def row_invariant(f, x: torch.Tensor) -> bool:
    """Every row of ``f(x)`` bitwise equal to the row alone, and to the row inside every prefix of ``x``."""
    alone = torch.cat([f(x[i : i + 1]) for i in range(x.shape[0])])
    return all(torch.equal(f(x[:m]), alone[:m]) for m in range(1, x.shape[0] + 1))


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
def test_a_row_is_bitwise_the_same_alone_or_beside_other_rows(isa: int) -> None:
    m = quantized(300, 577, seed=0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 577, generator=g) * torch.logspace(-2, 2, 64)[:, None]  # rows of very different scales
    assert row_invariant(lambda a: op(a, m, isa), x)
    # negative control: fbgemm's kernel quantizes the inputs with one scale per call, so a row among larger rows
    # comes out differently (what made a batched row's draft depend on its neighbours)
    fbgemm = Int8Linear(nn.Linear(577, 300))
    with torch.no_grad():
        assert not row_invariant(fbgemm, x)


@needs_kernel
def test_a_prefill_beyond_the_largest_tree_runs_the_dense_gemm() -> None:
    m = quantized(96, 577, seed=2)
    x = torch.randn(skinny.INVARIANT_ROWS + 1, 577) * 10
    assert torch.equal(op(x, m, 0), F.linear(x, m.qweight.float() * m.scale[:, None], m.bias))
    tree = x[: skinny.INVARIANT_ROWS]
    assert torch.equal(op(tree, m, 0)[:1], op(tree[:1], m, 0))


@needs_kernel
def test_the_module_keeps_or_releases_the_float_weight_and_refuses_bad_input() -> None:
    linear = nn.Linear(40, 24)
    kept, released = W8Linear(linear), W8Linear(linear, keep_weight=False)
    assert kept.weight is linear.weight
    assert kept.bias.data_ptr() != linear.bias.data_ptr()  # a snapshot, as the int8 weight is
    assert torch.allclose(released.weight, linear.weight, atol=linear.weight.abs().max().item() / 127)
    x = torch.randn(3, 40)
    with torch.no_grad():
        assert torch.equal(kept(x), released(x))
        assert kept(x.bfloat16()).dtype == torch.bfloat16
        assert torch.allclose(kept(x), linear(x), atol=0.05)
    w8, s = kept.qweight, kept.scale
    with pytest.raises(RuntimeError, match="int8 w"):
        torch.ops.specdec.skinny_linear_w8(x, w8.float(), s)
    with pytest.raises(RuntimeError, match=r"x \[\.\.\., K\]"):
        torch.ops.specdec.skinny_linear_w8(torch.randn(3, 39), w8, s)
    with pytest.raises(RuntimeError, match="scale"):
        torch.ops.specdec.skinny_linear_w8(x, w8, s[:-1])
    with pytest.raises(RuntimeError, match="scale"):
        torch.ops.specdec.skinny_linear_w8(x, w8, s[:, None])
    with pytest.raises(RuntimeError, match="bias"):
        torch.ops.specdec.skinny_linear_w8(x, w8, s, torch.randn(23))
    with pytest.raises(RuntimeError, match="isa"):
        torch.ops.specdec.skinny_linear_w8(x, w8, s, None, 3)


def fake_table(ms: dict, failed: dict | None = None):
    table = KernelTable({}, ms=ms, failed=failed or {})
    return lambda shapes, dtype, kernels: table


def times(int8: float, w8: float) -> dict:
    return {"int8": {"1": int8, "8": int8}, "w8": {"1": w8, "8": w8}}


@needs_kernel
@pytest.mark.usefixtures("measured")
def test_the_table_decides_each_draft_linear(monkeypatch) -> None:
    ms = {"16x8": times(1.0, 2.0), "16x9": times(2.0, 1.0), "16x10": times(1.0, 1.01)}
    monkeypatch.setattr(draft_int8, "kernel_table", fake_table(ms, {"16x11": "too noisy"}))
    chosen = {n: type(draft_int8.draft_int8_linear(nn.Linear(16, n, bias=False))) for n in (8, 9, 10, 11)}
    assert chosen == {8: Int8Linear, 9: W8Linear, 10: W8Linear, 11: Int8Linear}  # a tie: w8; a failure: the rule
    # the rule where nothing is measured: SPECDEC_SKINNY=off (the suite), or measuring switched off
    for env, value in (("SPECDEC_SKINNY", "off"), ("SPECDEC_KERNELS", "rule")):
        with monkeypatch.context() as m:
            m.setenv(env, value)
            assert type(draft_int8.draft_int8_linear(nn.Linear(16, 9, bias=False))) is Int8Linear


@needs_kernel
@pytest.mark.usefixtures("measured")
def test_a_measured_table_is_written_and_an_eagle3_drafter_follows_it() -> None:
    target = tiny_llama(vocab_size=64, hidden_size=32, num_layers=3, seed=0)
    drafter = Eagle3Drafter(random_head("eagle3", target, seed=0), target, max_len=64, weights="int8")
    linears = {name: m for name, m in drafter.head.named_modules() if isinstance(m, (Int8Linear, W8Linear))}
    assert len(linears) >= 5  # fc, the fused q/k/v, o, the fused gate/up, down, lm_head
    table = kernel_table([], torch.float32, kernels=draft_int8.DRAFT_KERNELS)  # read back from this test's cache
    for name, m in linears.items():
        names = [
            n for n in [*table.ms, *table.failed] if n.removesuffix("+bias") == f"{m.in_features}x{m.out_features}"
        ]
        assert len(names) == 1, (name, names)
        shape = KernelTable.shape(names[0])
        want = Int8Linear if table.choice(shape) == "int8" or names[0] in table.failed else W8Linear
        assert type(m) is want, (name, table.ms.get(names[0]))

"""The coded kernel's AMX form (``specdec.backends.skinny_amx``, ``skinny_amx.cpp``).

What these tests could catch: a layout that puts a code in another place than the kernel reads it (outputs of other
weights: the float64 check fails), a split of the inputs that drops bits (errors far above float32's), a row whose
output depends on the rows beside it or on how many there are (the bitwise row checks), a code the kernel never reads
(the one-code mutant), the table lookup used for codes it cannot hold, and a choice that puts a linear on the AMX form
where it was not measured faster, or under ``SPECDEC_AMX=off``. The kernel's tests run where the CPU has AMX-BF16 and
skip with the reason elsewhere; there the same properties (row invariance, accuracy) are proven for the AVX kernels
on every CPU (tests/test_skinny.py, tests/test_skinny_codes.py), and the layout, which is plain torch, is proven here
on every CPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from specdec.backends.skinny_amx import PAIR, amx_form, amx_layout, amx_synthetic
from specdec.backends.skinny_codes import QBLOCK, Codes, exact_codes
from tests.test_skinny import kernel  # noqa: F401 -- the fixture that skips where the kernel cannot run
from tests.test_skinny_codes import coded_tiny, gguf_like, package_calls_shim


@pytest.fixture(autouse=True)
def _default_forms(monkeypatch) -> None:
    """Every test here sees the default forms (``SPECDEC_AMX4`` unset), whatever the caller exported."""
    monkeypatch.delenv("SPECDEC_AMX4", raising=False)


@pytest.fixture
def amx(kernel) -> None:  # noqa: F811 -- the kernel fixture, then AMX
    from specdec.backends.skinny_amx import amx_unavailable

    if (why := amx_unavailable()) is not None:
        pytest.skip(f"the AMX form cannot run here: {why}")


def test_the_layout_is_the_codes_rearranged_as_the_kernel_reads_them() -> None:
    """Each code lands where the kernel reads weight ``(n, k)``: group ``n // 16 // PAIR``, block ``k // 32``, tile of
    the group, k-pair, output, pair member; ``d`` and ``m`` per tile, block, output. An odd number of tiles leaves a
    last group of one tile."""
    n, k = 48, 96  # 3 tiles: groups of 2 and 1
    g = torch.Generator().manual_seed(0)
    codes = Codes(
        torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8),
        torch.rand(n, k // QBLOCK, generator=g),
        torch.rand(n, k // QBLOCK, generator=g),
        "test",
    )
    q, d, m, small = amx_layout(codes)
    assert small == 0 and q.numel() == n * k and d.shape == m.shape == (n // 16, k // QBLOCK, 16)
    blocks = k // QBLOCK
    for row, col in [(0, 0), (5, 33), (17, 95), (40, 64), (47, 1), (31, 62)]:
        tile, block, within = row // 16, col // QBLOCK, col % QBLOCK
        group, first = tile // PAIR, tile // PAIR * PAIR
        tiles = min(PAIR, n // 16 - first)
        offset = first * blocks * 512 + (block * tiles + tile - first) * 512 + (within // 2) * 32 + (row % 16) * 2
        assert q[offset + within % 2] == codes.q[row, col], (row, col, group)
        assert d[tile, block, row % 16] == codes.d[row, block] and m[tile, block, row % 16] == codes.m[row, block]
    with pytest.raises(ValueError, match="multiple of 16"):
        amx_layout(Codes(codes.q[:40], codes.d[:40], codes.m[:40], "test"))


def test_the_form_follows_the_codes_range(monkeypatch) -> None:
    g = torch.Generator().manual_seed(0)
    monkeypatch.setenv("SPECDEC_AMX4", "off")  # the 4-bit form switched off: Q4_1 takes the byte form
    assert amx_form(exact_codes(gguf_like("q4_1", 16, 64))) == "amx"
    assert amx_layout(exact_codes(gguf_like("q4_1", 16, 64)))[0].dtype == torch.int8
    assert amx_layout(exact_codes(gguf_like("q4_1", 16, 64)), "amx4")[0].dtype == torch.uint8  # asked by name
    monkeypatch.setenv("SPECDEC_AMX4", "maybe")
    with pytest.raises(ValueError, match="SPECDEC_AMX4"):
        amx_form(exact_codes(gguf_like("q4_1", 16, 64)))
    monkeypatch.delenv("SPECDEC_AMX4")
    assert amx_form(exact_codes(gguf_like("q4_1", 16, 64))) == "amx4"  # 0..15, float16 d and m
    codes = exact_codes(gguf_like("q4_1", 16, 64))
    assert amx_form(Codes(codes.q, codes.d * (1 + 2**-20), codes.m, "test")) == "amx"  # a d that is no float16
    assert amx_form(exact_codes(gguf_like("q5_1", 16, 64))) == "amx"  # 0..31
    assert amx_form(exact_codes(gguf_like("q8_0", 16, 64))) == "amx8"
    assert amx_form(exact_codes(gguf_like("q4_0", 16, 64))) == "amx8"  # -8..7: the lookup takes no negatives
    for form in ("amx4", "amx", "amx8"):
        assert amx_form(amx_synthetic(16, 64, g, form)) == form
    amx_layout(codes, "amx"), amx_layout(codes, "amx8")  # wider forms hold them too; a narrower one refuses
    with pytest.raises(ValueError, match="'amx4' cannot hold"):
        amx_layout(exact_codes(gguf_like("q8_0", 16, 64)), "amx4")


def test_the_4bit_layout_is_the_byte_layout_two_codes_a_byte() -> None:
    """``amx4`` holds the byte form's codes, tile by tile (512 codes in 256 bytes): the 16-bit word ``i`` of a tile
    has its codes ``i``, ``128 + i``, ``256 + i``, ``384 + i`` in its nibbles, lowest first; ``d`` and ``m`` are the
    same values in float16. It fails if a nibble goes to another code or a tile's bytes to another tile."""
    codes = exact_codes(gguf_like("q4_1", 48, 96, seed=1))
    q4, d4, m4, small4 = amx_layout(codes)
    q1, d1, m1, _ = amx_layout(codes, "amx")
    assert q4.dtype == torch.uint8 and q4.numel() * 2 == q1.numel() and d4.dtype == m4.dtype == torch.float16
    words = (q4[0::2].to(torch.int32) | q4[1::2].to(torch.int32) << 8).reshape(-1, 1, 128)
    unpacked = (words >> torch.tensor([0, 4, 8, 12]).reshape(1, 4, 1)) & 0xF  # [tile, quarter, i]
    assert torch.equal(unpacked.reshape(-1).to(torch.int8), q1) and len(set(q1.tolist())) > 8
    assert torch.equal(d4.float(), d1) and torch.equal(m4.float(), m1) and small4 == 1


def _bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A float32 dot product's error bound, ``K * 2^-24 * (|x| @ |w|^T)``, with a factor 4 for the blocks' two
    fmas and the weight's exact value against its float32 rounding."""
    return 4 * x.shape[-1] * 2.0**-24 * (x.abs().double() @ w.abs().double().T)


@pytest.mark.heavy
@pytest.mark.usefixtures("amx")
@pytest.mark.parametrize("scheme", ["q4_1", "q5_1", "q8_0", "q4_0"])
@pytest.mark.parametrize("n", [48, 64])
def test_every_row_alone_is_bitwise_the_row_in_any_batch_and_float32_accurate(scheme: str, n: int) -> None:
    """Rows 1 to 70 (passes of 16 and a remainder), with and without bias: each output row is bitwise the same
    computed alone, and within float32's error bound of the exact weight's float64 product. Negative control: a code
    changed by one changes that output."""
    k = 576
    w = gguf_like(scheme, n, k, seed=3)
    codes = exact_codes(w)
    exact = codes.q.double().reshape(n, -1, QBLOCK) * codes.d.double()[..., None] + codes.m.double()[..., None]
    exact = exact.reshape(n, k)
    q, d, m, small = amx_layout(codes)
    bias = torch.randn(n)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(70, k, generator=g)
    alone = {
        b is None: torch.cat([torch.ops.specdec.skinny_linear_amx(x[i : i + 1], q, d, m, b, small) for i in range(70)])
        for b in (None, bias)
    }
    for rows in (1, 2, 3, 5, 8, 15, 16, 17, 33, 64, 70):
        for b in (None, bias):
            got = torch.ops.specdec.skinny_linear_amx(x[:rows], q, d, m, b, small)
            assert torch.equal(got.view(torch.int32), alone[b is None][:rows].view(torch.int32)), (rows, b is None)
    want = x.double() @ exact.T + bias.double()
    assert bool(((alone[False].double() - want).abs() <= _bound(x, exact) + 1e-30).all())
    if scheme == "q4_1":  # the 4-bit form: bitwise the byte form's outputs on the same codes, every row count
        wide = amx_layout(codes, "amx")
        assert q.dtype == torch.uint8 and torch.equal(
            torch.ops.specdec.skinny_linear_amx(x, *wide[:3], bias, 1), alone[False]
        )
    mutant = codes.q.clone()
    mutant[7, 100] += 1 if mutant[7, 100] < 15 else -1
    q2 = amx_layout(Codes(mutant, codes.d, codes.m, codes.scheme))[0]
    changed = torch.ops.specdec.skinny_linear_amx(x[:1], q2, d, m, None, small)
    assert not torch.equal(changed[0, 7], alone[True][0, 7])


@pytest.mark.heavy
@pytest.mark.usefixtures("amx")
@pytest.mark.parametrize("rows", [1, 3, 8, 21])
def test_every_part_of_an_input_counts_exactly(rows: int) -> None:
    """Codes of the identity (``d = 1``, ``m = 0``): each output is one input times 1, every sum exact, so the output
    is the input bit for bit, in both tile arrangements (3 rows stacked, 8 apart, 21 in passes). It fails if the
    split drops or garbles a part (an input's lowest 8 bits are its third part: ``1 + 2^-8 + 2^-23`` among them), if
    the layout sends a code to another output, or if an output tile is written to the wrong columns."""
    k = 64
    q = torch.eye(k, dtype=torch.int8)
    codes = Codes(q, torch.ones(k, k // QBLOCK), torch.zeros(k, k // QBLOCK), "identity")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(rows, k, generator=g) * torch.logspace(-20, 20, k, base=2.0)
    x[0, :3] = torch.tensor([1 + 2**-8 + 2**-23, -(1 + 2**-16 + 2**-23), 3 * 2**-20 + 2**-43])
    assert ((x.view(torch.int32) & 0xFF) != 0).any()  # inputs whose third part is not zero
    q, d, m, small = amx_layout(codes)
    got = torch.ops.specdec.skinny_linear_amx(x, q, d, m, None, small)
    assert torch.equal(got.view(torch.int32), x.view(torch.int32))


@pytest.mark.heavy
@pytest.mark.usefixtures("amx")
def test_packages_time_the_amx_form_by_default_eager_shapes_when_asked(monkeypatch) -> None:
    """Where AMX runs, the package's table has the AMX candidates by default and the eager one does not; ``auto``
    adds them to both, ``off`` to neither (``specdec doctor``'s line says which)."""
    from specdec.backends.kernel_times import CODED_KERNELS, PACKAGE_CODED
    from specdec.backends.skinny_choice import table_kernels

    linears = [nn.Linear(64, 32)]
    with torch.no_grad():
        linears[0].weight.copy_(gguf_like("q4_1", 32, 64))
    monkeypatch.delenv("SPECDEC_AMX", raising=False)
    monkeypatch.delenv("SPECDEC_CODES", raising=False)
    eager, package, about = table_kernels(linears)
    assert eager == CODED_KERNELS and package == (*PACKAGE_CODED, "amx4", "amx", "amx8") and "(package)" in about
    monkeypatch.setenv("SPECDEC_AMX", "auto")
    eager, package, about = table_kernels(linears)
    assert eager == (*CODED_KERNELS, "amx4", "amx", "amx8") and "eager and package" in about
    monkeypatch.setenv("SPECDEC_AMX", "off")
    assert table_kernels(linears)[:2] == (CODED_KERNELS, PACKAGE_CODED)


@pytest.mark.heavy
@pytest.mark.usefixtures("amx")
def test_the_amx_form_refuses_bad_input_by_name() -> None:
    q, d, m, small = amx_layout(Codes.synthetic(32, 64, torch.Generator().manual_seed(0)))
    x = torch.randn(2, 64)
    with pytest.raises(RuntimeError, match="d and m"):
        torch.ops.specdec.skinny_linear_amx(x, q, d[:, :1], m)
    with pytest.raises(RuntimeError, match="int8 q"):
        torch.ops.specdec.skinny_linear_amx(x, q.float(), d, m)
    with pytest.raises(RuntimeError, match="got Float, Byte, Float and Float"):  # 4-bit codes, float32 scales
        torch.ops.specdec.skinny_linear_amx(x, q[: q.numel() // 2].view(torch.uint8), d, m)
    q4, d4, m4, _ = amx_layout(amx_synthetic(32, 64, torch.Generator().manual_seed(0), "amx4"))
    with pytest.raises(RuntimeError, match="bytes"):
        torch.ops.specdec.skinny_linear_amx(x, q4[:-2], d4, m4)
    with pytest.raises(RuntimeError, match=r"x \[\.\.\., 64\]"):
        torch.ops.specdec.skinny_linear_amx(torch.randn(2, 32), q, d, m)
    with pytest.raises(ValueError, match="block codes"):
        from specdec.backends.skinny import SkinnyLinear

        SkinnyLinear(nn.Linear(64, 32), None, amx=True)


@pytest.mark.heavy
@pytest.mark.usefixtures("amx")
def test_a_package_calls_the_amx_forms_c_shim(tmp_path) -> None:
    from specdec.backends import skinny

    model, wrapper = package_calls_shim(tmp_path, amx=True)
    assert model[0].form == "amx" and model[2].form == "skinny" and skinny.coded_names(model) == ["0@amx4n1"]
    assert "aoti_torch_cpu_skinny_linear_amx(" in wrapper and "proxy_executor->call_function" not in wrapper


@pytest.mark.heavy
@pytest.mark.usefixtures("amx")
@pytest.mark.parametrize("amx_ms", [0.2, 0.4])
def test_auto_takes_the_amx_form_where_it_times_fastest(monkeypatch, tmp_path, amx_ms: float) -> None:
    """``weights="auto"`` on eager shapes: a model whose weights are codes runs the AMX form where the table says it
    is the fastest (costs patched: 0.2 against the coded kernel's 0.3) and ``SPECDEC_AMX=auto`` asks for it, the
    coded kernel where not (0.4), never with ``SPECDEC_AMX=off`` or by default (packages only); the label says
    ``+amx`` (its own cost curve), and greedy decoding emits the stock model's tokens (the same weights; float32
    rounding apart, no near-tie in this model)."""
    from specdec.target import HFTarget

    monkeypatch.setenv("SPECDEC_AMX", "auto")
    ms = {"stock": 1.0, "packed": 0.9, "skinny": 0.5, "coded": 0.3, "amx4": amx_ms, "amx": amx_ms, "amx8": amx_ms}
    model, greedy = coded_tiny(monkeypatch, tmp_path, ms)
    want = greedy(HFTarget(model, max_len=64, weights="stock", static_shapes=False))
    target = HFTarget(model, max_len=64, static_shapes=False)
    forms = {m.form for m in target.model.modules() if hasattr(m, "form")}
    assert forms == ({"amx"} if amx_ms < 0.3 else {"coded"})
    assert ("+amx" in target.execution.label) is (amx_ms < 0.3) and (target.execution.amx > 0) is (amx_ms < 0.3)
    assert greedy(target) == want
    for switch in ("off", None):  # asked off, and the default (packages only)
        if switch is None:
            monkeypatch.delenv("SPECDEC_AMX")
        else:
            monkeypatch.setenv("SPECDEC_AMX", switch)
        off = HFTarget(model, max_len=64, static_shapes=False)
        assert {m.form for m in off.model.modules() if hasattr(m, "form")} == {"coded"}
    monkeypatch.setenv("SPECDEC_AMX", "on")
    with pytest.raises(ValueError, match="SPECDEC_AMX must be"):
        HFTarget(model, max_len=64, static_shapes=False)


def test_the_switch_times_amx_for_packages_by_default(monkeypatch) -> None:
    """``SPECDEC_AMX``: packages only by default, both with ``auto``, neither with ``off``; anything else refused."""
    from specdec.backends.skinny_amx import amx_timed

    monkeypatch.delenv("SPECDEC_AMX", raising=False)
    assert amx_timed(True) and not amx_timed(False)
    monkeypatch.setenv("SPECDEC_AMX", "auto")
    assert amx_timed(True) and amx_timed(False)
    monkeypatch.setenv("SPECDEC_AMX", "off")
    assert not amx_timed(True) and not amx_timed(False)
    monkeypatch.setenv("SPECDEC_AMX", "yes")
    with pytest.raises(ValueError, match="SPECDEC_AMX must be"):
        amx_timed(True)

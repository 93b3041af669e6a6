"""Exact block codes (``specdec.backends.skinny_codes``) and the kernel that streams them (``skinny_linear_q``).

What these tests could catch: a scheme that decodes other bits than the weight (a wrong rounding of ``d``, a signed
code range off by one), codes accepted for a weight that is not such codes (one element off by one ulp, a NaN), a
kernel that reads the codes in another order than the float32 kernel sums (its outputs would differ in the last bits
from ``specdec::skinny_linear`` on the decoded weight), and a choice that puts codes where they were not measured
faster or that ignores ``SPECDEC_CODES=off``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from specdec.backends.skinny_codes import QBLOCK, SCHEMES, Codes, exact_codes
from tests.test_skinny import ISAS, kernel  # noqa: F401 -- the fixture that skips where the kernel cannot run


def gguf_like(scheme: str, n: int, k: int, seed: int = 0) -> torch.Tensor:
    """A float32 ``[n, k]`` weight quantized and dequantized as llama.cpp's ``scheme`` does (float16 ``d`` and
    ``m``, rounded codes, ``d * q + m`` in float32): what a GGUF loader hands transformers."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k // QBLOCK, QBLOCK, generator=g) * 0.05
    if scheme in ("q4_1", "q5_1"):
        levels = 15 if scheme == "q4_1" else 31
        low = x.amin(-1, keepdim=True)
        d = ((x.amax(-1, keepdim=True) - low) / levels).half().float()
        m = low.half().float()
        q = torch.round((x - m) / d).clamp(0, levels)
    elif scheme == "q8_0":
        d = (x.abs().amax(-1, keepdim=True) / 127).half().float()
        m = torch.zeros_like(d)
        q = torch.round(x / d).clamp(-127, 127)
    else:  # q4_0 / q5_0: d = (the value of largest magnitude) / -8 (-16), codes -8..7 (-16..15)
        half = 8 if scheme == "q4_0" else 16
        v = x.gather(-1, x.abs().argmax(-1, keepdim=True))
        d = (v / -half).half().float()
        m = torch.zeros_like(d)
        q = torch.round(x / d).clamp(-half, half - 1)
    return (d * q + m).reshape(n, k)


@pytest.mark.parametrize("scheme", [name for name, _, _ in SCHEMES])
def test_each_scheme_is_found_and_decodes_to_the_weights_bits(scheme: str) -> None:
    w = gguf_like(scheme, 48, 96)
    codes = exact_codes(w)
    assert codes is not None and codes.scheme == scheme
    assert torch.equal(codes.decode().view(torch.int32), w.view(torch.int32))
    assert codes.q.dtype == torch.int8 and codes.d.shape == codes.m.shape == (48, 96 // QBLOCK)
    assert codes.nbytes < w.numel() * w.element_size() / 2.5  # 1.25 bytes a weight against 4


def test_weights_that_are_not_codes_get_none() -> None:
    """Negative controls: the check is bitwise, so one ulp anywhere, a NaN, another dtype or a width that is not a
    whole number of blocks leaves the weight to the float32 kernels."""
    w = gguf_like("q4_1", 16, 64)
    assert exact_codes(w) is not None
    assert exact_codes(torch.randn(16, 64)) is None  # a float32 weight never quantized
    off = w.clone()
    off[3, 17] = torch.nextafter(off[3, 17], torch.tensor(1.0))
    assert exact_codes(off) is None
    nan = w.clone()
    nan[0, 0] = float("nan")
    assert exact_codes(nan) is None
    assert exact_codes(w.bfloat16()) is None
    assert exact_codes(w[:, :40]) is None  # 40 inputs: not a whole number of blocks of 32


def test_the_check_in_row_chunks_sees_every_chunk(monkeypatch) -> None:
    """Rows are checked a chunk at a time (bounded temporaries): the codes are the same as in one piece, and one ulp
    off in the last chunk still refuses the weight."""
    from specdec.backends import skinny_codes

    w = gguf_like("q4_1", 18, 64)
    whole = exact_codes(w)
    monkeypatch.setattr(skinny_codes, "CHUNK_ROWS", 4)
    chunked = exact_codes(w)
    assert all(torch.equal(getattr(whole, f), getattr(chunked, f)) for f in ("q", "d", "m"))
    w[17, 63] = torch.nextafter(w[17, 63], torch.tensor(-1.0))
    assert exact_codes(w) is None


@pytest.mark.slow
def test_smollm2_gguf_weights_are_exact_codes() -> None:
    """The default target: every linear of SmolLM2-135M-Instruct's GGUF file (Q4_1 layers, the Q8_0 embedding
    tied to the vocabulary projection) decodes bit for bit from the codes found in its float32 weights."""
    from specdec.models import load_smollm2

    model = load_smollm2()[0]
    schemes = {}
    for name, linear in model.named_modules():
        if isinstance(linear, nn.Linear):
            codes = exact_codes(linear.weight)
            assert codes is not None, name
            schemes[codes.scheme] = schemes.get(codes.scheme, 0) + 1
    assert schemes == {"q4_1": 210, "q8_0": 1}


# The kernel (built on first use: heavy, as tests/test_skinny.py).
@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("scheme", ["q4_1", "q8_0"])
def test_the_coded_kernel_gives_the_float32_kernels_bits(isa: int, scheme: str) -> None:
    """Every row count of a step, a tree and a prefill, with and without bias: ``skinny_linear_q`` on the codes is
    bitwise ``skinny_linear`` on the weight (so row-invariant as it is). Negative control: a code changed by one
    changes the output, so the kernel does read the codes."""
    w = gguf_like(scheme, 200, 576, seed=1)
    codes = exact_codes(w)
    bias = torch.randn(200)
    g = torch.Generator().manual_seed(2)
    for rows in (1, 2, 3, 5, 8, 9, 16, 17, 40, 64, 65):
        x = torch.randn(rows, 576, generator=g)
        for b in (None, bias):
            want = torch.ops.specdec.skinny_linear(x, w, b, isa)
            got = torch.ops.specdec.skinny_linear_q(x, codes.q, codes.d, codes.m, b, isa)
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (rows, b is not None)
    q = codes.q.clone()
    q[7, 100] += 1
    x = torch.randn(1, 576, generator=g)
    changed = torch.ops.specdec.skinny_linear_q(x, q, codes.d, codes.m, None, isa)
    assert not torch.equal(changed[0, 7], torch.ops.specdec.skinny_linear(x, w, None, isa)[0, 7])


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_the_coded_kernel_refuses_bad_input_by_name() -> None:
    codes = Codes.synthetic(8, 64, torch.Generator().manual_seed(0))
    x = torch.randn(2, 64)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        torch.ops.specdec.skinny_linear_q(torch.randn(2, 40), codes.q[:, :40], codes.d[:, :1], codes.m[:, :1])
    with pytest.raises(RuntimeError, match="d and m"):
        torch.ops.specdec.skinny_linear_q(x, codes.q, codes.d[:, :1], codes.m)
    with pytest.raises(RuntimeError, match="int8 q"):
        torch.ops.specdec.skinny_linear_q(x, codes.q.float(), codes.d, codes.m)


def package_calls_shim(tmp_path, amx: bool) -> tuple[nn.Module, str]:
    """A small model with one coded linear (on the AMX form where ``amx``) and one float32 one, packaged ahead of
    time: ``(model, the package's wrapper source)``, after checking the package's outputs are the model's."""
    from specdec.backends import skinny
    from tests.test_skinny import _cpp_sources

    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    with torch.no_grad():
        model[0].weight.copy_(gguf_like("q4_1", 32, 64))
        skinny.skinny_linears(model, codes=lambda linear: exact_codes(linear.weight), amx=lambda linear: amx)
        x = torch.randn(3, 64)
        path = torch._inductor.aoti_compile_and_package(
            torch.export.export(model, (x,)),
            package_path=str(tmp_path / "m.pt2"),
            inductor_configs=skinny.package_options(),
        )
        assert torch.equal(torch._inductor.aoti_load_package(path)(x), model(x))
    return model, next(p for p in _cpp_sources(path) if "wrapper" in p[0])[1]


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_a_package_calls_the_coded_kernels_c_shim(tmp_path) -> None:
    from specdec.backends import skinny

    model, wrapper = package_calls_shim(tmp_path, amx=False)
    assert model[0].scheme == "q4_1" and model[2].scheme is None and skinny.uses_codes(model)
    assert "aoti_torch_cpu_skinny_linear_q(" in wrapper and "proxy_executor->call_function" not in wrapper


def coded_tiny(monkeypatch, tmp_path, ms: dict[str, float]):
    """``(model, greedy)``: a tiny Llama whose linears' weights are Q4_1 codes, with ``weights="auto"`` measuring
    here and every kernel table's cost patched to ``ms[kernel]``; ``greedy(target)`` its 12 greedy tokens."""
    from specdec.backends.kernel_times import KernelTable
    from specdec.generate import StopCondition, VanillaGenerator
    from specdec.models import tiny_llama
    from specdec.sampling import SamplingParams

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECDEC_SKINNY", "auto")
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)
    monkeypatch.setattr(KernelTable, "cost", lambda self, shape, name: ms[name])
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, logit_scale=1.5, seed=0)
    with torch.no_grad():
        for i, linear in enumerate(m for m in model.modules() if isinstance(m, nn.Linear)):
            linear.weight.copy_(gguf_like("q4_1", *linear.weight.shape, seed=i))

    def greedy(target) -> list[int]:
        stop = StopCondition(max_new_tokens=12, eos_token_ids=())
        return list(VanillaGenerator(target).generate(torch.arange(5), SamplingParams(temperature=0.0), stop).tokens)

    return model, greedy


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
@pytest.mark.parametrize("coded_ms", [0.3, 0.6])
def test_auto_takes_the_codes_where_they_time_faster(monkeypatch, tmp_path, coded_ms: float) -> None:
    """``weights="auto"`` on eager shapes: a model whose weights are codes runs them where the table says the coded
    form is faster (costs patched: 0.3 against the float32 kernel's 0.5), the float32 weight where not (0.6), never
    with ``SPECDEC_CODES=off``; the greedy tokens are the stock model's either way (the same output bits as the
    float32 kernel)."""
    from specdec.target import HFTarget

    model, greedy = coded_tiny(monkeypatch, tmp_path, {"stock": 1.0, "packed": 0.9, "skinny": 0.5, "coded": coded_ms})
    want = greedy(HFTarget(model, max_len=64, weights="stock", static_shapes=False))
    target = HFTarget(model, max_len=64, static_shapes=False)
    coded = [m.scheme for m in target.model.modules() if hasattr(m, "scheme")]
    assert coded and all(s == ("q4_1" if coded_ms < 0.5 else None) for s in coded)
    assert ("+coded" in target.execution.weights) is (coded_ms < 0.5)
    assert greedy(target) == want
    monkeypatch.setenv("SPECDEC_CODES", "off")
    off = HFTarget(model, max_len=64, static_shapes=False)
    assert off.execution.skinny > 0 and not any(getattr(m, "scheme", None) for m in off.model.modules())


@pytest.mark.heavy
@pytest.mark.usefixtures("kernel")
def test_codes_name_their_own_package_and_cost_curve_but_are_not_saved() -> None:
    """A package on codes is another compiled graph with other constants: its name differs from the float32 skinny
    package's and the stock one's, and an ahead-of-time execution's label (the cost curve's file) says ``+coded``.
    The codes are derived from the weight, so a prepared model's ``state_dict`` does not carry them."""
    from specdec.backends import skinny
    from specdec.backends.aot import package_path
    from specdec.backends.choice import Execution

    model = nn.Sequential(nn.Linear(64, 32)).eval()
    with torch.no_grad():
        model[0].weight.copy_(gguf_like("q4_1", 32, 64))
    names = [package_path(model).name]
    skinny.skinny_linears(model)
    names.append(package_path(model).name)
    skinny.plain_linears(model)
    skinny.skinny_linears(model, codes=lambda linear: exact_codes(linear.weight))
    names.append(package_path(model).name)
    assert len(set(names)) == 3 and skinny.coded_names(model) == ["0"]
    assert set(model.state_dict()) == {"0.weight", "0.bias"}
    assert Execution("stock", True, aot=True, skinny=1, coded=1).label == "stock+aot+skinny+coded"
    assert Execution("stock", True, aot=True, skinny=1).label == "stock+aot+skinny"

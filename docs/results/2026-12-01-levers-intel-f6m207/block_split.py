"""How much a split of real SmolLM2 activations on each 32-block's exponent grid loses, against float32 GEMM's own
rounding (issue 45: the exact-sum form the README's last section proposes).

    python docs/results/2026-12-01-levers-intel-f6m207/block_split.py   # block_split.txt

The inputs of five linears on one prompt (hooks on the stock model). Per input row and block of 32: the grid step
``s = 2^(floor(log2 max|x|) + 1 - 7)`` and parts ``p_i = trunc(rest / s_i)`` with ``s_i = s / 128^i`` (each an integer
of at most 7 bits and a sign, an int8 tile operand), 3 or 4 of them; their sum replaces ``x``. Errors against the
exact product (float64, the weights' exact GGUF values) divided by ``sum |x| |w|`` (the scale of a GEMM's error
bound), median and max over outputs, beside a float32 GEMM's.
"""

import torch

from specdec.backends.skinny_codes import exact_codes
from specdec.models import load_smollm2

NAMES = (
    "model.layers.0.self_attn.q_proj",
    "model.layers.15.mlp.down_proj",
    "model.layers.29.mlp.down_proj",
    "model.layers.29.mlp.gate_proj",
    "lm_head",
)
PROMPT = "Explain how a speculative decoder verifies a draft tree, with an example in Python code."


def split(x: torch.Tensor, parts: int, bits: int = 7) -> torch.Tensor:
    """``x [R, K]`` as the sum of ``parts`` integer parts on each 32-block's exponent grid (float64)."""
    rows, k = x.shape
    blocks = x.double().reshape(rows, k // 32, 32)
    top = blocks.abs().amax(-1, keepdim=True).clamp_min(1e-300)
    step = torch.exp2(torch.floor(torch.log2(top)) + 1 - bits)  # |x| / step < 2^bits
    rest, total = blocks.clone(), torch.zeros_like(blocks)
    for _ in range(parts):
        part = torch.trunc(rest / step)
        assert part.abs().max() <= 2**bits - 1
        total += part * step
        rest -= part * step
        step = step / 2**bits
    return total.reshape(rows, k)


def main() -> None:
    torch.set_num_threads(2)
    model, tokenizer = load_smollm2()
    modules = dict(model.named_modules())
    inputs = {}

    def keep(name: str):
        return lambda module, args, out: inputs.__setitem__(name, args[0][0].detach())

    hooks = [modules[name].register_forward_hook(keep(name)) for name in NAMES]
    with torch.no_grad():
        model(tokenizer(PROMPT, return_tensors="pt").input_ids)
    for hook in hooks:
        hook.remove()
    print("error / sum|x||w|, median and max over a prompt's outputs")
    for name in NAMES:
        codes = exact_codes(modules[name].weight.detach())
        w = codes.decode().double()
        x = inputs[name].float()
        exact, scale = x.double() @ w.T, x.double().abs() @ w.abs().T
        cells = []
        for label, y in [("float32 GEMM", (x @ w.float().T).double())] + [
            (f"{p} parts", split(x, p) @ w.T) for p in (3, 4)
        ]:
            e = (y - exact).abs() / scale
            cells.append(f"{label} {e.median():.1e} / {e.max():.1e}")
        print(f"  {name:32s} {codes.scheme}: " + ";  ".join(cells), flush=True)


if __name__ == "__main__":
    main()

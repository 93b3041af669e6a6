"""Our static 1-token forward of SmolLM2 as an AOTInductor package: greedy tokens against the eager path's, and the
step's time, in a fresh process.

    python docs/results/2026-11-28-draft-graphs-zen3/aoti_smollm2.py build   # export + compile, once (~2 minutes)
    python docs/results/2026-11-28-draft-graphs-zen3/aoti_smollm2.py run     # load, decode, time

The package's function takes what ``ModelRunner``'s static forward takes (ids, positions, the full-capacity mask of
``_static_inputs``, the write position, every layer's key and value tensors of the static ``PositionCache``) and
writes the cache in place (freezing and inductor's GEMM autotuning, as the static path compiles on a CPU). ``run``
prefills the first MT-bench question eagerly into the static cache, then decodes 47 more greedy tokens through the
package, and compares the 48 tokens with the eager fast path's own greedy decoding of the same prompt, three rounds.
"""

import sys
import time

import torch
from torch import nn

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition, VanillaGenerator
from specdec.kvcache import PositionCache
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

PACKAGE = "/tmp/smol_ours.pt2"
NEW = 48
torch.set_num_threads(2)
model, tokenizer = load_smollm2()
model.eval()
target = HFTarget(model, max_len=512, static_shapes=True, buckets=(1,))
runner = target.runner
CAPACITY, LAYERS = runner.cache.max_len, model.config.num_hidden_layers


class Step(nn.Module):
    """The static forward with the cache's tensors as inputs (written in place)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, positions, mask, write_pos, keys, values):
        cache = PositionCache(LAYERS, CAPACITY, static=True)
        for i, layer in enumerate(cache.layers):
            layer.lazy_initialization(keys[i][:, :, :1], values[i][:, :, :1])
            layer.keys, layer.values = keys[i], values[i]
            layer.cumulative_length = write_pos.clone()  # StaticLayer adds to it in place
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        )
        return out.logits


def prefill(prompt: torch.Tensor) -> int:
    """The prompt into the static cache (eagerly); returns the first greedy token."""
    return int(target.prefill(prompt).logits[-1].argmax())


def step_args(token: int, position: int) -> tuple:
    ids, positions, mask = runner._static_inputs(
        torch.tensor([token]), torch.tensor([position]), position, None, None, True
    )
    keys = [layer.keys for layer in runner.cache.layers]
    values = [layer.values for layer in runner.cache.layers]
    return ids[None], positions[None], mask, torch.tensor(position), keys, values


prompt = chat_ids(tokenizer, mtbench_prompts()[0])
if sys.argv[1] == "build":
    start = time.perf_counter()
    program = torch.export.export(Step(model), step_args(prefill(prompt), prompt.shape[0]), strict=False)
    exported = time.perf_counter()
    print(f"export {exported - start:.1f} s", flush=True)
    options = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}
    torch._inductor.aoti_compile_and_package(program, package_path=PACKAGE, inductor_configs=options)
    print(f"compile {time.perf_counter() - exported:.1f} s", flush=True)
else:
    start = time.perf_counter()
    package = torch._inductor.aoti_load_package(PACKAGE)
    print(f"load {time.perf_counter() - start:.2f} s")
    eager = VanillaGenerator(HFTarget(model, max_len=512))
    stop, greedy = StopCondition(max_new_tokens=NEW, eos_token_ids=()), SamplingParams(temperature=0)
    for r in range(3):
        start = time.perf_counter()
        want = eager.generate(prompt, greedy, stop).tokens
        eager_ms = 1e3 * (time.perf_counter() - start) / NEW
        token = prefill(prompt)
        got = [token]
        with torch.no_grad():
            start = time.perf_counter()
            for i in range(NEW - 1):
                out = package(*step_args(token, prompt.shape[0] + i))
                out = out[0] if isinstance(out, (list, tuple)) else out
                token = int(out[0, -1].argmax())
                got.append(token)
            package_ms = 1e3 * (time.perf_counter() - start) / (NEW - 1)
        same = sum(a == b for a, b in zip(got, want, strict=True))
        times = f"eager fast path {eager_ms:.1f} ms/token, package {package_ms:.1f} ms"
        print(f"round {r}: same tokens {same}/{NEW}; {times}")

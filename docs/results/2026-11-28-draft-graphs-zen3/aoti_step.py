"""AOTInductor feasibility: SmolLM2's 1-token step, compiled once into a package, loaded in seconds by a new process.

    python docs/results/2026-11-28-draft-graphs-zen3/aoti_step.py build   # export + compile (minutes, once)
    python docs/results/2026-11-28-draft-graphs-zen3/aoti_step.py run     # a fresh process: load, then time

``build`` exports the model with transformers' own exportable static-cache wrapper (capacity 512, one token per
call) and compiles it with inductor's freezing and GEMM autotuning (the static path's CPU options) into
``/tmp/smol_step.pt2``. ``run`` loads that package and times 48 one-token steps against the eager fast path's
greedy decoding (ms per token, prefill included) in three interleaved rounds. A timing experiment only: the package
runs transformers' cache, not ours, on a cache it keeps inside (no tree masks, no compaction), and nothing checks
its tokens.
"""

import sys
import time

import torch

from specdec.generate import StopCondition, VanillaGenerator
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

PACKAGE = "/tmp/smol_step.pt2"
OPTIONS = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}

torch.set_num_threads(2)
model, _ = load_smollm2()
model.eval()
model.generation_config.cache_implementation = "static"  # the exportable wrapper's requirement
if sys.argv[1] == "build":
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    start = time.perf_counter()
    wrapper = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=512)
    with torch.no_grad():
        program = wrapper.export(input_ids=torch.tensor([[1]]), cache_position=torch.tensor([0]))
    exported = time.perf_counter()
    print(f"export {exported - start:.1f} s", flush=True)
    path = torch._inductor.aoti_compile_and_package(program, package_path=PACKAGE, inductor_configs=OPTIONS)
    print(f"aoti compile {time.perf_counter() - exported:.1f} s -> {path}", flush=True)
else:
    start = time.perf_counter()
    runner = torch._inductor.aoti_load_package(PACKAGE)
    print(f"load {time.perf_counter() - start:.2f} s", flush=True)
    eager = VanillaGenerator(HFTarget(model, max_len=512))
    ids = torch.arange(100) % 1000
    stop, greedy = StopCondition(max_new_tokens=48, eos_token_ids=()), SamplingParams(temperature=0)
    for r in range(3):
        start = time.perf_counter()
        out = eager.generate(ids, greedy, stop)
        eager_ms = 1e3 * (time.perf_counter() - start) / len(out.tokens)
        token = torch.tensor([[5]])
        with torch.no_grad():
            start = time.perf_counter()
            for i in range(48):
                logits = runner(input_ids=token, cache_position=torch.tensor([100 + i]))
                token = logits[..., -1, :].argmax(-1).view(1, 1)
            aoti_ms = 1e3 * (time.perf_counter() - start) / 48
        print(f"round {r}: eager fast path {eager_ms:.1f} ms/token, AOTI step {aoti_ms:.1f} ms", flush=True)

"""The README's demo: speculative generation on SmolLM2-135M-Instruct, with vanilla decoding timed in the same run.

    python -m specdec.demo [--method NAME] [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--weights W]
                           [--dtype float32|bfloat16]

Defaults to the shipped EAGLE-3 head; without shipped heads it falls back to the best training-free drafter. Our
vanilla loop and HF ``generate`` (on the model as loaded; our target runs a transformed copy) are timed in the same
run. With ``--dtype bfloat16`` all three run the bfloat16 model (HF ``generate`` too); where ``auto`` packs its
linears (AMD CPUs with native bfloat16) it runs row-invariant numerics, so greedy speculative output equals our
vanilla bfloat16 output token for token.
"""

from __future__ import annotations

import argparse
import sys

import torch

from specdec.assets import chat_ids
from specdec.bench.runner import HFGenerate
from specdec.generate import GenerationResult, StopCondition
from specdec.methods import MethodOptions, build_method, default_method, method_names
from specdec.models import DTYPES, load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

PROMPT = "Explain in three sentences why the sky is blue."


def run(
    method: str,
    prompt: str,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    weights: str = "auto",
    dtype: str = "float32",
) -> int:
    torch.manual_seed(seed)
    model, tokenizer = load_smollm2(dtype=DTYPES[dtype])
    target = HFTarget(model, max_len=2048, weights=weights)  # a transformed copy: `model` stays as loaded
    ids = chat_ids(tokenizer, prompt)
    sampling = SamplingParams(temperature=temperature, seed=seed)
    stop = StopCondition(max_new_tokens=max_new_tokens, eos_token_ids=[tokenizer.eos_token_id])
    vanilla = build_method("vanilla", target)
    spec = build_method(method, target, MethodOptions())
    hf = HFGenerate(model, tokenizer.eos_token_id)  # HF generate runs the model as loaded, as its users run it
    # Warm-up every path once so none pays first-call costs in the timed runs.
    for gen in (vanilla, spec, hf):
        gen.generate(ids, sampling, StopCondition(max_new_tokens=4))
    base: GenerationResult = vanilla.generate(ids, sampling, stop)
    result: GenerationResult = spec.generate(ids, sampling, stop)
    reference: GenerationResult = hf.generate(ids, sampling, stop)

    print(f"prompt: {prompt}\n")
    print(tokenizer.decode(result.tokens, skip_special_tokens=True).strip(), "\n")
    m = result.metrics
    speedup = m.tokens_per_second / max(base.metrics.tokens_per_second, 1e-9)
    vs_hf = m.tokens_per_second / max(reference.metrics.tokens_per_second, 1e-9)
    draft = getattr(getattr(spec, "drafter", None), "execution", None)
    ms = m.cycle_ms()
    backends = f"target {target.execution.label}" + (f", draft {draft.label}" if draft else "")
    line = (
        f"[{method}, {backends}] {m.new_tokens} tokens, {m.tokens_per_second:.1f} tok/s, tau={m.tau:.2f}, "
        f"per cycle: draft {ms['draft']:.1f} / target {ms['target']:.1f} / verify {ms['verify']:.1f} ms, "
        f"speedup={speedup:.2f}x vs vanilla ({base.metrics.tokens_per_second:.1f} tok/s), "
        f"{vs_hf:.2f}x vs HF generate ({reference.metrics.tokens_per_second:.1f} tok/s, stock model); same run, "
        f"{torch.get_num_threads()} threads, {dtype}, T={temperature}"
    )
    if sampling.greedy:
        line += f", identical to vanilla greedy: {'yes' if result.tokens == base.tokens else 'NO'}"
    print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=method_names(), default=None, help="default: best available")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--weights", choices=("auto", "stock", "packed"), default="auto", help="target weights (specdec.backends)"
    )
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="the target's dtype")
    args = parser.parse_args(argv)
    method = args.method or default_method()
    if method == "vanilla":
        parser.error("the demo compares a speculative method against vanilla; pick another method")
    return run(method, args.prompt, args.max_new_tokens, args.temperature, args.seed, args.weights, args.dtype)


if __name__ == "__main__":
    sys.exit(main())

"""Data generation on eager shapes against its steps on the batch package, in one process: the same ShareGPT first
turns through :func:`specdec.train.regenerate.regenerate` (continuous batching, 32 rows, greedy shards), each side
into a fresh folder, the sides' order alternating each round; seconds per round and the responses compared.

    python docs/results/2026-12-02-batch-package-intel-f6m207/regen_ab.py [--rounds 2] [--prompts 64]

The eager side's model is prepared as ``specdec data regenerate`` prepares it (``apply``, ``weights="auto"``); the
package side's steps run on the package of a target built from the same model (``static_shapes="aot"``).
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch

from specdec.backends import apply
from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.train.regenerate import RegenerateConfig, regenerate
from specdec.train.shards import response_sequences


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tokenizer = load_smollm2()
    config = RegenerateConfig(max_new_tokens=args.new_tokens, temperatures=(0.0,), shard_size=args.prompts)
    target = HFTarget(model, max_len=config.cache_slots, static_shapes="aot")
    package = target.runner._run
    apply(model, "auto", static_shapes=False, invariant=False)
    sides = {"eager": None, "package": package}
    warm = RegenerateConfig(max_new_tokens=8, shard_size=8)  # kernels, the packages (built where missing)
    for side in sides.values():
        regenerate(model, tokenizer, tempfile.mkdtemp(), 8, warm, progress=False, package=side)
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    responses = {}
    for i in range(args.rounds):
        for name in list(sides)[:: 1 if i % 2 else -1]:
            out = Path(tempfile.mkdtemp())
            start = time.perf_counter()
            regenerate(model, tokenizer, out, args.prompts, config, progress=False, package=sides[name])
            seconds[name].append(time.perf_counter() - start)
            responses[name] = response_sequences(out, (0.0,))[0]
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in seconds.items()), flush=True)
    tokens = sum(len(r) for r in responses["eager"])
    same = sum(a == b for a, b in zip(responses["eager"], responses["package"], strict=True))
    e, p = min(seconds["eager"]), min(seconds["package"])
    print(f"{args.prompts} prompts, {tokens} response tokens (eager side), greedy, 32 rows")
    print(f"best of {args.rounds}: eager {e:.1f} s, package {p:.1f} s: the package {e / p:.2f}x as fast")
    print(f"responses equal on both sides: {same}/{len(responses['eager'])}")


if __name__ == "__main__":
    main()

"""The package's cache sized to the generation against the whole capacity, side by side in one process (issue 45).

    .venv/bin/python docs/results/2026-11-30-package-room-amd-f25m17/room.py [--max-len 2048] [--prompts 4]
        [--new-tokens 64] [--methods vanilla eagle3] [--rounds 2]

Two targets over one prepared SmolLM2 on this machine's cached package (``static_shapes="aot"``), both with a cache
of ``--max-len``: "sized" as the runner now runs it (each prompt's length plus 256 slots, grown as needed:
``ModelRunner._fit``), "whole" with ``runner.room = 0`` (every forward reads the whole capacity, as before). Per method,
each target's generator is warmed up, then every round runs each MT-bench prompt on both, the order alternating;
prints tokens/s, sized/whole and whether the greedy tokens agree.
"""

import argparse
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.warm import warm_up

parser = argparse.ArgumentParser()
parser.add_argument("--max-len", type=int, default=2048)
parser.add_argument("--prompts", type=int, default=4)
parser.add_argument("--new-tokens", type=int, default=64)
parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3"])
parser.add_argument("--rounds", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(2)
greedy, stop = SamplingParams(temperature=0.0), StopCondition(max_new_tokens=args.new_tokens)
model, tokenizer = load_smollm2()
sized = HFTarget(model, max_len=args.max_len, static_shapes="aot")
whole = sized.sibling(args.max_len)
whole.runner.room = 0
targets = {"sized": sized, "whole": whole}
print(sized.execution.describe(), f"room {sized.runner.room} / {whole.runner.room}", flush=True)
ids = [chat_ids(tokenizer, p) for p in mtbench_prompts()[: args.prompts]]
print("prompt tokens:", [int(x.shape[0]) for x in ids], flush=True)
for method in args.methods:
    gens = {name: build_method(method, t, MethodOptions()) for name, t in targets.items()}
    for gen in gens.values():
        warm_up(gen, greedy)
        gen.generate(ids[0], greedy, StopCondition(max_new_tokens=16))
    seconds, tokens, emitted = dict.fromkeys(gens, 0.0), dict.fromkeys(gens, 0), {name: [] for name in gens}
    for r in range(args.rounds):
        for i, x in enumerate(ids):
            for name in list(gens)[:: 1 if (r + i) % 2 == 0 else -1]:
                start = time.perf_counter()
                result = gens[name].generate(x, greedy, stop)
                seconds[name] += time.perf_counter() - start
                tokens[name] += len(result.tokens)
                emitted[name].append(result.tokens)
    rate = {name: tokens[name] / seconds[name] for name in gens}
    same = sum(a == b for a, b in zip(emitted["sized"], emitted["whole"], strict=True))
    print(
        f"{method:8s} sized {rate['sized']:6.1f} tok/s  whole {rate['whole']:6.1f} tok/s  "
        f"sized/whole {rate['sized'] / rate['whole']:.3f}  same tokens {same}/{len(emitted['sized'])}",
        flush=True,
    )

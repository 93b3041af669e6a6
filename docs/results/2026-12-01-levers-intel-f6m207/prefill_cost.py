"""A prompt's prefill on SmolLM2's package against a 1-token step, one process (issue 45).

    python docs/results/2026-12-01-levers-intel-f6m207/prefill_cost.py   # prefill_cost.txt

``HFTarget.prefill`` (eager over the static cache, the last row's logits only, every linear's rows 16 at a time on
its kernel) for prompts of 100, 300 and 500 tokens, then one 1-token step after each; medians of 5.
"""

import statistics
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_smollm2()
    target = HFTarget(model, static_shapes="aot", max_len=2048)
    target.warm_up()
    ids = torch.arange(600) % 1000 + 100
    for length in (100, 300, 500):
        prefill, step = [], []
        for _ in range(5):
            start = time.perf_counter()
            target.prefill(ids[:length])
            prefill.append(time.perf_counter() - start)
            start = time.perf_counter()
            target.runner.forward(ids[length : length + 1], torch.arange(length, length + 1), length)
            step.append(time.perf_counter() - start)
        p, s = statistics.median(prefill) * 1e3, statistics.median(step) * 1e3
        print(f"prompt {length}: prefill {p:.0f} ms, 1-token step {s:.1f} ms: ", end="")
        print(f"{p / s:.1f} steps, {p / length:.2f} ms a token", flush=True)


if __name__ == "__main__":
    main()

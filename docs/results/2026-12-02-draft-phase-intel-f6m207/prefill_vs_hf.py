"""A prompt's prefill on SmolLM2's package against HF's own forward of the same prompt, one process (issue 45).

    python docs/results/2026-12-02-draft-phase-intel-f6m207/prefill_vs_hf.py   # prefill_vs_hf.txt

``HFTarget.prefill`` (eager over the package's static cache, every linear's rows 16 at a time on its measured kernel,
the last row's logits only) against the stock model's forward (``use_cache=True, logits_to_keep=1``: MKL's float32
GEMMs on the de-quantised weights), prompts of 100, 300 and 500 tokens, interleaved, medians of 5.
"""

import statistics
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_smollm2()
    stock, _ = load_smollm2()
    target = HFTarget(model, static_shapes="aot", max_len=2048)
    target.warm_up()
    ids = torch.arange(600) % 1000 + 100
    for length in (100, 300, 500):
        own, hf = [], []
        for _ in range(5):
            start = time.perf_counter()
            target.prefill(ids[:length])
            own.append(time.perf_counter() - start)
            with torch.inference_mode():
                start = time.perf_counter()
                stock(ids[None, :length], use_cache=True, logits_to_keep=1)
                hf.append(time.perf_counter() - start)
        o, h = statistics.median(own) * 1e3, statistics.median(hf) * 1e3
        print(f"prompt {length}: own prefill {o:.0f} ms, HF forward {h:.0f} ms, own / HF {o / h:.2f}", flush=True)


if __name__ == "__main__":
    main()

"""Experiment: torch.profiler op tables of our 1-token step and transformers' own, 5 steps each, one process."""

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import DynamicCache

from specdec.models import load_smollm2
from specdec.target import HFTarget

torch.set_num_threads(2)
model, _ = load_smollm2()
model.eval()
fast = HFTarget(model, 512, weights="auto")
ctx = 120
prompt = torch.randint(0, 49152, (ctx,), generator=torch.Generator().manual_seed(0))
fast.prefill(prompt)
hf = DynamicCache(config=model.config)
tok = torch.tensor([[5]])
with torch.no_grad():
    model(input_ids=prompt[None], use_cache=True, past_key_values=hf)
    for _ in range(3):
        fast.decode_one(torch.tensor(5))
        fast.length = ctx
        model(input_ids=tok, use_cache=True, past_key_values=hf)
        hf.crop(-1)
    for name, fn in [
        ("ours", lambda: (fast.decode_one(torch.tensor(5)), setattr(fast, "length", ctx))),
        ("hf", lambda: (model(input_ids=tok, use_cache=True, past_key_values=hf), hf.crop(-1))),
    ]:
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(5):
                fn()
        ka = p.key_averages()
        tot = sum(e.count for e in ka) / 5
        print(f"== {name}: ops per step {tot:.0f}")
        print(ka.table(sort_by="self_cpu_time_total", row_limit=25))

"""One row stock, the rest packed, A/B in one process: the eager fast path with and without it, and HF's own step.

    python docs/results/2026-11-29-intel-f6m106/one_row_stock.py

SmolLM2 (float32, 2 threads) under ``weights="auto"``; the same model toggled between the two forms
(:func:`specdec.backends.measured.stock_single_rows`) round by round: the 1-token step after a 120-token prompt and a
tree forward of 8 rows (median of 31 rounds), HF's 1-token step (stock model, DynamicCache) in the same rounds; then
vanilla decoding of 4 MT-bench prompts x 64 tokens per form, alternating prompt by prompt, tokens compared.
"""

import copy
import statistics
import time

import torch
from transformers import DynamicCache

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends.measured import stock_single_rows
from specdec.generate import StopCondition, VanillaGenerator
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
model, tokenizer = load_smollm2()
stock = copy.deepcopy(model).eval()
fast = HFTarget(model, max_len=512, static_shapes=False)
print(fast.execution.describe())
FORMS = {"one row stock": True, "all rows packed": False}
context = 120
prompt = torch.randint(0, fast.vocab_size, (context,), generator=torch.Generator().manual_seed(1))
fast.prefill(prompt)
cache = DynamicCache(config=stock.config)
with torch.no_grad():
    stock(input_ids=prompt[None], use_cache=True, past_key_values=cache)
tree = DraftTree.from_parents(torch.arange(8) + 200, torch.arange(8) - 1, 8)
times: dict[str, list[float]] = {k: [] for k in (*FORMS, *(f"{f}, 8 rows" for f in FORMS), "HF")}
for round_ in range(32):
    for form, on in FORMS.items():
        stock_single_rows(fast.model, on)
        t0 = time.perf_counter()
        fast.decode_one(torch.tensor(5))
        t1 = time.perf_counter()
        fast.length = context
        fast.forward_tree(tree)
        t2 = time.perf_counter()
        fast.length = context
        if round_:
            times[form].append(t1 - t0)
            times[f"{form}, 8 rows"].append(t2 - t1)
    t0 = time.perf_counter()
    with torch.no_grad():
        stock(input_ids=torch.tensor([[5]]), use_cache=True, past_key_values=cache)
    cache.crop(-1)
    if round_:
        times["HF"].append(time.perf_counter() - t0)
ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
for k, v in ms.items():
    print(f"{k:>26s}: {v:6.1f} ms" + (f"  ({v / ms['HF']:.2f}x HF's 1-token step)" if ", 8 rows" not in k else ""))
print(f"one row stock / all rows packed, 1-token step: {ms['one row stock'] / ms['all rows packed']:.2f}")
speed: dict[str, list[float]] = {form: [] for form in FORMS}
tokens: dict[str, list[list[int]]] = {form: [] for form in FORMS}
for i, question in enumerate(mtbench_prompts()[:4]):
    ids = chat_ids(tokenizer, question)
    for form in FORMS if i % 2 == 0 else reversed(FORMS):
        stock_single_rows(fast.model, FORMS[form])
        t0 = time.perf_counter()
        out = VanillaGenerator(fast).generate(ids, SamplingParams(), StopCondition(max_new_tokens=64)).tokens
        speed[form].append(len(out) / (time.perf_counter() - t0))
        tokens[form].append(out)
rate = {form: statistics.fmean(v) for form, v in speed.items()}
print("vanilla tok/s: " + ", ".join(f"{f} {r:.1f}" for f, r in rate.items()))
same = tokens["one row stock"] == tokens["all rows packed"]
print(f"ratio {rate['one row stock'] / rate['all rows packed']:.2f}; same tokens: {same}")
linears, kept = stock_single_rows(fast.model, True)
print(f"{linears} packed linears run one row stock, keeping {kept / 2**20:.0f} MB of plain weights")

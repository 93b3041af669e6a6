"""MKL tree rows against oneDNN tree rows, A/B in one process: the eager fast path's forwards of 1-16 rows.

    git checkout 150ff41  # MKL tree rows existed there only (taken out in the next commit)
    python docs/results/2026-11-29-mkl-rows-intel-f6m106/mkl_rows.py

SmolLM2 (float32, 2 threads) under ``weights="auto"`` on this CPU's measured table; the same model toggled between
the two forms round by round (:func:`specdec.backends.measured.mkl_tree_rows`, and for the oneDNN form
:func:`~specdec.backends.measured.stock_single_rows`, so that both run a single row stock): the 1-token step after a
120-token prompt and chain-shaped tree forwards of 2-16 rows (median of 21 rounds), HF's 1-token step (stock model,
DynamicCache) in the same rounds; each form's logits for the 8-row tree compared with the other's (the grouping of
float32 sums differs, the argmax should not).
"""

import copy
import re
import statistics
import time

import torch
from transformers import DynamicCache

from specdec.backends.cpu import machine_summary
from specdec.backends.measured import mkl_tree_rows, stock_single_rows
from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
print(machine_summary())
model, tokenizer = load_smollm2()
stock = copy.deepcopy(model).eval()
fast = HFTarget(model, max_len=512, static_shapes=False)
print(fast.execution.describe())


def rss_mb() -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) // 1024


def form(mkl: bool) -> tuple[int, int]:
    linears, held = mkl_tree_rows(fast.model, mkl)
    stock_single_rows(fast.model, True)  # the oneDNN form's single rows stock too (the MKL form's already are)
    return linears, held


FORMS = {"MKL tree rows": True, "oneDNN tree rows": False}
SIZES = (1, 2, 4, 6, 8, 12, 16)
context = 120
prompt = torch.randint(0, fast.vocab_size, (context,), generator=torch.Generator().manual_seed(1))
fast.prefill(prompt)
cache = DynamicCache(config=stock.config)
with torch.no_grad():
    stock(input_ids=prompt[None], use_cache=True, past_key_values=cache)
trees = {n: DraftTree.from_parents(torch.arange(n) + 200, torch.arange(n) - 1, n) for n in SIZES if n > 1}
times: dict[tuple[str, int] | str, list[float]] = {(f, n): [] for f in FORMS for n in SIZES}
times["HF"] = []
logits = {}
for round_ in range(22):
    for name, on in FORMS.items() if round_ % 2 == 0 else reversed(FORMS.items()):
        form(on)
        for n in SIZES:
            t0 = time.perf_counter()
            out = fast.decode_one(torch.tensor(5)) if n == 1 else fast.forward_tree(trees[n])
            elapsed = time.perf_counter() - t0
            fast.length = context
            if round_:
                times[(name, n)].append(elapsed)
            if n == 8:
                logits[name] = out.logits
    t0 = time.perf_counter()
    with torch.no_grad():
        stock(input_ids=torch.tensor([[5]]), use_cache=True, past_key_values=cache)
    cache.crop(-1)
    if round_:
        times["HF"].append(time.perf_counter() - t0)
ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
print(f"HF's 1-token step: {ms['HF']:.1f} ms")
print(f"{'rows':>5s}  " + "  ".join(f"{f:>18s}" for f in FORMS) + "  MKL / oneDNN")
for n in SIZES:
    a, b = (ms[(f, n)] for f in FORMS)
    print(f"{n:5d}  {a:15.1f} ms  {b:15.1f} ms  {a / b:12.2f}")
for f in FORMS:
    one = ms[(f, 1)]
    print(
        f"{f}: 1-token step {one / ms['HF']:.2f}x HF's; T(n)/T(1) "
        + ", ".join(f"{n}: {ms[(f, n)] / one:.2f}" for n in SIZES[1:])
    )
a, b = (logits[f] for f in FORMS)
print(
    f"8-row tree logits, MKL against oneDNN: max |diff| {(a - b).abs().max().item():.2e}, "
    f"argmax equal on {(a.argmax(-1) == b.argmax(-1)).sum().item()}/{a.shape[0]} rows"
)
for name, on in FORMS.items():
    linears, held = form(on)
    print(f"{name}: {linears} linears on MKL's packs ({held / 2**20:.0f} MB of packs); VmRSS {rss_mb()} MB")

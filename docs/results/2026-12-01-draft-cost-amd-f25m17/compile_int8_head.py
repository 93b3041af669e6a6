import copy
import statistics
import time

import torch
import torch._dynamo
from torch import nn

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import load_prompts
from specdec.attention import additive_mask
from specdec.backends.kernels import Int8Linear
from specdec.backends.skinny import W8Linear
from specdec.drafters.eagle_steps import ScoredStep
from specdec.models import load_smollm2
from specdec.pace import Fixed

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, weights="auto", static_shapes="aot", in_place=True)
gen = build_method("eagle3", target)
d = gen.drafter
print(type(d.head.midlayer.mlp) if hasattr(d.head, "midlayer") else d.head)
captured = []
orig = d._step


def rec(compiled, tokens, hidden, positions, mask, cache, rows):
    if not captured and tokens.shape[0] == 1:
        captured.append((tokens.clone(), hidden.clone(), positions.clone(), mask.clone(), cache, rows))
    return orig(compiled, tokens, hidden, positions, mask, cache, rows)


d._step = rec
ids = chat_ids(tok, load_prompts("mtbench")[0])
gen.generate(ids, SamplingParams(temperature=1.0, seed=0), StopCondition(max_new_tokens=16), speculate=Fixed(2))
d._step = orig
tokens, hidden, positions, mask, cache, rows = captured[0]

args = (d.head.embed(tokens)[None], hidden[None], positions[None], additive_mask(mask, d._dtype))
scored = ScoredStep(d.head, d._score)
eager = lambda: scored(*args, rows, cache)
t0 = time.perf_counter()
comp = torch.compile(scored, fullgraph=False, dynamic=False)
try:
    with torch.no_grad():
        out_c = comp(*args, rows, cache)
    print("compiled in", time.perf_counter() - t0, "s")
except Exception as e:
    print("compile failed:", type(e).__name__, str(e)[:500])
    comp = None
with torch.no_grad():
    out_e = eager()
    if comp is not None:
        print("max diff", (out_c[1] - out_e[1]).abs().max().item())
big = torch.randn(150_000_000)


def bench(f, flush):
    ts = []
    with torch.no_grad():
        for _ in range(30):
            if flush:
                big.sum()
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def report(runs: dict) -> None:
    """Each callable's median ms per call, without and with a cache flush before each call."""
    for flush in (False, True):
        print("flush", flush, "  ".join(f"{name} ms {bench(f, flush):.3f}" for name, f in runs.items()))


report({"eager": eager} | ({"compiled": lambda: comp(*args, rows, cache)} if comp is not None else {}))


head8 = copy.deepcopy(d.head)
for parent in list(head8.modules()):
    for name, child in list(parent.named_children()):
        if isinstance(child, Int8Linear):
            lin = nn.Linear(child.in_features, child.out_features, bias=False)
            with torch.no_grad():
                lin.weight.copy_(child.weight)
            setattr(parent, name, W8Linear(lin, keep_weight=False))
print(head8)
torch._dynamo.reset()


class HeadOnly(nn.Module):
    def __init__(s, h):
        super().__init__()
        s.h = h

    def forward(s, a, b, c, e, rows, cache):
        out, _ = s.h(a, b, c, e, cache=cache)
        return out[0] if rows is None else out[0].index_select(0, rows)


ho = torch.compile(HeadOnly(head8), fullgraph=True, dynamic=False)
t0 = time.perf_counter()
with torch.no_grad():
    o = ho(*args, rows, cache)
print("w8 head compiled in", time.perf_counter() - t0)


def w8c():
    o = ho(*args, rows, cache)
    return d._score(o).float()


def w8e():
    out, _ = head8(*args, cache=cache)
    o = out[0] if rows is None else out[0].index_select(0, rows)
    return d._score(o).float()


with torch.no_grad():
    print("w8 compiled vs int8 eager logits max diff", (w8c() - out_e[1]).abs().max().item())
report({"int8 eager": eager, "w8 eager": w8e, "w8 compiled head + int8 scorer": w8c})
print(torch._dynamo.utils.counters["graph_break"])

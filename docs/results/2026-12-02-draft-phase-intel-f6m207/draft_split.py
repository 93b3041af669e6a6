"""Where an EAGLE-3 cycle's draft phase goes on SmolLM2's package, one process (issues 45 and 47).

    python docs/results/2026-12-02-draft-phase-intel-f6m207/draft_split.py   # draft_split.txt
    T=1 SIZE=4 python ...                                                     # another temperature or tree size

One Spec-Bench prompt, 96 new tokens, a fixed tree of ``SIZE`` nodes every cycle (``Fixed``), under the torch
profiler: the draft phase (``specdec.cycle.draft``) split into the head's forwards (``EagleDrafterBase._step``), the
tree's contract checks (``tree_checks.tree_faults``) and the rest (the policy's bookkeeping and the Python between
ops); the ATen ops of each, per cycle. Profiled times run above the unprofiled ones (``arm_costs_t0.txt``).
"""

import collections
import os

import torch
from torch.profiler import ProfilerActivity, profile

import specdec.cycle as cyc
from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import load_prompts, select_prompts
from specdec.drafters.eagle import EagleDrafterBase
from specdec.methods import MethodOptions
from specdec.models import load_smollm2
from specdec.pace import Fixed

PARTS = ("DRAFT", "HEADSTEP", "FAULTS")


def labelled(obj, name: str, label: str) -> None:
    """Wrap ``obj.name`` in a profiler range named ``label``."""
    original = getattr(obj, name)

    def wrapper(*args, **kwargs):
        with torch.profiler.record_function(label):
            return original(*args, **kwargs)

    setattr(obj, name, wrapper)


def inside(event, label: str) -> bool:
    """Whether ``event`` is a top-level op of the range ``label`` (its nearest labelled ancestor)."""
    parent = event.cpu_parent
    while parent is not None and parent.name not in PARTS:
        if parent.name.startswith(("aten::", "quantized::", "specdec::")):
            return False  # an op inside another op
        parent = parent.cpu_parent
    return parent is not None and parent.name == label


def main() -> None:
    torch.set_num_threads(2)
    model, tok = load_smollm2()
    target = HFTarget(model, max_len=2048, weights="auto", static_shapes="aot", in_place=True)
    gen = build_method("eagle3", target, MethodOptions(sampled_tree="r3d", draft_temperature_ratio=0.7))
    ids = chat_ids(tok, select_prompts(load_prompts("spec-bench"), 1)[0])
    sampling = SamplingParams(temperature=float(os.environ.get("T", "0")))
    size = int(os.environ.get("SIZE", "2"))
    gen.generate(ids, sampling.model_copy(update={"seed": 0}), StopCondition(max_new_tokens=16), speculate=Fixed(size))
    labelled(cyc, "draft", "DRAFT")
    labelled(EagleDrafterBase, "_step", "HEADSTEP")
    labelled(cyc.tree_checks, "tree_faults", "FAULTS")
    stop = StopCondition(max_new_tokens=96, eos_token_ids=())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = gen.generate(ids, sampling.model_copy(update={"seed": 1}), stop, speculate=Fixed(size))
    n = out.metrics.cycles
    totals = collections.Counter(e.name for e in prof.events() if e.name in PARTS)
    times = collections.Counter()
    for e in prof.events():
        if e.name in PARTS:
            times[e.name] += e.cpu_time_total
    print(f"T = {sampling.temperature}, trees of {size} nodes: {n} cycles, {len(out.tokens) / n:.3f} tokens a cycle")
    print(
        "per cycle, us (profiled): " + ", ".join(f"{k} {times[k] / n:.0f} ({totals[k] / n:.1f} calls)" for k in PARTS)
    )
    for label in PARTS:
        ops, spent = collections.Counter(), collections.Counter()
        for e in prof.events():
            if e.name not in PARTS and inside(e, label):
                ops[e.name] += 1
                spent[e.name] += e.cpu_time_total
        print(f"{label}: {sum(ops.values()) / n:.0f} top-level ops a cycle, {sum(spent.values()) / n:.0f} us in them")
        for name, t in spent.most_common(8):
            print(f"  {name:40s} {ops[name] / n:5.1f} a cycle {t / n:7.1f} us")


if __name__ == "__main__":
    main()

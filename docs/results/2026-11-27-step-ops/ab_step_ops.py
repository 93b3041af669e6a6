"""The 2026-11-27 'fewer ops per target step' changes, before and after, side by side in one process.

    python docs/results/2026-11-27-step-ops/ab_step_ops.py [--dtype float32|bfloat16] [--reps 40] [--context 120]
                                                           [--sides before,after]

Targets of SmolLM2-135M-Instruct on the fast path (``weights="auto"``) in one process:

* ``after``: the code as committed;
* ``unstacked``: the same with the projections unstacked (``unstack_projections``, then packed one by one): the code
  of commit e92cabb;
* ``before``: also the norms put back (``unfuse_norms``), and the previous ``PackedLinear.forward`` and
  ``PositionLayer.update`` (copied below from commit 4b093af) swapped in around each of its forwards: the code of
  4b093af.

Each repetition times one forward of each side in turn (1-token step, then chains of 1, 8 and 16 tree nodes);
printed are the medians, each side's ratio to ``before`` and the median of the per-repetition ratios, and whether
its logits are bitwise equal to ``before``'s.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specdec import kvcache
from specdec.backends import kernels
from specdec.backends.cpu import cpu_name
from specdec.backends.kernels import pack_linears
from specdec.backends.norms import unfuse_norms
from specdec.backends.stacking import unstack_projections
from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree


def old_forward(self, x: torch.Tensor) -> torch.Tensor:  # PackedLinear.forward at 4b093af
    rows = x.reshape(-1, self.in_features)
    if rows.dtype != self.dtype or rows.device.type != "cpu":
        raise TypeError(f"this PackedLinear runs {self.dtype} CPU inputs, got {rows.dtype} on {rows.device}")
    n = rows.shape[0]
    if self.pad_single_row and n == 1:
        rows = rows.expand(2, -1)
    y = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")[:n]
    return y.reshape(*x.shape[:-1], self.out_features)


def old_update(self, key_states, value_states, *args, **kwargs):  # PositionLayer.update at 4b093af
    if not self.is_initialized:
        self.lazy_initialization(key_states, value_states)
    start, end = self.write_pos, self.write_pos + key_states.shape[-2]
    if end > self.max_len:
        raise kvcache.CacheFullError(f"cache of {self.max_len} positions cannot hold position {end - 1}")
    self.keys[:, :, start:end] = key_states
    self.values[:, :, start:end] = value_states
    return self.keys[:, :, :end], self.values[:, :, :end]


NEW = (kernels.PackedLinear.forward, kvcache.PositionLayer.update)


def use(before: bool) -> None:
    kernels.PackedLinear.forward, kvcache.PositionLayer.update = (old_forward, old_update) if before else NEW


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--context", type=int, default=120)
    ap.add_argument("--sides", default="before,unstacked,after")
    args = ap.parse_args()
    torch.set_num_threads(2)
    dtype = getattr(torch, args.dtype)
    sides = {}
    for name in args.sides.split(","):
        model, _ = load_smollm2(dtype=dtype)
        sides[name] = HFTarget(model, max_len=args.context + 64, weights="auto", in_place=True)
        if name != "after":
            unstack_projections(sides[name].model)
            pack_linears(sides[name].model)
        if name == "before":
            unfuse_norms(sides[name].model)
    print(f"cpu={cpu_name()} threads=2 dtype={args.dtype}: {sides['after'].execution.describe()}")
    g = torch.Generator().manual_seed(0)
    vocab = sides["after"].vocab_size
    prompt = torch.randint(0, vocab, (args.context,), generator=g)
    token = torch.tensor(5)
    forwards = {"step": lambda t: t.decode_one(token)}
    for n in (1, 8, 16):
        tree = DraftTree.from_parents(torch.randint(0, vocab, (n,), generator=g), torch.arange(-1, n - 1), n - 1)
        forwards[f"T({n})"] = lambda t, tree=tree: t.forward_tree(tree)
    times = {k: {s: [] for s in sides} for k in forwards}
    equal = {k: True for k in forwards}
    with torch.no_grad():
        for name, t in sides.items():
            use(name == "before")
            t.prefill(prompt)
        for rep in range(args.reps + 3):
            for k, run in forwards.items():
                logits = {}
                for name, t in sides.items():
                    use(name == "before")
                    t0 = time.perf_counter()
                    logits[name] = run(t).logits
                    if rep >= 3:
                        times[k][name].append(time.perf_counter() - t0)
                    t.length = args.context
                equal[k] &= all(torch.equal(logits["before"], x) for x in logits.values())
    use(False)
    for k, by_side in times.items():
        base = statistics.median(by_side["before"])
        row = [f"before {base * 1e3:.2f} ms"]
        for s in sides:
            if s != "before":
                paired = statistics.median(x / y for x, y in zip(by_side[s], by_side["before"], strict=True))
                ms = statistics.median(by_side[s])
                row.append(f"{s} {ms * 1e3:.2f} ms = {ms / base:.3f}x (paired {paired:.3f})")
        print(f"{k:>6}: " + ", ".join(row) + f"; logits bitwise equal: {equal[k]}")
    for s in sides:
        m = {k: statistics.median(times[k][s]) for k in times}
        print(f"{s}: T(8)/T(1) {m['T(8)'] / m['T(1)']:.2f}, T(16)/T(1) {m['T(16)'] / m['T(1)']:.2f}")


if __name__ == "__main__":
    main()

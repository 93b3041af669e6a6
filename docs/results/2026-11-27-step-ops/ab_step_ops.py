"""The 2026-11-27 'fewer ops per target step' change, before and after, side by side in one process.

    python docs/results/2026-11-27-step-ops/ab_step_ops.py [--dtype float32|bfloat16] [--reps 40] [--context 120]

Two targets of SmolLM2-135M-Instruct on the fast path (``weights="auto"``) in one process: ``after`` is the code as
committed; ``before`` is the same target with the three changes undone for its own calls: the norms put back
(``unfuse_norms``), and the previous ``PackedLinear.forward`` and ``PositionLayer.update`` (copied below from the
parent commit, 4b093af) swapped in around each of its forwards. Each repetition times one forward of each side in
turn (1-token step, then chains of 1, 8 and 16 tree nodes); printed are the medians, the ratio after / before and the
median of the per-repetition ratios, and whether the two sides' logits are bitwise equal.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specdec import kvcache
from specdec.backends import kernels
from specdec.backends.kernels import cpu_name
from specdec.backends.norms import unfuse_norms
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
    args = ap.parse_args()
    torch.set_num_threads(2)
    dtype = getattr(torch, args.dtype)
    sides = {}
    for name in ("before", "after"):
        model, _ = load_smollm2(dtype=dtype)
        sides[name] = HFTarget(model, max_len=args.context + 64, weights="auto", in_place=True)
    unfuse_norms(sides["before"].model)
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
                equal[k] &= torch.equal(logits["before"], logits["after"])
    use(False)
    for k, by_side in times.items():
        b, a = (statistics.median(by_side[s]) * 1e3 for s in ("before", "after"))
        paired = statistics.median(x / y for x, y in zip(by_side["after"], by_side["before"], strict=True))
        print(
            f"{k:>6}: before {b:.2f} ms, after {a:.2f} ms, after/before {a / b:.3f} (paired {paired:.3f}); "
            f"logits bitwise equal: {equal[k]}"
        )
    for s in sides:
        m = {k: statistics.median(times[k][s]) for k in times}
        print(f"{s}: T(8)/T(1) {m['T(8)'] / m['T(1)']:.2f}, T(16)/T(1) {m['T(16)'] / m['T(1)']:.2f}")


if __name__ == "__main__":
    main()

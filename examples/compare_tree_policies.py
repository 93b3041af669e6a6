"""Swap tree policies under one drafter and compare τ, speed and tree size; writes a plot and a JSON table.

    python examples/compare_tree_policies.py --out /tmp/trees                   # tiny random Llama, seconds
    python examples/compare_tree_policies.py --model smollm2 --head runs/e3/head --out /tmp/trees   # a trained head

Policies: a chain (classic speculative decoding), the EAGLE-1 static tree, and EAGLE-2 dynamic trees of
several sizes. Everything else (target, drafter, verifier, prompts, sampling) is fixed, so the differences
come from the tree shape alone. The drafter is the target's first layers, or an EAGLE head with ``--head DIR``.
Tutorial: docs/tutorials/tree_policies.md
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from specdec import SamplingParams
from specdec.drafters import SmallLMDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy, StaticTreePolicy

CHAT_PROMPTS = [
    "Explain in three sentences why the sky is blue.",
    "Write a short poem about the sea.",
    "List three uses of a paperclip.",
]


def load(model_name: str):
    """``(model, prompts [list of [L] ids], eos ids, max_len, draft layers)``."""
    if model_name == "tiny":
        model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2, logit_scale=4.0)
        g = torch.Generator().manual_seed(0)
        return model, [torch.randint(0, 32, (8,), generator=g) for _ in range(3)], [], 512, 2
    from specdec.assets import chat_ids
    from specdec.models import load_smollm2

    model, tokenizer = load_smollm2()
    return model, [chat_ids(tokenizer, p) for p in CHAT_PROMPTS], [tokenizer.eos_token_id], 2048, 6


def make_drafter(model, head_dir: Path | None, draft_layers: int, max_len: int):
    """An EAGLE head from ``head_dir`` (EAGLE-1 / HASS / EAGLE-3 format), else the target's first layers."""
    if head_dir is None:
        return SmallLMDrafter.from_target_layers(model, draft_layers, max_len=max_len)
    from specdec.checkpoints import load_eagle_head
    from specdec.drafters import Eagle3Drafter, EagleDrafter

    head = load_eagle_head(head_dir, target_model=model)
    return (Eagle3Drafter if head.kind == "eagle3" else EagleDrafter)(head, model, max_len=max_len)


def policies(sizes: list[int], topk: int, depth: int) -> dict[str, object]:
    out: dict[str, object] = {
        "chain-4": StaticTreePolicy.chain(4),
        "eagle1-static": StaticTreePolicy.eagle1_default(),
    }
    for m in sizes:
        out[f"dynamic-{m}"] = DynamicTreePolicy(topk=topk, depth=depth, total_tokens=m)
    return out


def run(generator, prompts, sampling, stop) -> dict[str, float]:
    """Totals over the prompts: tokens/s over all tokens, τ over all cycles."""
    tokens, seconds, accepted, sizes, outputs = 0, 0.0, [], [], []
    for ids in prompts:
        result = generator.generate(ids, sampling, stop)
        m = result.metrics
        tokens, seconds = tokens + m.new_tokens, seconds + m.time_total
        accepted += m.accept_lengths
        sizes += m.tree_sizes
        outputs.append(result.tokens)
    return {
        "tau": sum(a + 1 for a in accepted) / max(1, len(accepted)),
        "tokens_per_s": tokens / seconds,
        "nodes": sum(sizes) / max(1, len(sizes)),
        "outputs": outputs,
    }


def plot(rows: dict[str, dict], baseline_tps: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_tau, ax_speed) = plt.subplots(1, 2, figsize=(10, 4))
    dynamic = sorted((r["nodes"], r) for name, r in rows.items() if name.startswith("dynamic"))
    for ax, key, label in (
        (ax_tau, "tau", "τ (tokens per target forward)"),
        (ax_speed, "speedup", "speedup vs vanilla"),
    ):
        ax.plot([n for n, _ in dynamic], [r[key] for _, r in dynamic], "o-", label="dynamic (EAGLE-2)")
        for name, r in rows.items():
            if not name.startswith("dynamic"):
                ax.plot(r["nodes"], r[key], "s", label=name)
        ax.set_xlabel("tree size (nodes verified per cycle, root included)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    ax_speed.axhline(1.0, color="grey", lw=0.8)
    ax_tau.legend()
    fig.suptitle(f"Tree policies, same drafter and verifier (vanilla: {baseline_tps:.1f} tok/s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a new temp folder)")
    parser.add_argument("--head", type=Path, default=None, help="an EAGLE head folder as the drafter")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32], help="dynamic tree sizes")
    parser.add_argument("--topk", type=int, default=4)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="specdec-trees-"))
    out.mkdir(parents=True, exist_ok=True)

    model, prompts, eos, max_len, draft_layers = load(args.model)
    target = HFTarget(model, max_len=max_len)
    drafter = make_drafter(model, args.head, draft_layers, max_len)
    print(f"drafter: {type(drafter).__name__}")
    sampling = SamplingParams(temperature=args.temperature, seed=0)
    stop = StopCondition(max_new_tokens=args.max_new_tokens, eos_token_ids=eos)

    vanilla = run(VanillaGenerator(target), prompts, sampling, stop)
    rows: dict[str, dict] = {}
    print(f"{'policy':<15} {'nodes':>6} {'tau':>6} {'tok/s':>8} {'speedup':>8}  same as vanilla")
    for name, policy in policies(args.sizes, args.topk, args.depth).items():
        # The verifier follows each call's sampling and the policy's kind of tree (top-k candidates: q one-hot).
        r = run(SpeculativeGenerator(target, drafter, policy), prompts, sampling, stop)
        r["speedup"] = r["tokens_per_s"] / vanilla["tokens_per_s"]
        same = r.pop("outputs") == vanilla["outputs"] if sampling.greedy else None
        rows[name] = r
        print(
            f"{name:<15} {r['nodes']:>6.1f} {r['tau']:>6.2f} {r['tokens_per_s']:>8.1f} {r['speedup']:>7.2f}x  "
            f"{'n/a (T > 0)' if same is None else 'yes' if same else 'NO'}"
        )

    table = {"model": args.model, "temperature": args.temperature, "vanilla_tokens_per_s": vanilla["tokens_per_s"]}
    table["policies"] = rows
    (out / "tree_policies.json").write_text(json.dumps(table, indent=1))
    plot(rows, vanilla["tokens_per_s"], out / "tree_policies.png")
    print(f"wrote {out / 'tree_policies.json'} and {out / 'tree_policies.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

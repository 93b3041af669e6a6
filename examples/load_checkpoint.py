"""Load EAGLE / EAGLE-3 checkpoints in the official formats and decode with them.

    python examples/load_checkpoint.py --out /tmp/ckpt     # tiny target + stand-in heads in the official layouts
    python examples/load_checkpoint.py --head ~/heads/EAGLE3-LLaMA3.1-Instruct-8B \\
        --target ~/models/Llama-3.1-8B-Instruct --device cuda   # a released head next to its own target

Released heads (EAGLE-1/2: ``yuhuili/EAGLE-*``, EAGLE-3: ``yuhuili/EAGLE3-*``, HASS releases, SpecForge / vLLM
exports) are folders with ``config.json`` and ``pytorch_model.bin`` or ``model.safetensors``. Nothing is downloaded
here: fetch the folders yourself. Tutorial: docs/tutorials/load_checkpoint.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import torch

from specdec import SamplingParams
from specdec.checkpoints import CheckpointError, load_eagle_head
from specdec.drafters.eagle1 import EagleDrafter
from specdec.drafters.eagle3 import Eagle3Drafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy


def _llama_config(c, **extra) -> dict:
    """The Llama ``config.json`` fields a released head carries (one decoder layer)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "num_hidden_layers": 1,
        "vocab_size": c.vocab_size,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048,
        "hidden_act": "silu",
        **extra,
    }


def write_eagle1_standin(folder: Path, target, seed: int = 0) -> Path:
    """Random weights in the EAGLE-1 / EAGLE-2 / HASS layout: no "bias" in config means fc has a bias;
    no input_layernorm, no final norm, no lm_head (the target's lm_head turns features into logits)."""
    c = target.config
    h, i, hd = c.hidden_size, c.intermediate_size, c.hidden_size // c.num_attention_heads
    q, kv = c.num_attention_heads * hd, c.num_key_value_heads * hd
    shapes = {
        "fc.weight": (h, 2 * h),  # input: cat[token embedding, target feature]
        "fc.bias": (h,),
        "layers.0.self_attn.q_proj.weight": (q, h),
        "layers.0.self_attn.k_proj.weight": (kv, h),
        "layers.0.self_attn.v_proj.weight": (kv, h),
        "layers.0.self_attn.o_proj.weight": (h, q),
        "layers.0.mlp.gate_proj.weight": (i, h),
        "layers.0.mlp.up_proj.weight": (i, h),
        "layers.0.mlp.down_proj.weight": (h, i),
        "layers.0.post_attention_layernorm.weight": (h,),
    }
    return _write(folder, _llama_config(c), shapes, {}, seed)


def write_eagle3_standin(folder: Path, target, draft_vocab: int, seed: int = 0) -> Path:
    """Random weights in the EAGLE-3 layout: fc fuses 3 target states, attention reads cat[emb, hidden] (2H),
    own norm + lm_head over a draft vocabulary, d2t maps draft id i to target id i + d2t[i]."""
    c = target.config
    h, i, hd = c.hidden_size, c.intermediate_size, c.hidden_size // c.num_attention_heads
    q, kv, v = c.num_attention_heads * hd, c.num_key_value_heads * hd, c.vocab_size
    shapes = {
        "fc.weight": (h, 3 * h),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.mlp.gate_proj.weight": (i, h),
        "midlayer.mlp.up_proj.weight": (i, h),
        "midlayer.mlp.down_proj.weight": (h, i),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "norm.weight": (h,),
        "lm_head.weight": (draft_vocab, h),
    }
    ids = torch.randperm(v, generator=torch.Generator().manual_seed(seed))[:draft_vocab].sort().values
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[ids] = True
    maps = {"d2t": ids - torch.arange(draft_vocab), "t2d": t2d}
    config = _llama_config(c, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=draft_vocab)
    return _write(folder, config, shapes, maps, seed)


def _write(folder: Path, config: dict, shapes: dict, extra: dict, seed: int) -> Path:
    g = torch.Generator().manual_seed(seed)
    state = {k: 0.2 * torch.randn(s, generator=g) for k, s in shapes.items()}
    state |= {k: torch.ones(s) for k, s in shapes.items() if k.endswith("norm.weight")}  # RMSNorm weights start at 1
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    torch.save({**state, **extra}, folder / "pytorch_model.bin")  # read back with weights_only=True
    return folder


def show_validation_error(folder: Path, scratch: Path) -> None:
    """Break a copy of a checkpoint the way downloads and conversions break, and print what the loader says."""
    broken = scratch / "broken"
    shutil.copytree(folder, broken, dirs_exist_ok=True)
    state = torch.load(broken / "pytorch_model.bin", weights_only=True)
    del state["layers.0.post_attention_layernorm.weight"]
    state["layers.0.mlp.down_proj.weight"] = state["layers.0.mlp.down_proj.weight"][:, :-1]
    state["layers.1.mlp.up_proj.weight"] = torch.zeros(1)
    torch.save(state, broken / "pytorch_model.bin")
    try:
        load_eagle_head(broken)
    except CheckpointError as err:
        print(f"a broken checkpoint fails loudly (CheckpointError):\n{err}")
    else:
        raise SystemExit("the broken checkpoint loaded")


def load_target(name: str, device: str):
    """``(model, tokenizer or None)``: ``tiny``, ``smollm2`` or a local Hugging Face model folder."""
    if name == "tiny":
        model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2, logit_scale=4.0)
        return model, None
    if name == "smollm2":
        from specdec.models import load_smollm2

        return load_smollm2(device=device)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype).to(device).eval()
    return model, AutoTokenizer.from_pretrained(name)


def decode(model, tokenizer, head, max_new_tokens: int) -> None:
    """Greedy (must equal vanilla) and sampled decoding with the head on an EAGLE-2 dynamic tree."""
    drafter_cls = Eagle3Drafter if head.kind == "eagle3" else EagleDrafter
    max_len = 512 if tokenizer is None else 2048
    target = HFTarget(model, max_len=max_len)
    drafter = drafter_cls(head.to(device=target.device, dtype=target.dtype), model, max_len=max_len)
    if tokenizer is None:
        prompt, eos = torch.tensor([1, 2, 3, 4, 5, 1, 2, 3]), []
    else:
        from specdec.assets import chat_ids

        prompt, eos = chat_ids(tokenizer, "Tell me a story.").to(target.device), [tokenizer.eos_token_id]
    stop = StopCondition(max_new_tokens=max_new_tokens, eos_token_ids=eos)
    policy = DynamicTreePolicy(topk=4, depth=5, total_tokens=24)
    for temperature in (0.0, 0.8):
        sampling = SamplingParams(temperature=temperature, seed=0)
        gen = SpeculativeGenerator(target, drafter, policy)
        result = gen.generate(prompt, sampling, stop)
        line = f"  T={temperature}: tau={result.metrics.tau:.2f}, {len(result.tokens)} tokens"
        if sampling.greedy:
            same = result.tokens == VanillaGenerator(target).generate(prompt, sampling, stop).tokens
            line += f", identical to vanilla greedy: {'yes' if same else 'NO'}"
        print(line)
        if tokenizer is not None:
            print("  " + tokenizer.decode(result.tokens, skip_special_tokens=True).strip()[:200])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", type=Path, default=None, help="a checkpoint folder (default: write tiny stand-ins)")
    parser.add_argument("--target", default="tiny", help="tiny, smollm2 or a local HF model folder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=None, help="where stand-ins are written (default: a temp folder)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)

    model, tokenizer = load_target(args.target, args.device)
    if args.head is not None:
        folders = [args.head]
    else:
        if args.target != "tiny":
            parser.error("without --head the stand-in heads are only written for --target tiny")
        out = args.out or Path(tempfile.mkdtemp(prefix="specdec-ckpt-"))
        folders = [write_eagle1_standin(out / "eagle1", model), write_eagle3_standin(out / "eagle3", model, 24)]

    for folder in folders:
        # Detects the kind, validates every key and shape against the config, attaches the target's embedding.
        head = load_eagle_head(folder, target_model=model)
        c = head.config
        detail = f"fc bias {c.bias}" if head.kind == "eagle1" else f"draft vocab {c.draft_vocab_size}"
        print(
            f"{folder}: {type(head).__name__}, hidden {c.hidden_size}, vocab {c.vocab_size}, {detail}, "
            f"rope_theta {c.rope_theta:g}"
        )
        decode(model, tokenizer, head, args.max_new_tokens)
    if args.head is None:
        show_validation_error(folders[0], out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

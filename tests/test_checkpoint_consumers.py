"""What each server reads from our exports: its loading rules, applied to the folder we write.

Each ``read_*`` function restates how one consumer turns a checkpoint folder into its module: which config fields it
reads, which file key lands in which parameter (q/k/v and gate/up are stacked into one parameter there, so each shard
is a slot of its own), which tensors it skips, where its embedding, lm_head and vocabulary map come from, which target
layers it fuses. The rules were read from the consumers' source (repository and path above each function) and are
restated, not copied. Everything is tiny and offline: no consumer is installed or downloaded.

A check then asks three questions of every export: does each tensor of the file land in a parameter of the right
shape, is each parameter the consumer needs filled (from the file or from the target), and does the consumer's
reading of the config match what the head means. Each rule has a negative case: an export that is wrong in exactly
the way the rule catches.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from specdec.checkpoints import export_eagle3, export_speculators, save_eagle_head
from specdec.eagle.config import EagleConfig, default_aux_layers
from specdec.eagle.heads import Eagle1Head, Eagle3Head

V, H, INTER, LAYERS = 16, 32, 48, 12  # LAYERS: decoder layers of the (imagined) target, for the aux layer ids


class ConsumerCrash(RuntimeError):
    """The consumer would raise while reading the folder (a loud failure, unlike a misreading)."""


@dataclass
class Reading:
    """A consumer's view of a checkpoint folder.

    Attributes:
        slots: parameter (or stacked shard, ``name[q]``) -> the shape the consumer allocates.
        mapped: file key -> the slot it is loaded into, or None where the consumer drops it (silently or loudly).
        ignored: file keys the consumer skips by design, harmlessly (e.g. ``t2d``, which no server needs).
        from_target: slots the consumer fills from the target model.
        embedding: where token embeddings come from: ``"file"``, ``"target"`` or ``"init"`` (random / zeros).
        lm_head: where the draft's lm_head comes from: ``"file"``, ``"embedding"``, ``"target"`` or ``"init"``.
        draft_to_target: ``[V_draft]`` target id of each draft id, as the consumer maps them (None: no draft vocab).
        aux_layers: fused target layers in our convention (input of layer ``i``), or None (EAGLE-1).
        residual: ``"raw"`` (the hidden state itself is the residual, as in our heads) or ``"normed"``.
    """

    slots: dict[str, tuple[int, ...]]
    mapped: dict[str, str | None]
    ignored: set[str] = field(default_factory=set)
    from_target: set[str] = field(default_factory=set)
    embedding: str = "target"
    lm_head: str = "target"
    draft_to_target: torch.Tensor | None = None
    aux_layers: tuple[int, ...] | None = None
    residual: str = "raw"


# ------------------------------------------------------------------------------------------------ shared helpers


def folder_files(folder: pathlib.Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    return json.loads((folder / "config.json").read_text()), load_file(str(folder / "model.safetensors"))


def attention_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """``(H, I, heads, kv_heads, head_dim)``; every consumer reads ``head_dim`` when present, else ``H // heads``."""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    return hidden, cfg["intermediate_size"], heads, kv_heads, cfg.get("head_dim") or hidden // heads


def stacked_slots(prefix: str, qkv_in: int, cfg: dict[str, Any], qkv_bias: bool = False) -> dict[str, tuple]:
    """A vLLM / SGLang layer: q/k/v stacked into ``qkv_proj``, gate/up into ``gate_up_proj`` (one slot per shard)."""
    hidden, inter, heads, kv_heads, head_dim = attention_dims(cfg)
    slots = {
        f"{prefix}.self_attn.qkv_proj.weight[q]": (heads * head_dim, qkv_in),
        f"{prefix}.self_attn.qkv_proj.weight[k]": (kv_heads * head_dim, qkv_in),
        f"{prefix}.self_attn.qkv_proj.weight[v]": (kv_heads * head_dim, qkv_in),
        f"{prefix}.self_attn.o_proj.weight": (hidden, heads * head_dim),
        f"{prefix}.mlp.gate_up_proj.weight[0]": (inter, hidden),
        f"{prefix}.mlp.gate_up_proj.weight[1]": (inter, hidden),
        f"{prefix}.mlp.down_proj.weight": (hidden, inter),
        f"{prefix}.post_attention_layernorm.weight": (hidden,),
    }
    if qkv_bias:
        slots.update({f"{prefix}.self_attn.qkv_proj.bias[{s}]": (slots[f"{prefix}.self_attn.qkv_proj.weight[{s}]"][0],)
                      for s in "qkv"})  # fmt: skip
    return slots


STACKED = ((".q_proj", ".qkv_proj", "q"), (".k_proj", ".qkv_proj", "k"), (".v_proj", ".qkv_proj", "v"),
           (".gate_proj", ".gate_up_proj", "0"), (".up_proj", ".gate_up_proj", "1"))  # fmt: skip


def stacked_name(name: str) -> str:
    """``a.q_proj.weight`` -> ``a.qkv_proj.weight[q]`` (the shard slot); other names unchanged."""
    for shard, param, shard_id in STACKED:
        if shard in name:
            return f"{name.replace(shard, param)}[{shard_id}]"
    return name


def d2t_map(state: dict[str, torch.Tensor], draft_vocab: int) -> torch.Tensor:
    """Target ids of the draft ids from the file's ``d2t`` offsets; zeros (identity) where the file has none."""
    offsets = state.get("d2t", torch.zeros(draft_vocab, dtype=torch.long))
    return torch.arange(draft_vocab) + offsets.long()


def aux_or_default(ids: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in ids) if ids else default_aux_layers(LAYERS)


# ---------------------------------------------------------------------------------------------- consumer rules


# SafeAILab/EAGLE: eagle/model/ea_model.py (EaModel.__init__ / from_pretrained), eagle/model/cnets.py (Model,
# LlamaAttention, LlamaDecoderLayeremb), eagle/model/modeling_llama_kv.py (LlamaModel.forward: fused states).
def read_official_eagle3(folder: pathlib.Path) -> Reading:
    """Official EAGLE-3 code.

    Reads ``pytorch_model.bin`` else ``model.safetensors`` (one file), config via ``EConfig``: ``vocab_size``,
    ``hidden_size``, ``draft_vocab_size`` (required), ``target_hidden_size`` (its *presence* means "the file carries
    the embedding"; absent: ``fc`` input ``3H`` and the target's ``model.embed_tokens.weight`` copied in at init),
    ``head_dim`` else ``H // heads``, ``rope_scaling["type"]`` (linear / dynamic only). ``tie_word_embeddings`` and
    ``bias`` are not used by the EAGLE-3 model. Parameters keep the file's names (``midlayer.*``, ``fc``, ``norm``,
    ``lm_head``, ``embed_tokens``, ``d2t``, ``t2d``); all projections are bias-free. ``d2t``/``t2d`` are deleted when
    ``vocab_size == draft_vocab_size``. ``load_state_dict(strict=False)``: unknown keys dropped silently, missing
    ones left at init (zeros for ``d2t``: the identity map). Fused layers are hard-coded to the inputs of layers
    ``(2, L//2, L-3)``; no config field is read.
    """
    cfg, state = folder_files(folder)
    if "draft_vocab_size" not in cfg:
        raise ConsumerCrash("EConfig has no draft_vocab_size (Model reads config.draft_vocab_size)")
    scaling = cfg.get("rope_scaling")
    if scaling is not None and scaling.get("type") not in ("linear", "dynamic"):
        raise ConsumerCrash(f"rope_scaling {scaling}: the official code reads rope_scaling['type'] (linear/dynamic)")
    hidden, inter, heads, kv_heads, head_dim = attention_dims(cfg)
    vocab, draft_vocab = cfg["vocab_size"], cfg["draft_vocab_size"]
    fc_in = cfg.get("target_hidden_size", hidden)  # presence counts, even null
    slots: dict[str, tuple[int, ...]] = {
        "embed_tokens.weight": (vocab, hidden),
        "lm_head.weight": (draft_vocab, hidden),
        "fc.weight": (hidden, 3 * fc_in),
        "norm.weight": (hidden,),
        "midlayer.self_attn.q_proj.weight": (heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": (kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": (kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": (hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": (inter, hidden),
        "midlayer.mlp.up_proj.weight": (inter, hidden),
        "midlayer.mlp.down_proj.weight": (hidden, inter),
        "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.input_layernorm.weight": (hidden,),
        "midlayer.post_attention_layernorm.weight": (hidden,),
    }
    same_vocab = vocab == draft_vocab
    if not same_vocab:
        slots.update({"d2t": (draft_vocab,), "t2d": (vocab,)})
    embed_from_target = "target_hidden_size" not in cfg
    return Reading(
        slots=slots,
        mapped={k: (k if k in slots else None) for k in state},
        ignored={"d2t", "t2d"} if same_vocab else set(),
        from_target={"embed_tokens.weight"} if embed_from_target else set(),
        embedding="file" if "embed_tokens.weight" in state else ("target" if embed_from_target else "init"),
        lm_head="file" if "lm_head.weight" in state else "init",
        draft_to_target=torch.arange(draft_vocab) if same_vocab else d2t_map(state, draft_vocab),
        aux_layers=default_aux_layers(LAYERS),
    )


# sgl-project/sglang: python/sglang/srt/models/llama_eagle3.py (LlamaModel, LlamaForCausalLMEagle3.load_weights),
# python/sglang/srt/speculative/eagle_worker.py (EAGLE-3: set_embed, or set_embed_and_head if lm_head from target),
# python/sglang/srt/models/llama.py (set_embed; set_eagle3_layers_to_capture: captures layer ``id + 1``'s input).
def read_sglang_eagle3(folder: pathlib.Path) -> Reading:
    """SGLang EAGLE-3.

    Config (a ``LlamaConfig``): ``target_hidden_size`` by presence (``fc`` input ``3 * target_hidden_size``), ``bias``
    (``fc`` bias, default false), ``tie_word_embeddings`` (true: ``lm_head`` *is* ``embed_tokens``, no lm_head
    parameter), ``draft_vocab_size`` (absent: lm_head and vocabulary from the target), ``num_hidden_layers`` (> 1 adds
    plain decoder layers), ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang convention: output of layer
    ``i``). Layer 0 is ``model.midlayer`` with q/k/v stacked bias-free. Loading: ``d2t`` -> hot token ids
    ``d2t + arange``; ``t2d`` skipped; a name is tried as is, then with ``model.``; names matching no parameter are
    dropped silently. After loading the worker replaces the embedding by the target's unless ``target_hidden_size``
    differs from ``hidden_size``.
    """
    cfg, state = folder_files(folder)
    hidden = cfg["hidden_size"]
    vocab = cfg["vocab_size"]
    lm_from_target = cfg.get("draft_vocab_size") is None
    draft_vocab = cfg.get("draft_vocab_size") or vocab
    tied = bool(cfg.get("tie_word_embeddings", False))
    fc_in = cfg.get("target_hidden_size", hidden)  # presence counts, even null
    if fc_in is None:
        raise ConsumerCrash("target_hidden_size is null: fc input size None * 3")
    slots = {"model.embed_tokens.weight": (vocab, hidden), "model.fc.weight": (hidden, 3 * fc_in)}
    if cfg.get("bias", False):
        slots["model.fc.bias"] = (hidden,)
    slots.update(stacked_slots("model.midlayer", 2 * hidden, cfg))
    for norm in ("input_layernorm", "hidden_norm"):
        slots[f"model.midlayer.{norm}.weight"] = (hidden,)
    for i in range(1, cfg.get("num_hidden_layers", 1)):
        slots.update(stacked_slots(f"model.additional_layers.{i - 1}", hidden, cfg))
    slots["model.norm.weight"] = (hidden,)
    if not tied:
        slots["lm_head.weight"] = (draft_vocab, hidden)

    mapped: dict[str, str | None] = {}
    for key in state:
        if "d2t" in key or "t2d" in key:
            continue  # d2t becomes the hot token ids, t2d is skipped: both in `ignored`
        name = stacked_name(key)
        base = name.split("[")[0]
        candidate = name if base in {s.split("[")[0] for s in slots} else f"model.{name}"
        mapped[key] = candidate if candidate in slots else None
    own_embedding = "target_hidden_size" in cfg and cfg["target_hidden_size"] != hidden
    if lm_from_target:
        lm_head = "target"
    elif tied:
        lm_head = "embedding"
    else:
        lm_head = "file" if mapped.get("lm_head.weight") else "init"
    aux = cfg.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
    return Reading(
        slots=slots,
        mapped=mapped,
        ignored={k for k in state if "d2t" in k or "t2d" in k},
        from_target=set() if own_embedding else {"model.embed_tokens.weight"},
        embedding=("file" if "embed_tokens.weight" in state else "init") if own_embedding else "target",
        lm_head=lm_head,
        draft_to_target=d2t_map(state, draft_vocab) if "d2t" in state else torch.arange(draft_vocab),
        aux_layers=tuple(int(i) + 1 for i in aux) if aux is not None else default_aux_layers(LAYERS),
    )


# vllm-project/vllm: vllm/model_executor/models/llama_eagle3.py (LlamaDecoderLayer, LlamaModel.load_weights,
# Eagle3LlamaForCausalLM.load_weights), vllm/model_executor/models/utils.py (AutoWeightsLoader: skip_substrs filter
# weights out silently; process_eagle_weight: own lm_head / embed_tokens), vllm/model_executor/models/llama.py
# (aux hidden states = input of layer i; default (2, L//2, L-3)).
def read_vllm_eagle3(folder: pathlib.Path, hf: dict[str, Any] | None = None) -> Reading:
    """vLLM EAGLE-3 (``Eagle3LlamaForCausalLM``; ``LlamaForCausalLMEagle3`` maps to it).

    Config: ``draft_vocab_size`` (None: ``vocab_size``), ``target_hidden_size`` by presence (``fc`` input),
    ``eagle_config.use_aux_hidden_state`` (default true: ``fc`` exists), ``norm_before_residual`` (default false here;
    true: the *normalised* hidden state is the residual), ``attention_bias`` (q/k/v bias) and ``attention_bias or
    bias`` (``o_proj`` bias), top-level ``eagle_aux_hidden_state_layer_ids`` (our convention). Loading: names with
    ``t2d`` skipped; ``d2t`` -> ``draft_id_to_target_id``; everything but ``lm_head`` gets ``model.``; then
    ``midlayer.`` -> ``layers.0.``, q/k/v and gate/up stacked. ``draft_id_to_target_id`` / ``embed_tokens`` / ``fc.``
    are filtered out silently when the file has no ``d2t`` / no embedding / no aux states; the draft shares the
    target's embedding (and lm_head) when the file has none. ``tie_word_embeddings`` is not read.
    """
    if hf is None:
        hf, state = folder_files(folder)
    else:
        _, state = folder_files(folder)
    hidden = hf["hidden_size"]
    vocab = hf["vocab_size"]
    draft_vocab = hf.get("draft_vocab_size") or vocab
    if "target_hidden_size" in hf and hf["target_hidden_size"] is None:
        raise ConsumerCrash("target_hidden_size is null: fc input size None * 3")
    fc_in = hf.get("target_hidden_size", hidden)
    use_aux = (hf.get("eagle_config") or {}).get("use_aux_hidden_state", True)
    qkv_bias = bool(hf.get("attention_bias", False))
    o_bias = bool(hf.get("attention_bias", False) or hf.get("bias", False))
    slots = {"model.embed_tokens.weight": (vocab, hidden), "lm_head.weight": (draft_vocab, hidden)}
    slots["draft_id_to_target_id"] = (draft_vocab,)
    slots.update(stacked_slots("model.layers.0", 2 * hidden, hf, qkv_bias=qkv_bias))
    if o_bias:
        slots["model.layers.0.self_attn.o_proj.bias"] = (hidden,)
    for norm in ("input_layernorm", "hidden_norm"):
        slots[f"model.layers.0.{norm}.weight"] = (hidden,)
    slots["model.norm.weight"] = (hidden,)
    if use_aux:
        slots["model.fc.weight"] = (hidden, 3 * fc_in)

    has_d2t = any("d2t" in k for k in state)
    has_embedding = any("embed_tokens" in k for k in state)
    skip = [s for s, present in (("draft_id_to_target_id", has_d2t), ("embed_tokens", has_embedding)) if not present]
    if not use_aux:
        skip.append("fc.")
    mapped: dict[str, str | None] = {}
    for key in state:
        if "t2d" in key:
            continue
        name = key.replace("d2t", "draft_id_to_target_id") if "d2t" in key else key
        if "d2t" not in key and "lm_head" not in name:
            name = "model." + name
        if any(s in name for s in skip):
            mapped[key] = None  # AutoWeightsLoader filters it out: silently dropped
            continue
        name = stacked_name(name.replace("midlayer.", "layers.0."))
        mapped[key] = name if name in slots else None  # vLLM: KeyError / "no module or parameter" (loud)
    return Reading(
        slots=slots,
        mapped=mapped,
        ignored={k for k in state if "t2d" in k},
        from_target=({"model.embed_tokens.weight"} if not has_embedding else set())
        | ({"lm_head.weight"} if "lm_head.weight" not in state else set())
        | ({"draft_id_to_target_id"} if not has_d2t else set()),  # stays zeros: identity
        embedding="file" if has_embedding else "target",
        lm_head="file" if "lm_head.weight" in state else "target",
        draft_to_target=d2t_map(state, draft_vocab),
        aux_layers=aux_or_default(hf.get("eagle_aux_hidden_state_layer_ids")),
        residual="normed" if hf.get("norm_before_residual", False) else "raw",
    )


# vllm-project/vllm: vllm/transformers_utils/configs/speculators/base.py (validate_speculators_config,
# extract_transformers_pre_trained_config), vllm/transformers_utils/configs/speculators/algos.py (update_eagle3);
# then the EAGLE-3 loader above.
def read_vllm_speculators(folder: pathlib.Path) -> Reading:
    """vLLM serving a speculators folder.

    Requires ``speculators_config.proposal_methods[0].speculative_tokens``, ``speculators_config.verifier.name_or_path``
    (the key), ``speculators_model_type`` among the registered kinds (``eagle3``) and a ``transformer_layer_config``
    object. The draft's HF config is ``transformer_layer_config`` plus ``draft_vocab_size``, ``target_hidden_size``
    (only when not null), ``norm_before_residual`` (**default true** when absent), architecture
    ``Eagle3LlamaForCausalLM`` and ``eagle_aux_hidden_state_layer_ids`` (when non-empty).
    """
    raw, _ = folder_files(folder)
    try:
        spec = raw["speculators_config"]
        _ = spec["proposal_methods"][0]["speculative_tokens"]
        _ = spec["verifier"]["name_or_path"]
        kind = raw["speculators_model_type"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ConsumerCrash(f"Invalid speculators config structure: {exc!r}") from exc
    if not isinstance(raw.get("transformer_layer_config"), dict):
        raise ConsumerCrash("Must provide transformer_layer_config (a dict)")
    if kind != "eagle3":
        raise ConsumerCrash(f"speculators_model_type {kind!r} is not served (eagle3 only)")
    hf = dict(raw["transformer_layer_config"])
    hf["draft_vocab_size"] = raw.get("draft_vocab_size")
    if raw.get("target_hidden_size") is not None:
        hf["target_hidden_size"] = raw["target_hidden_size"]
    hf["norm_before_residual"] = raw.get("norm_before_residual", True)
    if raw.get("eagle_aux_hidden_state_layer_ids"):
        hf["eagle_aux_hidden_state_layer_ids"] = raw["eagle_aux_hidden_state_layer_ids"]
    return read_vllm_eagle3(folder, hf)


# vllm-project/vllm: vllm/model_executor/models/llama_eagle.py (LlamaDecoderLayer without input_layernorm, LlamaModel:
# fc has no bias, load_weights skips embed_tokens without pipeline parallelism), vllm/model_executor/models/llama.py
# (LlamaDecoderLayer: o_proj bias = attention_bias or bias; q/k/v bias = qkv_bias when present).
def read_vllm_eagle1(folder: pathlib.Path) -> Reading:
    """vLLM EAGLE-1 (``EagleLlamaForCausalLM``).

    ``fc`` is ``Linear(2H, H, bias=False)``: a file ``fc.bias`` has no parameter (``params_dict`` KeyError). Layer 0's
    ``input_layernorm`` is an identity. The attention reads ``attention_bias or bias`` for ``o_proj`` (so an EAGLE-1
    config's ``bias: true``, meant for ``fc``, gives ``o_proj`` a bias) and ``qkv_bias`` for q/k/v. The file's
    ``embed_tokens.weight`` is skipped: the draft shares the target's embedding and lm_head.
    """
    cfg, state = folder_files(folder)
    hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
    o_bias = bool(cfg.get("attention_bias", False) or cfg.get("bias", False))
    qkv_bias = bool(cfg["qkv_bias"]) if "qkv_bias" in cfg else o_bias
    slots = {"model.embed_tokens.weight": (vocab, hidden), "model.fc.weight": (hidden, 2 * hidden)}
    slots.update(stacked_slots("model.layers.0", hidden, cfg, qkv_bias=qkv_bias))
    if o_bias:
        slots["model.layers.0.self_attn.o_proj.bias"] = (hidden,)
    mapped: dict[str, str | None] = {}
    for key in state:
        if "embed_tokens." in key:
            continue
        name = stacked_name("model." + key if "lm_head" not in key else key)
        mapped[key] = name if name in slots else None
    return Reading(
        slots=slots,
        mapped=mapped,
        ignored={k for k in state if "embed_tokens." in k},
        from_target={"model.embed_tokens.weight"},
        embedding="target",
        lm_head="target",
    )


CONSUMERS_EAGLE3 = {
    "official": read_official_eagle3,
    "sglang": read_sglang_eagle3,
    "vllm": read_vllm_eagle3,
}


# --------------------------------------------------------------------------------------------------- the check


def misreadings(reading: Reading, folder: pathlib.Path, head: Eagle1Head | Eagle3Head) -> list[str]:
    """Everything the consumer would get wrong: dropped or mis-shaped tensors, unfilled parameters, and each place
    where its reading of the config differs from what the head means."""
    _, state = folder_files(folder)
    problems = []
    filled = set(reading.from_target)
    for key, tensor in sorted(state.items()):
        if key in reading.ignored:
            continue
        slot = reading.mapped.get(key)
        if slot is None:
            problems.append(f"{key}: lands in no parameter (dropped)")
        elif tuple(tensor.shape) != reading.slots[slot]:
            problems.append(f"{key} -> {slot}: file {tuple(tensor.shape)} vs parameter {reading.slots[slot]}")
        else:
            filled.add(slot)
    problems += [f"{slot}: not in the file (left at its initial value)" for slot in sorted(set(reading.slots) - filled)]

    own_embedding = head.embed_tokens is not None or head.config.target_hidden_size != head.config.hidden_size
    meant: dict[str, Any] = {"embedding": "file" if own_embedding else "target", "residual": "raw"}
    if isinstance(head, Eagle3Head):
        meant["lm_head"] = "file"
        meant["aux_layers"] = head.config.aux_layer_ids or default_aux_layers(LAYERS)
    else:
        meant["lm_head"], meant["aux_layers"] = "target", None
    for name, value in meant.items():
        got = getattr(reading, name)
        if got != value:
            problems.append(f"{name}: consumer reads {got!r}, the head means {value!r}")
    if isinstance(head, Eagle3Head):
        ids = torch.arange(head.config.draft_vocab_size) + head.d2t
        if reading.draft_to_target is None or not torch.equal(reading.draft_to_target, ids):
            problems.append(f"draft_to_target: consumer maps draft ids to {reading.draft_to_target}, the head to {ids}")
    return problems


# ---------------------------------------------------------------------------------------------------- the heads


def randomize(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.3 * noise if "norm" in name else 0.15 * noise)


def head_config(**kw: Any) -> EagleConfig:
    raw = {"hidden_size": H, "intermediate_size": INTER, "num_attention_heads": 4, "num_key_value_heads": 2}
    raw.update({"vocab_size": V, "rms_norm_eps": 1e-6})
    raw.update(kw)
    return EagleConfig.from_hf(raw)


def eagle3(seed: int = 0, draft_vocab: int = 10, **kw: Any) -> Eagle3Head:
    head = Eagle3Head(head_config(draft_vocab_size=draft_vocab, **kw)).eval()
    randomize(head, seed)
    if draft_vocab < V:
        head.set_vocab_map(torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:draft_vocab].sort().values)
    return head


def eagle1(seed: int = 0, **kw: Any) -> Eagle1Head:
    head = Eagle1Head(head_config(**kw)).eval()
    randomize(head, seed)
    return head


def wider_target() -> Eagle3Head:
    head = eagle3(3, target_hidden_size=2 * H)
    head.attach_target_embedding(torch.randn(V, H, generator=torch.Generator().manual_seed(3)))
    return head


EAGLE3_HEADS = {
    "reduced-vocab": lambda: eagle3(1),
    "full-vocab": lambda: eagle3(2, draft_vocab=V),
    "wider-target": wider_target,
    "custom-aux": lambda: eagle3(4, aux_layer_ids=(1, 5, 9)),
}


def edit_config(folder: pathlib.Path, **changes: Any) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))


def edit_weights(folder: pathlib.Path, rename: dict[str, str]) -> None:
    state = load_file(str(folder / "model.safetensors"))
    save_file({rename.get(k, k): v for k, v in state.items()}, str(folder / "model.safetensors"))


# ------------------------------------------------------------------------------------------ EAGLE-3: the export


@pytest.mark.parametrize("consumer", sorted(CONSUMERS_EAGLE3))
@pytest.mark.parametrize("variant", sorted(EAGLE3_HEADS))
def test_every_server_reads_the_default_eagle3_export_as_meant(tmp_path, consumer, variant):
    head = EAGLE3_HEADS[variant]()
    export_eagle3(head, tmp_path)
    problems = misreadings(CONSUMERS_EAGLE3[consumer](tmp_path), tmp_path, head)
    if consumer == "official" and variant == "custom-aux":
        # The official code always fuses (2, L//2, L-3): a head trained on other layers cannot be served there.
        assert problems == [f"aux_layers: consumer reads {default_aux_layers(LAYERS)!r}, the head means (1, 5, 9)"]
    else:
        assert problems == []


def test_the_export_says_tie_word_embeddings_false_and_sglang_keeps_the_heads_lm_head(tmp_path):
    head = eagle3(5)
    export_eagle3(head, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["tie_word_embeddings"] is False
    reading = read_sglang_eagle3(tmp_path)
    assert reading.lm_head == "file" and reading.mapped["lm_head.weight"] == "lm_head.weight"
    # negative: a config that ties makes SGLang use the (target's) embedding as lm_head and drop the head's own
    edit_config(tmp_path, tie_word_embeddings=True)
    problems = misreadings(read_sglang_eagle3(tmp_path), tmp_path, head)
    assert "lm_head.weight: lands in no parameter (dropped)" in problems
    assert "lm_head: consumer reads 'embedding', the head means 'file'" in problems


@pytest.mark.parametrize("consumer", ["official", "sglang"])
def test_the_vllm_layout_is_for_vllm_only(tmp_path, consumer):
    """``layers.0.*`` keys: vLLM renames ``midlayer.`` itself, the official code and SGLang drop them silently."""
    head = eagle3(6)
    export_eagle3(head, tmp_path, layout="vllm")
    assert misreadings(read_vllm_eagle3(tmp_path), tmp_path, head) == []
    problems = misreadings(CONSUMERS_EAGLE3[consumer](tmp_path), tmp_path, head)
    assert "layers.0.self_attn.q_proj.weight: lands in no parameter (dropped)" in problems
    norm = {"official": "midlayer.hidden_norm.weight", "sglang": "model.midlayer.hidden_norm.weight"}[consumer]
    assert f"{norm}: not in the file (left at its initial value)" in problems


def test_vllm_drops_a_file_key_named_draft_id_to_target_id(tmp_path):
    """What the vLLM layout wrote before this rule was checked: vLLM filters the key out and maps draft ids as if
    they were target ids. The export now writes ``d2t``."""
    head = eagle3(7)
    export_eagle3(head, tmp_path, layout="vllm")
    assert misreadings(read_vllm_eagle3(tmp_path), tmp_path, head) == []
    edit_weights(tmp_path, {"d2t": "draft_id_to_target_id"})
    problems = misreadings(read_vllm_eagle3(tmp_path), tmp_path, head)
    assert "draft_id_to_target_id: lands in no parameter (dropped)" in problems
    assert any(p.startswith("draft_to_target: consumer maps draft ids to tensor([0, 1, 2") for p in problems)


def test_official_and_sglang_need_d2t_for_a_reduced_vocab(tmp_path):
    head = eagle3(8)
    export_eagle3(head, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    del state["d2t"]
    save_file(state, str(tmp_path / "model.safetensors"))
    for consumer in ("official", "sglang"):
        problems = misreadings(CONSUMERS_EAGLE3[consumer](tmp_path), tmp_path, head)
        assert any(p.startswith("draft_to_target:") for p in problems), consumer


@pytest.mark.parametrize("consumer", sorted(CONSUMERS_EAGLE3))
def test_qkv_biases_are_misread_by_every_server(tmp_path, consumer):
    """Why ``export_eagle3`` refuses such heads (``save_eagle_head`` still writes them for our own loader)."""
    head = eagle3(9, qkv_bias=True)
    save_eagle_head(head, tmp_path)
    problems = misreadings(CONSUMERS_EAGLE3[consumer](tmp_path), tmp_path, head)
    if consumer == "vllm":  # reads the biases, but also allocates an o_proj bias nobody fills
        assert problems == ["model.layers.0.self_attn.o_proj.bias: not in the file (left at its initial value)"]
    else:  # bias-free projections: the biases are dropped
        assert "midlayer.self_attn.q_proj.bias: lands in no parameter (dropped)" in problems


def test_official_needs_rope_scaling_type_and_the_export_writes_it(tmp_path):
    head = eagle3(10, rope_scaling={"rope_type": "linear", "factor": 2.0})
    export_eagle3(head, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["rope_scaling"]["type"] == "linear"
    assert misreadings(read_official_eagle3(tmp_path), tmp_path, head) == []
    edit_config(tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0})  # as transformers spells it
    with pytest.raises(ConsumerCrash, match="rope_scaling"):
        read_official_eagle3(tmp_path)


def test_a_wider_target_export_without_the_embedding_would_run_a_random_one(tmp_path):
    head = wider_target()
    export_eagle3(head, tmp_path)
    edit_weights(tmp_path, {"embed_tokens.weight": "unused.embed"})
    for consumer in ("official", "sglang"):
        problems = misreadings(CONSUMERS_EAGLE3[consumer](tmp_path), tmp_path, head)
        assert "embedding: consumer reads 'init', the head means 'file'" in problems, consumer


def test_sglang_aux_ids_are_layer_outputs(tmp_path):
    head = eagle3(11, aux_layer_ids=(1, 5, 9))
    export_eagle3(head, tmp_path)
    assert read_sglang_eagle3(tmp_path).aux_layers == (1, 5, 9)
    assert read_vllm_eagle3(tmp_path).aux_layers == (1, 5, 9)
    # negative: the SGLang field written in our convention would shift every fused layer by one
    edit_config(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 5, 9]})
    problems = misreadings(read_sglang_eagle3(tmp_path), tmp_path, head)
    assert problems == ["aux_layers: consumer reads (2, 6, 10), the head means (1, 5, 9)"]


def test_a_null_target_hidden_size_crashes_sglang_and_vllm(tmp_path):
    """Both test the field's presence, so the native export never writes it null (speculators does, see below)."""
    export_eagle3(eagle3(12), tmp_path)
    assert "target_hidden_size" not in json.loads((tmp_path / "config.json").read_text())
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["target_hidden_size"] = None
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for read in (read_sglang_eagle3, read_vllm_eagle3):
        with pytest.raises(ConsumerCrash, match="target_hidden_size is null"):
            read(tmp_path)


# ---------------------------------------------------------------------------------- EAGLE-3: speculators on vLLM


@pytest.mark.parametrize("variant", sorted(EAGLE3_HEADS))
def test_vllm_reads_the_speculators_export_as_meant(tmp_path, variant):
    head = EAGLE3_HEADS[variant]()
    export_eagle3(head, tmp_path, layout="speculators")
    assert misreadings(read_vllm_speculators(tmp_path), tmp_path, head) == []


def test_vllm_defaults_norm_before_residual_to_true_so_the_export_writes_false(tmp_path):
    head = eagle3(13)
    export_speculators(head, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["norm_before_residual"] is False
    edit_config(tmp_path, norm_before_residual=None)  # field absent, as speculators' own default would allow
    assert misreadings(read_vllm_speculators(tmp_path), tmp_path, head) == [
        "residual: consumer reads 'normed', the head means 'raw'"
    ]


def test_vllm_refuses_a_speculators_config_without_its_proposal(tmp_path):
    export_speculators(eagle3(14), tmp_path)
    edit_config(tmp_path, speculators_config={"verifier": {"name_or_path": None}})
    with pytest.raises(ConsumerCrash, match="Invalid speculators config structure"):
        read_vllm_speculators(tmp_path)


# --------------------------------------------------------------------------------------------- EAGLE-1 on vLLM


def test_vllm_reads_a_bias_free_eagle1_head_as_meant(tmp_path):
    head = eagle1(15, bias=False, qkv_bias=True)
    save_eagle_head(head, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["bias"] is False and cfg["qkv_bias"] is True  # written explicitly: absent would mean bias=True
    assert misreadings(read_vllm_eagle1(tmp_path), tmp_path, head) == []


def test_vllm_cannot_serve_an_eagle1_fc_bias(tmp_path):
    """vLLM's EAGLE-1 ``fc`` has no bias, and reads the config's ``bias`` (meant for ``fc``) as an o_proj bias:
    EAGLE-1 heads with an ``fc`` bias (the Vicuna / LLaMA-2 releases and our default) are not servable there."""
    head = eagle1(16, bias=True)
    save_eagle_head(head, tmp_path)
    assert misreadings(read_vllm_eagle1(tmp_path), tmp_path, head) == [
        "fc.bias: lands in no parameter (dropped)",
        "model.layers.0.self_attn.o_proj.bias: not in the file (left at its initial value)",
    ]


def test_vllm_ignores_an_eagle1_heads_own_embedding(tmp_path):
    head = Eagle1Head(head_config(bias=False), with_embedding=True).eval()
    randomize(head, 17)
    save_eagle_head(head, tmp_path)
    reading = read_vllm_eagle1(tmp_path)
    assert "embed_tokens.weight" in reading.ignored
    assert misreadings(reading, tmp_path, head) == ["embedding: consumer reads 'target', the head means 'file'"]

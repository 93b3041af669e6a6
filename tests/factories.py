"""Builders shared by the end-to-end tests: every drafter kind and every tree policy around one target."""

from __future__ import annotations

import pytest
import torch

from specdec.backends.cpu import packing_error
from specdec.drafters import Eagle3Drafter, EagleDrafter, NGramDrafter, SmallLMDrafter
from specdec.eagle.config import default_aux_layers
from specdec.interfaces import Drafter, TargetHidden, TreePolicy
from specdec.train.heads import build_head
from specdec.trees import DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy

DRAFTERS = ("ngram", "small-lm", "eagle1", "eagle3")
POLICIES = ("static", "chain", "dynamic", "stochastic")
SMALL_PATHS = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]


def skip_unless_packs(dtype: torch.dtype) -> None:
    """Skip where this CPU's oneDNN cannot pack ``dtype`` linears (bfloat16 on an AVX2-only CPU such as AMD Zen 3),
    saying why; each such test's property is also proven in float32, which every CPU packs."""
    reason = packing_error(dtype)
    if reason:
        pytest.skip(f"{reason}; the float32 form of this test runs here")


def random_head(kind: str, model, seed: int = 0, draft_vocab: int | None = None):
    """A randomly initialised EAGLE-1 or EAGLE-3 head shaped after ``model`` (float32, eval)."""
    torch.manual_seed(seed)
    config = model.config
    if kind == "eagle1":
        head = build_head("eagle1", config)
    else:
        vocab = config.vocab_size
        draft_vocab = draft_vocab or max(2, vocab // 2)
        head = build_head(
            "eagle3", config, layers=default_aux_layers(config.num_hidden_layers), draft_vocab_size=draft_vocab
        )
        g = torch.Generator().manual_seed(seed)
        head.set_vocab_map(torch.randperm(vocab, generator=g)[:draft_vocab].sort().values)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "norm" not in name and p.is_floating_point():
                p.normal_(0.0, 0.3 if p.ndim > 1 else 0.1)
    return head.to(next(model.parameters()).device).eval()  # beside the target (a CUDA test's model is on the GPU)


def make_drafter(
    kind: str,
    model,
    max_len: int,
    seed: int = 0,
    small_layers: int = 1,
    weights: str = "auto",
    static_shapes: bool = False,
) -> Drafter:
    """A drafter for ``model``: random EAGLE heads, the target's first layers, or n-gram; ``weights`` and
    ``static_shapes`` of the model-based ones (:mod:`specdec.backends`: ``"auto"`` weights are int8 on CPU)."""
    kw = dict(weights=weights, static_shapes=static_shapes)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if kind == "ngram":
        return NGramDrafter(vocab_size=vocab, num_candidates=4)
    if kind == "small-lm":
        return SmallLMDrafter.from_target_layers(model, small_layers, max_len, **kw)
    if kind == "eagle1":
        return EagleDrafter(random_head("eagle1", model, seed), model, max_len, **kw)
    if kind == "eagle1-shortlist":  # drafts over every other token: q = 0 on the rest
        shortlist = torch.arange(0, vocab, 2)
        return EagleDrafter(random_head("eagle1", model, seed), model, max_len, draft_vocab=shortlist, **kw)
    if kind == "eagle3":
        return Eagle3Drafter(random_head("eagle3", model, seed), model, max_len, **kw)
    raise ValueError(kind)


def seeded_hidden(drafter: Drafter, n: int, seed: int, width: int = 16) -> TargetHidden:
    """Seeded target hidden states for ``n`` positions (``width`` wide), in the form the drafter asks for."""
    g = torch.Generator().manual_seed(seed)
    if drafter.hidden_request.final:
        return TargetHidden(final=torch.randn(n, width, generator=g))
    return TargetHidden(layers={i: torch.randn(n, width, generator=g) for i in drafter.hidden_request.layers})


def record_topk(drafter: Drafter, seen: list[torch.Tensor]) -> None:
    """Every ``expand_topk`` the drafter answers is appended to ``seen`` as ``(log q, tokens as float)``."""
    original = drafter.expand_topk

    def record(tree, frontier, k):
        logq, tokens = original(tree, frontier, k)
        seen.extend((logq, tokens.float()))
        return logq, tokens

    drafter.expand_topk = record


def make_policy(kind: str, paths=None) -> TreePolicy:
    paths = paths or SMALL_PATHS
    if kind == "static":
        return StaticTreePolicy(paths)
    if kind == "chain":
        return StaticTreePolicy.chain(3)
    if kind == "dynamic":
        return DynamicTreePolicy(topk=3, depth=3, total_tokens=8)
    if kind == "stochastic":
        return StochasticTreePolicy(paths)
    raise ValueError(kind)


#: Decoder families with their attention layouts (tests/test_families.py); ``window`` is the sliding window.
FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma3", "phi3")


def tiny_family(family: str, window: int = 6, vocab: int = 32, layers: int = 4, seed: int = 0):
    """A tiny random decoder of ``family`` (float32, eval, sdpa attention), no downloads.

    Layouts: llama and qwen3 full attention; mistral and phi3 sliding-window attention on every layer; qwen2 hybrid
    (full on the first half, sliding on the rest: ``use_sliding_window`` + ``max_window_layers``); gemma3 hybrid
    alternating sliding / full.
    """
    import transformers as tf

    common = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    if family == "llama":
        model_cls, config = tf.LlamaForCausalLM, tf.LlamaConfig(**common)
    elif family == "qwen2":
        config = tf.Qwen2Config(use_sliding_window=True, sliding_window=window, max_window_layers=layers // 2, **common)
        model_cls = tf.Qwen2ForCausalLM
    elif family == "qwen3":
        model_cls, config = tf.Qwen3ForCausalLM, tf.Qwen3Config(head_dim=8, **common)
    elif family == "mistral":
        model_cls, config = tf.MistralForCausalLM, tf.MistralConfig(sliding_window=window, **common)
    elif family == "gemma3":
        types = ["sliding_attention", "full_attention"] * (layers // 2)
        config = tf.Gemma3TextConfig(
            sliding_window=window, layer_types=types, head_dim=8, query_pre_attn_scalar=8, **common
        )
        model_cls = tf.Gemma3ForCausalLM
    elif family == "phi3":
        model_cls, config = tf.Phi3ForCausalLM, tf.Phi3Config(sliding_window=window, **common)
    else:
        raise ValueError(family)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    gemma = family.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(0.0 if gemma else 1.0)  # Gemma norms scale by (1 + w)
            else:
                p.normal_(0.0, 0.5)
    return model

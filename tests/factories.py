"""Builders shared by the end-to-end tests: every drafter kind and every tree policy around one target."""

from __future__ import annotations

import torch

from specdec.drafters import Eagle3Drafter, EagleDrafter, NGramDrafter, SmallLMDrafter
from specdec.drafters.eagle_modules import default_aux_layers
from specdec.interfaces import Drafter, TreePolicy
from specdec.train.trainer import build_head
from specdec.trees import DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy

DRAFTERS = ("ngram", "small-lm", "eagle1", "eagle3")
POLICIES = ("static", "chain", "dynamic", "stochastic")
SMALL_PATHS = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]


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
    return head.eval()


def make_drafter(kind: str, model, max_len: int, seed: int = 0, small_layers: int = 1) -> Drafter:
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if kind == "ngram":
        return NGramDrafter(vocab_size=vocab, num_candidates=4)
    if kind == "small-lm":
        return SmallLMDrafter.from_target_layers(model, small_layers, max_len)
    if kind == "eagle1":
        return EagleDrafter(random_head("eagle1", model, seed), model, max_len)
    if kind == "eagle1-shortlist":  # drafts over every other token: q = 0 on the rest
        return EagleDrafter(random_head("eagle1", model, seed), model, max_len, draft_vocab=torch.arange(0, vocab, 2))
    if kind == "eagle3":
        return Eagle3Drafter(random_head("eagle3", model, seed), model, max_len)
    raise ValueError(kind)


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

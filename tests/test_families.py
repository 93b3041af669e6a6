"""Model families: each served exactly (greedy output equals ``generate``), or refused at construction.

The families and their attention layouts are in :func:`tests.factories.tiny_family`. The window is 6 tokens. Prompts
are shorter (4) and longer (18) than it, and 24 tokens are generated, so every tree is verified at positions
where the window cuts the context. The drafter is the target's first 3 layers, so trees are accepted deeply and the
tree mask itself has to be windowed. Without the window (the negative control), every family with
sliding layers diverges from ``generate``.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from specdec.attention import AttentionLayout, UnsupportedModelError, UntestedModelWarning, additive_mask
from specdec.drafters import SmallLMDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy
from specdec.verify import GreedyVerifier
from tests.factories import FAMILIES, tiny_family
from tests.test_greedy_exact import assert_same_or_near_tie

WINDOW, NEW, MAX_LEN = 6, 24, 96
PROMPTS = {"short": 4, "long": 18}
SLIDING_FAMILIES = ("qwen2", "mistral", "gemma3", "phi3")


def prompt_of(length: int) -> torch.Tensor:
    return torch.randint(0, 32, (length,), generator=torch.Generator().manual_seed(length))


def hf_greedy(model, prompt: torch.Tensor) -> list[int]:
    out = model.generate(prompt[None], max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
    return out[0, prompt.shape[0] :].tolist()


def speculative(model, prompt: torch.Tensor, weights: str):
    target = HFTarget(model, max_len=MAX_LEN, weights=weights)
    drafter = SmallLMDrafter.from_target(target, 3)
    policy = DynamicTreePolicy(topk=2, depth=4, total_tokens=8)
    gen = SpeculativeGenerator(target, drafter, policy, GreedyVerifier())
    return gen.generate(prompt, SamplingParams(), StopCondition(max_new_tokens=NEW))


@pytest.mark.parametrize("weights", ["stock", "auto"])
@pytest.mark.parametrize("length", PROMPTS.values(), ids=PROMPTS.keys())
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_output_equals_generate(family, length, weights):
    model = tiny_family(family, window=WINDOW)
    prompt = prompt_of(length)
    reference = hf_greedy(model, prompt)  # before any backend transforms the model
    target = HFTarget(model, max_len=MAX_LEN, weights=weights)
    vanilla = VanillaGenerator(target).generate(prompt, SamplingParams(), StopCondition(max_new_tokens=NEW)).tokens
    assert_same_or_near_tie(model, prompt, reference, vanilla)
    result = speculative(model, prompt, weights)
    assert result.metrics.tau > 1.5, f"drafts were rarely accepted (tau {result.metrics.tau:.2f}): trees untested"
    assert_same_or_near_tie(model, prompt, reference, result.tokens)


def test_layouts_are_read_from_the_config():
    layouts = {f: AttentionLayout.of(tiny_family(f, window=WINDOW)) for f in FAMILIES}
    assert set(layouts["llama"].layer_types) == set(layouts["qwen3"].layer_types) == {"full_attention"}
    assert set(layouts["mistral"].layer_types) == set(layouts["phi3"].layer_types) == {"sliding_attention"}
    assert layouts["qwen2"].layer_types == ("full_attention",) * 2 + ("sliding_attention",) * 2
    assert layouts["gemma3"].layer_types == ("sliding_attention", "full_attention") * 2
    assert all(layouts[f].sliding_window == WINDOW for f in SLIDING_FAMILIES)
    assert layouts["llama"].sliding_window is None
    assert [f for f, layout in layouts.items() if layout.hybrid] == ["qwen2", "gemma3"]


def test_the_window_is_applied_in_positions_not_cache_slots():
    layout = AttentionLayout(("sliding_attention",), 3, torch.float32, "cache")
    # prefix of 4 (positions 0..3), then a tree: node a (depth 0, pos 4), its children b, c (depth 1, pos 5)
    keys = torch.tensor([0, 1, 2, 3, 4, 5, 5])
    queries = torch.tensor([4, 5, 5])
    allowed = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0, 1]], dtype=torch.bool)
    seen = layout.mask(allowed, keys, queries)[0, 0] == 0
    expected = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 1]], dtype=torch.bool)
    assert torch.equal(seen, expected)  # c sits in slot 6 but at position 5: the window counts positions


@pytest.mark.parametrize("family", SLIDING_FAMILIES)
def test_negative_control_without_the_window_output_differs(family, monkeypatch):
    model = tiny_family(family, window=WINDOW)
    prompt = prompt_of(PROMPTS["long"])
    reference = hf_greedy(model, prompt)

    def unwindowed(self, allowed, keys, queries):
        mask = additive_mask(allowed, self.dtype)
        return {"full_attention": mask, "sliding_attention": mask} if self.hybrid else mask

    monkeypatch.setattr(AttentionLayout, "mask", unwindowed)
    assert speculative(model, prompt, "stock").tokens != reference


@pytest.mark.parametrize("implementation", ["flex_attention", "flash_attention_2", "paged_attention"])
def test_attention_without_a_4d_mask_is_refused(implementation):
    model = tiny_family("llama")
    model.config._attn_implementation = implementation  # as if loaded with it (no kernels needed to refuse)
    with pytest.raises(UnsupportedModelError, match='attn_implementation="sdpa"'):
        HFTarget(model, max_len=MAX_LEN, weights="stock")


def test_other_layer_types_are_refused():
    model = tiny_family("qwen3")
    model.config.layer_types = ["full_attention", "chunked_attention", "full_attention", "linear_attention"]
    with pytest.raises(UnsupportedModelError, match="chunked_attention"):
        HFTarget(model, max_len=MAX_LEN, weights="stock")


def test_an_untested_family_is_served_with_a_warning():
    model = tiny_family("llama")
    model.config.model_type = "my_llama"
    with pytest.warns(UntestedModelWarning, match="my_llama"):
        HFTarget(model, max_len=MAX_LEN, weights="stock")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntestedModelWarning)
        HFTarget(tiny_family("gemma3"), max_len=MAX_LEN, weights="stock")


def test_the_cache_goes_by_the_name_the_forward_takes():
    model = tiny_family("llama")
    name = AttentionLayout.of(model).cache_kwarg
    assert name in inspect.signature(model.forward).parameters
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a deprecated keyword would warn here
        target = HFTarget(model, max_len=MAX_LEN, weights="stock")
        target.prefill(prompt_of(4))
    assert target.cache.layers[0].is_initialized  # the forward wrote into our cache, not into one of its own

    def legacy(input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        return None

    model.forward = legacy  # as in transformers releases before the rename
    assert AttentionLayout.of(model).cache_kwarg == "past_key_values"
    model.forward = lambda input_ids=None, **kwargs: None  # a cache passed here would be ignored: refused
    with pytest.raises(UnsupportedModelError, match="no KV cache argument"):
        HFTarget(model, max_len=MAX_LEN, weights="stock")

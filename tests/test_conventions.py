"""Hugging Face conventions: prompt shapes, EOS from the generation config, the full sequence like ``generate``."""

from __future__ import annotations

import pytest
import torch

from specdec.drafters import NGramDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy
from specdec.verify import GreedyVerifier
from tests.factories import tiny_family

PROMPT = [3, 17, 9, 22, 5, 30]
NEW = 16


def generators(model):
    target = HFTarget(model, max_len=64, weights="stock")
    spec = SpeculativeGenerator(
        target, NGramDrafter(vocab_size=32), DynamicTreePolicy(topk=2, depth=3, total_tokens=6), GreedyVerifier()
    )
    return [VanillaGenerator(target), spec]


@pytest.mark.parametrize("kind", [0, 1], ids=["vanilla", "speculative"])
def test_prompt_shapes_and_the_full_sequence(kind):
    model = tiny_family("qwen3")
    reference = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False)
    gen = generators(model)[kind]
    stop = StopCondition(max_new_tokens=NEW)
    for prompt in (torch.tensor(PROMPT), torch.tensor([PROMPT]), PROMPT, torch.tensor([PROMPT], dtype=torch.int32)):
        result = gen.generate(prompt, SamplingParams(), stop)
        assert torch.equal(result.sequences, reference)  # same layout and values as generate's output
        assert result.prompt == PROMPT


@pytest.mark.parametrize("kind", [0, 1], ids=["vanilla", "speculative"])
def test_a_batch_or_a_3d_prompt_is_refused_clearly(kind):
    gen = generators(tiny_family("qwen3"))[kind]
    with pytest.raises(ValueError, match="batch size 2; specdec decodes one sequence at a time"):
        gen.generate(torch.tensor([PROMPT, PROMPT]), SamplingParams(), StopCondition(max_new_tokens=4))
    with pytest.raises(ValueError, match=r"\[L\] or \[1, L\]"):
        gen.generate(torch.tensor([[PROMPT]]), SamplingParams(), StopCondition(max_new_tokens=4))


@pytest.mark.parametrize("kind", [0, 1], ids=["vanilla", "speculative"])
def test_eos_defaults_to_the_generation_config(kind):
    model = tiny_family("qwen3")
    free = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False)[0, len(PROMPT) :].tolist()
    eos = free[5]  # a token greedy decoding emits: generate stops there once it is the EOS
    assert eos not in free[:5]
    model.generation_config.eos_token_id = eos
    reference = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False)
    gen = generators(model)[kind]
    result = gen.generate(torch.tensor(PROMPT), SamplingParams(), StopCondition(max_new_tokens=NEW))
    assert result.finish_reason == "eos" and result.tokens == free[:6]
    assert torch.equal(result.sequences, reference)
    unbounded = gen.generate(
        torch.tensor(PROMPT), SamplingParams(), StopCondition(max_new_tokens=NEW, eos_token_ids=())
    )
    assert unbounded.finish_reason == "length" and unbounded.tokens == free  # () = no EOS at all

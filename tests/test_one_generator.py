"""One generator object serves any sampling setting, call after call; a pinned verifier that cannot serve a call is
refused before the first token; ``generate(ids)`` works with defaults."""

from __future__ import annotations

import pytest
import torch

from specdec import (
    ByTemperature,
    DynamicTreePolicy,
    HFTarget,
    IncompatibleVerifierError,
    NGramDrafter,
    SamplingParams,
    SmallLMDrafter,
    SpeculativeGenerator,
    StochasticTreePolicy,
    StopCondition,
    VanillaGenerator,
)
from specdec.models import tiny_llama
from specdec.target import EmptyPromptError
from specdec.verify import GreedyVerifier, MultiRoundVerifier, StochasticMultiRoundVerifier

VOCAB = 16
PROMPT = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
STOP = StopCondition(max_new_tokens=12, eos_token_ids=())


@pytest.fixture(scope="module")
def target():
    return HFTarget(tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=2, seed=3), max_len=64)


def test_one_generator_serves_greedy_then_sampled_then_greedy(target):
    """T = 0, then T = 0.7, then T = 0 on the same object: greedy calls equal vanilla greedy token for token (both
    times), the sampled call runs the sampled tree with the stochastic verifier, and each call's parts follow its
    sampling. Control: a generator pinned to the greedy verifier refuses the T = 0.7 call."""
    policy = ByTemperature(DynamicTreePolicy(topk=2, depth=3, total_tokens=8), StochasticTreePolicy([[0], [1], [0, 0]]))
    gen = SpeculativeGenerator(target, SmallLMDrafter.from_target(target, 1), policy)
    greedy, warm = SamplingParams(), SamplingParams(temperature=0.7, seed=0)
    want = VanillaGenerator(target).generate(PROMPT, greedy, STOP).tokens
    first = gen.generate(PROMPT, greedy, STOP)
    sampled = gen.generate(PROMPT, warm, STOP)
    again = gen.generate(PROMPT, greedy, STOP)
    assert first.tokens == want and again.tokens == want
    assert len(sampled.tokens) == 12 and set(sampled.metrics.tree_sizes) == {4}  # the sampled tree's 4 nodes
    assert isinstance(gen.parts_for(greedy)[1], GreedyVerifier)
    assert isinstance(gen.parts_for(warm)[1], StochasticMultiRoundVerifier)
    pinned = SpeculativeGenerator(target, SmallLMDrafter.from_target(target, 1), policy, GreedyVerifier())
    assert pinned.generate(PROMPT, greedy, STOP).tokens == want
    with pytest.raises(IncompatibleVerifierError, match="pin StochasticMultiRoundVerifier"):
        pinned.generate(PROMPT, warm, STOP)


def test_a_pinned_verifier_is_refused_before_the_first_token(target):
    """The refusal comes from ``stream()`` itself, before an iterator (and so a token) exists, and names the fix."""
    gen = SpeculativeGenerator(target, NGramDrafter.from_target(target), StochasticTreePolicy([[0], [1]]))
    gen.verifier = MultiRoundVerifier()
    with pytest.raises(IncompatibleVerifierError, match="MultiRoundVerifier is for deterministic.*pin Stochastic"):
        gen.stream(PROMPT, SamplingParams(temperature=1.0))
    assert list(gen.stream(PROMPT, SamplingParams(), STOP))  # the same pinned verifier serves T = 0 (a top-k tree)


def test_generate_with_defaults_and_tokenizer_output(target):
    """``generate(ids)``: greedy, the target's EOS ids, and a budget that fills the cache (the model's generation
    config sets no max_new_tokens); a tokenizer's mapping output is accepted, a string is refused with the fix."""
    gen = SpeculativeGenerator(target, NGramDrafter.from_target(target), DynamicTreePolicy(2, 2, 6))
    result = gen.generate(PROMPT)
    room = target.max_len - PROMPT.shape[0] - gen.policy.max_nodes  # the cache's room after the prompt and one tree
    assert target.max_new_tokens is None and len(result.tokens) <= room
    if result.tokens[-1] in target.eos_token_ids:
        assert result.finish_reason == "eos"
    else:
        assert result.finish_reason == "length" and len(result.tokens) == room
    same = gen.generate({"input_ids": PROMPT[None], "attention_mask": torch.ones(1, 8)}, stop=STOP)
    assert same.tokens == gen.generate(PROMPT, stop=STOP).tokens
    with pytest.raises(TypeError, match="tokenizer"):
        gen.generate("hello")


def word_tokenizer():
    """A word-level tokenizer over the tiny vocabulary: ``"w3"`` is id 3 (no special tokens added)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="w0")


def generators(target):
    return {
        "speculative": SpeculativeGenerator(target, NGramDrafter.from_target(target), DynamicTreePolicy(2, 2, 6)),
        "vanilla": VanillaGenerator(target),
    }


@pytest.mark.parametrize("which", ["speculative", "vanilla"])
def test_every_prompt_form_gives_the_same_generation(target, which):
    """``[L]`` and ``[1, L]`` tensors, a list of ids, a tokenizer's ``BatchEncoding`` (tensors or lists) and a string
    with ``tokenizer=`` are one prompt: the same tokens come out, and ``result.prompt`` is the ids."""
    gen, tokenizer = generators(target)[which], word_tokenizer()
    text = " ".join(f"w{i}" for i in PROMPT.tolist())
    want = gen.generate(PROMPT, stop=STOP)
    forms = {
        "[1, L]": PROMPT[None],
        "list": PROMPT.tolist(),
        "BatchEncoding pt": tokenizer(text, return_tensors="pt"),
        "BatchEncoding lists": tokenizer(text),
    }
    for form, prompt in forms.items():
        assert gen.generate(prompt, stop=STOP).tokens == want.tokens, form
    by_text = gen.generate(text, stop=STOP, tokenizer=tokenizer)
    assert by_text.tokens == want.tokens and by_text.prompt == PROMPT.tolist()
    assert list(gen.stream(text, stop=STOP, tokenizer=tokenizer)) == want.tokens


@pytest.mark.parametrize("which", ["speculative", "vanilla"])
def test_bad_prompt_forms_are_refused_naming_the_problem(target, which):
    gen, tokenizer = generators(target)[which], word_tokenizer()
    refused = [
        ("w1 w2", {}, TypeError, "the prompt is a string but no tokenizer was given: pass tokenizer="),
        (PROMPT.float(), {}, TypeError, "prompt must hold integer token ids, got dtype torch.float32"),
        (torch.stack([PROMPT, PROMPT]), {}, ValueError, "prompt has batch size 2; specdec decodes one sequence"),
        (tokenizer(["w1 w2", "w3 w1"], return_tensors="pt"), {}, ValueError, "prompt has batch size 2"),
        ("", {"tokenizer": tokenizer}, EmptyPromptError, "the prompt is an empty string"),
        ([], {}, EmptyPromptError, r"prompt must be a non-empty 1-D tensor of token ids, got \(0,\)"),
        (torch.zeros(1, 0, dtype=torch.long), {}, EmptyPromptError, "non-empty"),
        ({"attention_mask": PROMPT}, {}, TypeError, "a mapping prompt needs an 'input_ids' entry"),
        (PROMPT[None, None], {}, ValueError, r"prompt must be \[L\] or \[1, L\] token ids, got shape \(1, 1, 8\)"),
    ]
    for prompt, kwargs, error, message in refused:
        with pytest.raises(error, match=message):
            gen.generate(prompt, stop=STOP, **kwargs)
    with pytest.raises(TypeError, match="no tokenizer was given"):
        gen.stream("w1 w2")  # raised by stream() itself, before an iterator exists


def test_metrics_give_the_cost_of_a_cycle(target):
    """Per-cycle cost (issue 48): each phase's milliseconds per cycle, summing with the bookkeeping to the decode
    time over the cycles, and in the stats line."""
    result = SpeculativeGenerator(target, NGramDrafter(target.vocab_size), DynamicTreePolicy()).generate(
        torch.tensor([1, 2, 3, 1, 2, 3]), SamplingParams(temperature=0.0), StopCondition(max_new_tokens=12)
    )
    m = result.metrics
    ms = m.cycle_ms()
    decode = m.time_draft + m.time_target + m.time_verify + m.time_bookkeeping
    assert m.cycles > 0 and sum(ms.values()) == pytest.approx(1e3 * decode / m.cycles)
    assert ms["target"] > 0 and f"target {ms['target']:.1f}" in m.summary() and "per cycle: draft" in m.summary()

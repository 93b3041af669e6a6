"""Bad input: the decoding loops refuse it with a clear error that names the problem.

One test per kind of mistake. Each checks the exception type and that the message says what is wrong, so a user
who hits it knows what to change.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from specdec.calls import TargetTakenError
from specdec.drafters import Eagle3Drafter, NGramDrafter, SmallLMDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.interfaces import VocabMismatchError
from specdec.kvcache import CacheFullError
from specdec.models import tiny_llama
from specdec.sampling import NonFiniteLogitsError, SamplingParams
from specdec.target import EmptyPromptError, HFTarget, UnsupportedModelError
from specdec.verify import (
    ChainVerifier,
    GreedyVerifier,
    MultiRoundVerifier,
    StochasticMultiRoundVerifier,
)
from tests.factories import make_policy, random_head

VOCAB = 8
MAX_LEN = 32
PROMPT = torch.tensor([1, 2, 3, 1, 2])
SAMPLED = SamplingParams(temperature=1.0)
STOP = StopCondition(max_new_tokens=4)


def model(**changes) -> torch.nn.Module:
    return tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=2, seed=0, **changes)


def speculative(m, policy: str = "static", verifier=None, max_len: int = MAX_LEN) -> SpeculativeGenerator:
    return SpeculativeGenerator(
        HFTarget(m, max_len=max_len), NGramDrafter(VOCAB), make_policy(policy), verifier or MultiRoundVerifier()
    )


def vanilla(m, max_len: int = MAX_LEN) -> VanillaGenerator:
    return VanillaGenerator(HFTarget(m, max_len=max_len))


GENERATORS = {"speculative": speculative, "vanilla": vanilla}


def poison_logits(m, token: int | None, value: float, after_calls: int = 0):
    """Make ``m``'s logits ``value`` at ``token`` (every token if None) from its ``after_calls + 1``-th forward on."""
    calls = [0]

    def hook(module, inputs, out):
        calls[0] += 1
        if calls[0] <= after_calls:
            return out
        out = out.clone()
        out[..., slice(None) if token is None else token] = value
        return out

    m.lm_head.register_forward_hook(hook)
    return m


# ------------------------------------------------------------------------------------------------ vocabulary
@pytest.mark.parametrize("kind", ["ngram", "small-lm"])
def test_vocab_mismatch(kind):
    m = model()
    if kind == "ngram":
        drafter = NGramDrafter(VOCAB - 1)
    else:
        drafter = SmallLMDrafter(tiny_llama(vocab_size=12, hidden_size=16, num_layers=1), MAX_LEN)
    with pytest.raises(VocabMismatchError, match=r"drafter vocabulary \(\d+\) differs from the target's \(8\)"):
        SpeculativeGenerator(HFTarget(m, max_len=MAX_LEN), drafter, make_policy("static"), MultiRoundVerifier())


# ------------------------------------------------------------------------------------------------ cache size
@pytest.mark.parametrize("which", list(GENERATORS))
def test_prompt_too_long_for_cache(which):
    gen = GENERATORS[which](model(), max_len=16)
    with pytest.raises(CacheFullError, match=r"prompt \(14\) \+ max_new_tokens \(4\).*exceed the target cache of 16"):
        gen.generate(torch.arange(14) % VOCAB, SAMPLED, STOP)
    with pytest.raises(CacheFullError, match="exceed the target cache of 16; raise the target.s max_len"):
        gen.generate(torch.arange(40) % VOCAB, SAMPLED, STOP)  # longer than the whole cache


def test_tree_larger_than_cache():
    policy = make_policy("static")  # 7 nodes
    with pytest.raises(CacheFullError, match=r"the policy's trees \(7 nodes\) do not fit the target cache of 6"):
        SpeculativeGenerator(HFTarget(model(), max_len=6), NGramDrafter(VOCAB), policy, MultiRoundVerifier())


# ------------------------------------------------------------------------------------------ sampling settings
@pytest.mark.parametrize(
    ("settings", "field", "says"),
    [
        ({"temperature": -1.0}, "temperature", "greater than or equal to 0"),
        ({"temperature": float("nan")}, "temperature", "nan"),
        ({"temperature": float("inf")}, "temperature", "must be a finite number"),
        ({"top_p": 0.0}, "top_p", "greater than 0"),
        ({"top_p": 1.5}, "top_p", "less than or equal to 1"),
        ({"top_k": -1}, "top_k", "greater than or equal to 0"),
        ({"top_k": 2.5}, "top_k", "valid integer"),
        ({"temperatur": 1.0}, "temperatur", "Extra inputs are not permitted"),
        ({"seed": 2**64}, "seed", "less than 18446744073709551616"),
    ],
    ids=lambda v: str(v) if not isinstance(v, dict) else ",".join(f"{k}={x}" for k, x in v.items()),
)
def test_invalid_sampling_settings(settings, field, says):
    with pytest.raises(ValidationError) as info:
        SamplingParams(**settings)
    message = str(info.value)
    assert field in message and says in message, message


# ----------------------------------------------------------------------------------------- non-finite logits
@pytest.mark.parametrize("which", list(GENERATORS))
def test_nan_logits_from_nan_weights(which):
    m = model()
    with torch.no_grad():
        m.lm_head.weight[3, 0] = float("nan")  # logit 3 is NaN at every position
    with pytest.raises(NonFiniteLogitsError, match="target logits at the end of the prompt contain NaN"):
        GENERATORS[which](m).generate(PROMPT, SAMPLED, STOP)


@pytest.mark.parametrize("which", list(GENERATORS))
def test_inf_logits(which):
    m = poison_logits(model(), token=3, value=float("inf"))
    with pytest.raises(NonFiniteLogitsError, match=r"NaN/\+inf"):
        GENERATORS[which](m).generate(PROMPT, SAMPLED, STOP)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("which", list(GENERATORS))
def test_non_finite_logits_after_the_prompt(which, value):
    """Logits that go bad after the prefill are caught at the next target forward (tree or one-token step)."""
    m = poison_logits(model(), token=3, value=value, after_calls=1)
    where = "during a tree forward" if which == "speculative" else "contain NaN"
    with pytest.raises(NonFiniteLogitsError, match=where):
        GENERATORS[which](m).generate(PROMPT, SAMPLED, StopCondition(max_new_tokens=8))


@pytest.mark.parametrize("which", list(GENERATORS))
def test_all_minus_inf_logits(which):
    m = poison_logits(model(), token=None, value=float("-inf"))
    with pytest.raises(NonFiniteLogitsError, match="all -inf row"):
        GENERATORS[which](m).generate(PROMPT, SAMPLED, STOP)


@pytest.mark.parametrize("which", list(GENERATORS))
def test_some_minus_inf_logits_are_fine(which):
    """Not an error: a token with logit -inf is masked out (probability 0) and never emitted."""
    m = poison_logits(model(), token=3, value=float("-inf"))
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        tokens = GENERATORS[which](m).generate(PROMPT, SamplingParams(temperature=1.5), STOP, g).tokens
        assert len(tokens) == STOP.max_new_tokens and 3 not in tokens


# ---------------------------------------------------------------------------------------------------- prompt
@pytest.mark.parametrize("which", list(GENERATORS))
def test_empty_prompt(which):
    with pytest.raises(EmptyPromptError, match="prompt must be a non-empty 1-D tensor of token ids, got \\(0,\\)"):
        GENERATORS[which](model()).generate(torch.zeros(0, dtype=torch.long), SAMPLED, STOP)


@pytest.mark.parametrize("which", list(GENERATORS))
def test_prompt_not_token_ids(which):
    gen = GENERATORS[which](model())
    with pytest.raises(ValueError, match=r"prompt token ids must be in \[0, 8\).*got ids from 1 to 9"):
        gen.generate(torch.tensor([1, 9, 2]), SAMPLED, STOP)
    with pytest.raises(ValueError, match=r"got ids from -1 to 2"):
        gen.generate(torch.tensor([1, -1, 2]), SAMPLED, STOP)
    with pytest.raises(TypeError, match="prompt must hold integer token ids, got dtype torch.float32"):
        gen.generate(torch.tensor([1.0, 2.0]), SAMPLED, STOP)


def test_max_new_tokens_below_one():
    for n in (0, -3, 2.5):
        with pytest.raises(ValueError, match=f"max_new_tokens must be an integer >= 1 \\(or None\\), got {n}"):
            StopCondition(max_new_tokens=n)


@pytest.mark.parametrize("which", list(GENERATORS))
def test_prompt_list_not_integers(which):
    """Lists and arrays are checked like tensors: floats or bools are not silently truncated to ids."""
    gen = GENERATORS[which](model())
    for bad, dtype in (([1.7, 2.9, 3.2], "float"), ([True, False], "bool"), (np.array([1.5, 2.0]), "float64")):
        with pytest.raises(TypeError, match=f"prompt must hold integer token ids, got dtype torch.{dtype}"):
            gen.generate(bad, SAMPLED, STOP)
    # negative control: integer lists, arrays and iterators are prompts (an iterator is read once)
    for good in ([1, 2, 3], np.array([1, 2, 3]), iter([1, 2, 3])):
        assert gen.generate(good, None, STOP).prompt == [1, 2, 3]


@pytest.mark.parametrize("which", list(GENERATORS))
def test_padded_prompt(which):
    """A tokenizer's padded encoding is refused: the pad ids would be read as part of the prompt."""
    gen = GENERATORS[which](model())
    padded = {"input_ids": torch.tensor([[0, 0, 1, 2, 3]]), "attention_mask": torch.tensor([[0, 0, 1, 1, 1]])}
    with pytest.raises(ValueError, match="attention_mask has zeros \\(padding\\)"):
        gen.generate(padded, None, STOP)
    unpadded = {"input_ids": torch.tensor([[1, 2, 3]]), "attention_mask": torch.tensor([[1, 1, 1]])}
    assert gen.generate(unpadded, None, STOP).tokens == gen.generate([1, 2, 3], None, STOP).tokens


def test_stop_condition_takes_one_id_or_string_as_one():
    """One EOS id or one stop string is a tuple of one (as transformers' generate takes them), not a sequence of
    characters (which stopped at any "a" or "b") or nothing (``eos_token_ids=0`` never stopped)."""
    stop = StopCondition(eos_token_ids=0, stop_strings="ab", decode=lambda ids: "".join("ab"[i % 2] for i in ids))
    assert stop.eos_token_ids == (0,) and stop.stop_strings == ("ab",)
    assert stop.check([5, 0]) == "eos"
    assert stop.check([3]) is None and stop.check([3, 2]) is None  # "b", "ba": a character alone does not stop
    assert stop.check([3, 2, 3]) == "stop"  # "bab"
    for bad in ({"eos_token_ids": [1.5]}, {"stop_strings": ["", "x"], "decode": str}):
        with pytest.raises(TypeError):
            StopCondition(**bad)


@pytest.mark.parametrize("which", list(GENERATORS))
def test_sampling_and_stop_of_the_wrong_type(which):
    """A dict or a temperature in place of SamplingParams, or a token budget in place of a StopCondition, is named
    (it failed deep in the loop with an AttributeError)."""
    gen = GENERATORS[which](model())
    for sampling in ({"temperature": 1.0}, 0.7):
        with pytest.raises(TypeError, match="sampling must be a SamplingParams"):
            gen.generate(PROMPT, sampling, STOP)
    with pytest.raises(TypeError, match="stop must be a StopCondition"):
        gen.generate(PROMPT, None, 4)


@pytest.mark.parametrize("which", list(GENERATORS))
def test_a_target_serves_one_stream_at_a_time(which):
    """A stream resumed after another generation (or a direct prefill) used its target raises, instead of decoding
    on from the other sequence's cache (what it did: silently wrong tokens). Negative control: the same stream, not
    interrupted, gives generate's tokens."""
    gen = GENERATORS[which](model())
    stop = StopCondition(max_new_tokens=12)
    whole = gen.generate(PROMPT, None, stop).tokens
    assert list(gen.stream(PROMPT, None, stop)) == whole
    for interrupt in (lambda: gen.generate([4, 5, 6], None, stop), lambda: gen.target.prefill(torch.tensor([4, 5]))):
        stream = gen.stream(PROMPT, None, stop)
        first = [next(stream) for _ in range(2)]
        assert first == whole[:2]
        interrupt()
        with pytest.raises(TargetTakenError, match="one stream at a time"):
            list(stream)


@pytest.mark.parametrize("which", list(GENERATORS))
def test_tiny_temperature_is_greedy(which):
    """T -> 0 is the argmax: a temperature so small that logits / T overflow float32 (1e-40) gives the greedy
    tokens, not NaN probabilities sampled as the last token id. The control shows the overflow it guards against."""
    logits = torch.tensor([20.0, -3.0, 5.0])
    assert torch.softmax(logits / 1e-40, -1).isnan().all()  # the naive transform
    gen = GENERATORS[which](model())
    tiny = gen.generate(PROMPT, SamplingParams(temperature=1e-40, seed=0), STOP).tokens
    assert tiny == gen.generate(PROMPT, None, STOP).tokens


@pytest.mark.parametrize("max_len", [0, -5, 1, 10.5, True])
def test_target_max_len(max_len):
    with pytest.raises(ValueError, match="max_len must be an integer >= 2"):
        HFTarget(model(), max_len=max_len)


def test_model_on_meta_device():
    with torch.device("meta"):
        m = model()
    with pytest.raises(UnsupportedModelError, match="meta device"):
        HFTarget(m, max_len=MAX_LEN)


def test_head_on_another_device_than_the_target():
    """The 2026-11-30 GPU run's test built its head on the CPU beside a CUDA target: the first draft step failed deep
    in a tree policy. The meta device stands in for the GPU."""
    target = model()
    head = random_head("eagle3", target).to("meta")
    with pytest.raises(ValueError, match="head on meta, target on cpu: move the head first"):
        Eagle3Drafter(head, target, MAX_LEN)


# ------------------------------------------------------------------------------------- verifier out of domain
def test_stochastic_tree_into_multiround_verifier():
    gen = speculative(model(), policy="stochastic", verifier=MultiRoundVerifier())
    with pytest.raises(ValueError, match="MultiRoundVerifier is for deterministic candidates.*StochasticMultiRound"):
        gen.generate(PROMPT, SAMPLED, STOP)


def test_deterministic_tree_into_stochastic_verifier():
    gen = speculative(model(), policy="static", verifier=StochasticMultiRoundVerifier())
    with pytest.raises(
        ValueError, match=r"needs sampled candidates; the policy grows a tree of deterministic.*pin MultiRoundVerifier"
    ):
        gen.generate(PROMPT, SAMPLED, STOP)


def test_tree_into_chain_verifier():
    gen = speculative(model(), policy="static", verifier=ChainVerifier())
    with pytest.raises(ValueError, match="ChainVerifier verifies chains only.*pin MultiRoundVerifier"):
        gen.generate(PROMPT, SAMPLED, STOP)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_greedy_verifier_with_temperature(temperature):
    gen = speculative(model(), verifier=GreedyVerifier())
    with pytest.raises(
        ValueError,
        match=f"GreedyVerifier serves temperature 0 only \\(this call asks for {temperature:g}\\).*pin MultiRound",
    ):
        gen.generate(PROMPT, SamplingParams(temperature=temperature), STOP)

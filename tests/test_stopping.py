"""Stopping inside an accepted path: EOS, stop strings and the token budget end a cycle's tokens where vanilla would.

The drafter is an oracle (a small LM made of *all* the target's layers, so its draft is the target's own argmax):
at T=0 every draft token is accepted and each cycle emits ``depth + 1`` tokens, so the stop falls inside a cycle's
accepted path whenever its position is not the cycle's last. Each test asserts that the stop really was inside an
accepted path (cycles accepted drafts past the stop), then that the output equals vanilla decoding under the same
stop condition, with the same ``finish_reason``.
"""

from __future__ import annotations

import pytest
import torch

from specdec.drafters import SmallLMDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import StaticTreePolicy
from specdec.verify import GreedyVerifier

GREEDY = SamplingParams(temperature=0.0)
PROMPT = torch.tensor([3, 7, 1, 9, 4])
DEPTH = 3  # each cycle: 3 accepted drafts + the bonus token


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=24, hidden_size=32, num_layers=2, seed=11, logit_scale=2.0)


def oracle_generator(model) -> SpeculativeGenerator:
    drafter = SmallLMDrafter.from_target_layers(model, model.config.num_hidden_layers, max_len=64)
    return SpeculativeGenerator(HFTarget(model, max_len=64), drafter, StaticTreePolicy.chain(DEPTH), GreedyVerifier())


def free_run(model, n: int = 16) -> list[int]:
    return VanillaGenerator(HFTarget(model, max_len=64)).generate(PROMPT, GREEDY, StopCondition(n)).tokens


def compare(model, stop: StopCondition):
    vanilla = VanillaGenerator(HFTarget(model, max_len=64)).generate(PROMPT, GREEDY, stop)
    spec = oracle_generator(model).generate(PROMPT, GREEDY, stop)
    assert spec.tokens == vanilla.tokens
    assert spec.finish_reason == vanilla.finish_reason
    # The oracle is always accepted: the loop really had tokens past the stop in hand and dropped them.
    assert spec.metrics.accept_lengths and all(a == DEPTH for a in spec.metrics.accept_lengths)
    return spec


def test_oracle_drafts_are_accepted(model):
    result = oracle_generator(model).generate(PROMPT, GREEDY, StopCondition(max_new_tokens=13))
    assert result.tokens == free_run(model, 13)
    assert result.metrics.accept_lengths == [DEPTH] * 3  # 1 token from the prefill + 3 cycles of 4


@pytest.mark.parametrize("position", [2, 3, 6])
def test_eos_inside_an_accepted_path(model, position):
    free = free_run(model)
    eos = free[position]
    first = free.index(eos)  # the first occurrence is where both loops must stop
    spec = compare(model, StopCondition(max_new_tokens=16, eos_token_ids=[eos]))
    assert spec.finish_reason == "eos" and len(spec.tokens) == first + 1 and spec.tokens[-1] == eos
    assert (first % (DEPTH + 1)) != 0  # not the last token of a cycle (positions 0, 4, 8 are cycle ends)


def test_stop_string_inside_an_accepted_path(model):
    free = free_run(model)
    letters = "abcdefghijklmnopqrstuvwx"

    def decode(ids: list[int]) -> str:
        return "".join(letters[i] for i in ids)

    target = decode(free[5:7])  # a two-token stop string ending at position 6
    first_end = decode(free).index(target) + len(target)
    spec = compare(model, StopCondition(max_new_tokens=16, stop_strings=[target], decode=decode))
    assert spec.finish_reason == "stop" and len(spec.tokens) == first_end
    assert decode(spec.tokens).endswith(target)


@pytest.mark.parametrize("budget", [2, 3, 6, 7])  # 1 would come from the prefill alone
def test_budget_inside_an_accepted_path(model, budget):
    spec = compare(model, StopCondition(max_new_tokens=budget))
    assert spec.finish_reason == "length" and len(spec.tokens) == budget

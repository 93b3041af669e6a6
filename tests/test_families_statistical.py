"""Statistical, end to end, on a sliding-window model: the speculative loop emits the target's distribution.

Model: a tiny random Mistral-style decoder (vocab 6, 4 layers, every layer a sliding window of 3 tokens). The
prompt has 8 tokens, so the window cuts the context at every generated position and in every tree node. The drafter
is the target's first 2 layers, on a dynamic tree of 3 levels, with multi-round verification at T = 1. The first of
the 3 generated tokens comes from the prefill; the next two go through a tree forward whose mask must be
windowed. Reference: :func:`specdec.testing.e2e.exact_sequence_distribution`, which uses the model's own uncached
forwards and masks.

False-positive rate: 2 checks (the positive one and the negative control), each at ``ALPHA = 1e-3``. The positive
check fails with probability at most 1e-3 (chi-square approximation of the G statistic) over the seed. The seed is
fixed, so the outcome is deterministic. Negative control: the same loop with the window dropped from the tree
masks (every node sees the whole prefix) must fail at the same level.
"""

from __future__ import annotations

import pytest
import torch

from specdec.attention import AttentionLayout, additive_mask
from specdec.drafters import SmallLMDrafter
from specdec.generate import SpeculativeGenerator
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing.e2e import e2e_check, exact_sequence_distribution
from specdec.trees import DynamicTreePolicy
from specdec.verify import MultiRoundVerifier
from tests.factories import tiny_family

pytestmark = pytest.mark.heavy  # ~1 min: CI's second step (make test-heavy)

VOCAB, WINDOW, MAX_LEN = 6, 3, 32
PROMPT = torch.tensor([1, 4, 2, 5, 3, 0, 4, 1])
SAMPLING = SamplingParams(temperature=1.0)
N_SAMPLES = 800
ALPHA = 1e-3


def decoder(model) -> SpeculativeGenerator:
    target = HFTarget(model, max_len=MAX_LEN, weights="stock")
    drafter = SmallLMDrafter.from_target_layers(model, 2, MAX_LEN, weights="stock")
    return SpeculativeGenerator(
        target, drafter, DynamicTreePolicy(topk=2, depth=3, total_tokens=6), MultiRoundVerifier()
    )


@pytest.fixture(scope="module")
def model():
    return tiny_family("mistral", window=WINDOW, vocab=VOCAB, seed=2)


@pytest.fixture(scope="module")
def exact(model):
    return exact_sequence_distribution(model, PROMPT, SAMPLING, 3)


def test_sliding_window_model_is_lossless_at_t1(model, exact):
    report = e2e_check(
        decoder(model), model, PROMPT, SAMPLING, N_SAMPLES, 3, seed=0, alpha=ALPHA, exact=exact, controls=False
    )
    assert report.acceptances >= 0.05 * report.cycles and report.rejections >= 0.05 * report.cycles, report.summary()
    assert report.passed, report.summary()


def test_negative_control_without_the_window_is_caught(model, exact, monkeypatch):
    def unwindowed(self, allowed, keys, queries):
        return additive_mask(allowed, self.dtype)

    monkeypatch.setattr(AttentionLayout, "mask", unwindowed)
    report = e2e_check(
        decoder(model), model, PROMPT, SAMPLING, N_SAMPLES, 3, seed=0, alpha=ALPHA, exact=exact, controls=False
    )
    assert not report.passed, f"the window bug went unnoticed: {report.summary()}"

"""State carried across cycles: after every cycle the target's cache and the drafter's state equal a fresh start.

:func:`specdec.testing.invariants.check_cycle_invariants` runs a decoder for 24 tokens at T = 1 and compares, at every
cycle, the live target (logits, hidden states and the committed keys/values of every layer) and the live drafter
(draft logits of every expansion) with fresh ones fed every committed token from scratch. Each configuration asserts
that cycles following an accepted draft were checked, so compaction and the drafter's commit are exercised. Negative
controls: a target that compacts the wrong cache entries and an n-gram drafter that forgets the root token on commit
must both be caught. The statistical counterpart (the emitted distribution over several cycles) is
``tests/test_statistical_multicycle.py``.
"""

from __future__ import annotations

import pytest
import torch

from specdec.drafters import NGramDrafter
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing.broken import IndexOrderCompactionTarget
from specdec.testing.invariants import CycleInvariantError, check_cycle_invariants
from specdec.trees import StochasticTreePolicy
from specdec.verify import (
    BlockVerifier,
    GreedyVerifier,
    MultiRoundVerifier,
    StochasticMultiRoundVerifier,
    TraversalVerifier,
)
from tests.factories import make_drafter, make_policy

VOCAB = 8
MAX_LEN = 64
PROMPT = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
STOP = StopCondition(max_new_tokens=24, eos_token_ids=())
T1 = SamplingParams(temperature=1.0)
#: Drafters run fp32 here. The default CPU draft backend is int8 with activations quantized per call
#: (:class:`~specdec.backends.Int8Linear`), so its q depends on which rows share a forward: a drafter that ran
#: its pending pairs in one call and a fresh one that ran them in another differ by more than rounding. That is
#: lossless (the verifier sees the q that was sampled from) but not a state to compare.
EXACT_WEIGHTS = "packed"


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=3, seed=0, logit_scale=1.5)


def verifier_for(policy: str, sampling: SamplingParams):
    if sampling.greedy:
        return GreedyVerifier()
    return {
        "static": MultiRoundVerifier(),
        "dynamic": MultiRoundVerifier(),
        "chain": BlockVerifier(),
        "stochastic": StochasticMultiRoundVerifier(),
        "stochastic-traversal": TraversalVerifier(),
        "stochastic-chain": BlockVerifier(),
    }[policy]


def policy_for(kind: str):
    if kind == "stochastic-chain":
        return StochasticTreePolicy.chain(3)
    return make_policy("stochastic" if kind == "stochastic-traversal" else kind)


CASES = [
    ("ngram", "static", T1),
    ("ngram", "dynamic", T1),
    ("small-lm", "chain", T1),
    ("small-lm", "stochastic", T1),
    ("eagle1", "stochastic-traversal", T1),
    ("eagle1", "dynamic", SamplingParams(temperature=0.0)),
    ("eagle1-shortlist", "stochastic", T1),
    ("eagle3", "dynamic", T1),
    ("eagle3", "stochastic-chain", T1),
]


@pytest.mark.parametrize(
    ("drafter", "policy", "sampling"), CASES, ids=[f"{d}-{p}-T{s.temperature}" for d, p, s in CASES]
)
def test_state_after_every_cycle_equals_a_fresh_start(model, drafter, policy, sampling):
    """Every run's state equals a fresh start after every cycle; seeds are tried (3, 4, ...) until one run has at
    least two cycles after an acceptance (back-to-back compactions; the random tiny models accept rarely, and which
    seed gets there depends on the sampler's random stream)."""
    accept_lengths = []
    for seed in range(3, 11):
        decoder = SpeculativeGenerator(
            HFTarget(model, max_len=MAX_LEN),
            make_drafter(drafter, model, MAX_LEN, weights=EXACT_WEIGHTS),
            policy_for(policy),
            verifier_for(policy, sampling),
        )
        report = check_cycle_invariants(
            decoder,
            lambda: HFTarget(model, max_len=MAX_LEN),
            lambda: make_drafter(drafter, model, MAX_LEN, weights=EXACT_WEIGHTS),
            PROMPT,
            sampling,
            STOP,
            seed=seed,
        )
        assert len(report.result.tokens) == STOP.max_new_tokens
        assert report.target_checks == report.result.metrics.cycles >= 3
        assert report.draft_checks >= report.target_checks
        accept_lengths.append(report.result.metrics.accept_lengths)
        if report.cycles_after_acceptance >= 2:
            break
    assert report.cycles_after_acceptance >= 2, accept_lengths
    # The checks consume no randomness: the same seed without them emits the same tokens.
    plain = decoder.generate(PROMPT, sampling, STOP, torch.Generator().manual_seed(seed))
    assert plain.tokens == report.result.tokens


def test_a_compaction_bug_is_caught(model):
    """Keeping the first nodes in index order instead of the accepted path: caught at the first cycle where the
    accepted path leaves index order."""
    decoder = SpeculativeGenerator(
        IndexOrderCompactionTarget(model, max_len=MAX_LEN),
        make_drafter("eagle1", model, MAX_LEN, weights=EXACT_WEIGHTS),
        make_policy("stochastic"),
        StochasticMultiRoundVerifier(),
    )
    caught = []
    for seed in range(3, 11):  # the first seeds whose accepted paths leave index order (seed-dependent)
        try:
            check_cycle_invariants(
                decoder,
                lambda: HFTarget(model, max_len=MAX_LEN),
                lambda: make_drafter("eagle1", model, MAX_LEN, weights=EXACT_WEIGHTS),
                PROMPT,
                T1,
                STOP,
                seed=seed,
            )
        except CycleInvariantError as err:
            caught.append(str(err))
            break
    assert caught and "differ" in caught[0], "the compaction bug went unnoticed for seeds 3..10"


class _ForgetsTheRoot(NGramDrafter):
    """WRONG drafter: drops the root (the previous cycle's bonus token) from what it commits."""

    def commit(self, tokens, hidden):
        super().commit(tokens[1:], hidden)


def test_a_drafter_commit_bug_is_caught(model):
    def drafter():
        return _ForgetsTheRoot(vocab_size=VOCAB, num_candidates=4)

    decoder = SpeculativeGenerator(
        HFTarget(model, max_len=MAX_LEN), drafter(), make_policy("static"), MultiRoundVerifier()
    )
    with pytest.raises(CycleInvariantError, match="draft (logits|top-k)"):
        check_cycle_invariants(decoder, lambda: HFTarget(model, max_len=MAX_LEN), drafter, PROMPT, T1, STOP, seed=3)

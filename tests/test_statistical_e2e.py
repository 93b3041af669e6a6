"""Statistical, end to end: the whole speculative loop emits the target process's distribution.

What is compared: the joint distribution of the first 3 generated tokens (``V ** 3 = 216`` sequences) of
``SpeculativeGenerator.generate`` (prefill, drafter, tree policy, the target's tree forward through its KV cache,
verifier, commit, next cycle) against the exact distribution of the target process, enumerated with batched
uncached forwards of the target and ``warp`` with the same sampling settings at every step
(:mod:`specdec.testing.e2e`). Test: G-test (cells with expected count < 5 pooled).

Models: a tiny random Llama target (vocab 6, hidden 16, 3 layers so that EAGLE-3's default fused layers
``(2, 1, 0)`` exist, ``logit_scale=1.5``: the 3-token joint has perplexity about 6 / 22 / 51 at T = 0.5 / 1 / 1.5,
neither uniform nor one-hot). Drafters disagree with it: EAGLE-1/EAGLE-3 heads are random, the small LM is the
target's first layer only, the n-gram drafter copies from the repetitive prompt. The first token comes from the
prefill (plain sampling); every tree is 3 deep and each positive check asserts that at least ``MIN_SHARE`` of the
cycles accepted a draft token and at least as many rejected one, so tokens 2 and 3 go through verification.

Design (a covering design, not the full product, to fit the runtime budget): the 16 drafter x policy pairs
(static, chain, dynamic, stochastic), each once; temperature and warping are laid over that grid so that every
drafter and every policy meets every T in {0.5, 1, 1.5}, and each of the 4 warpings (off, top-k 3, top-p 0.9,
top-k 4 + top-p 0.9) exactly once, and every (T, warping) pair occurs (:func:`test_design_covers_every_level`).
Verifiers in their domain: deterministic trees -> ``MultiRoundVerifier``; the deterministic chain ->
``MultiRoundVerifier`` (2 drafters) and ``ChainVerifier`` (2 drafters); stochastic trees ->
``StochasticMultiRoundVerifier(max_children=2)``; plus ``ChainVerifier`` on a stochastic chain (2 drafters), the EAGLE-1
head drafting over a shortlist (half the vocabulary, q = 0 on the rest) on a stochastic tree, and one
``VanillaGenerator`` check of the reference computation itself, and ``BlockVerifier`` on a stochastic chain
(EAGLE-1 head) and a deterministic one (small LM), and a stochastic tree drawn sharper than the call's temperature
(``draft_temperature_ratio = 0.5``, the small LM, whose q is far from flat so that the ratio matters), and a
stochastic tree whose deeper levels are drawn only where a gate says so from the earlier draws (``stochastic-gated``,
:class:`ConfidentDrawsGate`): ``FAMILY = 24`` checks.

False-positive rate: one family, Bonferroni at family-wise ``ALPHA = 1e-3``: each check fails iff its p-value is
``<= ALPHA / FAMILY ~= 4.5e-5``, so a correct implementation fails this file with probability at most about 1e-3
(asymptotically, by the chi-square approximation of the G statistic) over the choice of seeds. All seeds are fixed
(one ``torch.Generator`` per configuration, seeded once and reused across its runs), so on a given platform the
outcome is deterministic: it passes or fails for ever.

Sample size and power: ``N_SAMPLES = 800`` runs per configuration, which leaves 4 to 28 cells (3 to 27 degrees of
freedom; fewest at T = 0.5 with top-p, where the target is nearly deterministic) after pooling. At the per-check
level the G-test then has power 0.9 against a deviation whose chi-square divergence
``sum (P_spec - P_target)^2 / P_target`` is at least 0.042 (3 df) to 0.074 (27 df), e.g. moving 5% of the mass
between two sequences of probability 0.05 (divergence 0.1). Any emitted sequence of target probability 0 fails at
once (p-value 0). Measured power: the negative controls at the end (realistic verifier bugs through the same loop,
same threshold, ``N_CONTROL = 400`` runs) are all detected, with p-values between about 1e-14 and 0.

Runtime: 1.5 to 2.5 minutes on one quiet CPU thread (``OMP_NUM_THREADS=1 pytest tests/test_statistical_e2e.py``),
up to 10 minutes on a busy 2-core machine. The README's ``make test`` runs the design checks, two configurations
(:data:`QUICK`: a deterministic and a stochastic tree, each with a warp) and one negative control; the rest, the
vanilla reference among them, is marked ``heavy`` and runs in CI's second step (``make test-heavy``). The
Bonferroni family stays the full design either way, so the level of each check does not depend on which step runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from specdec.budget import CostCurve
from specdec.generate import SpeculativeGenerator, VanillaGenerator
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams, warp
from specdec.target import HFTarget
from specdec.testing import E2EReport
from specdec.testing.broken import (
    IgnoresQVerifier,
    OneSidedWarpVerifier,
    OnlyZeroRejectedResidualVerifier,
    ResidualNotRenormalisedVerifier,
    StaleQVerifier,
    WrongTemperatureQVerifier,
)
from specdec.testing.e2e import e2e_check, exact_sequence_distribution
from specdec.trees import StochasticTreePolicy
from specdec.trees.level_gate import LevelGate
from specdec.verify import BlockVerifier, ChainVerifier, MultiRoundVerifier, StochasticMultiRoundVerifier
from tests.factories import SMALL_PATHS, make_drafter, make_policy

VOCAB = 6
N_TOKENS = 3
MAX_LEN = 32
PROMPT = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])  # repetitive, so the n-gram drafter proposes something
N_SAMPLES = 800
#: Runs per negative control (their effects are large).
N_CONTROL = 400
ALPHA = 1e-3
#: Minimum share of cycles with an acceptance, and with a rejection, in every positive configuration.
MIN_SHARE = 0.05

WARPS = {
    "off": {},
    "top-k": {"top_k": 3},
    "top-p": {"top_p": 0.9},
    "both": {"top_k": 4, "top_p": 0.9},
}


@dataclass(frozen=True)
class Config:
    drafter: str  # ngram | small-lm | eagle1 | eagle1-shortlist | eagle3 | vanilla
    policy: str  # static | chain | dynamic | stochastic | stochastic-chain (unused for vanilla)
    verifier: str  # multiround | chain | stochastic
    temperature: float
    warp: str
    seed: int

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, **WARPS[self.warp])

    @property
    def id(self) -> str:
        if self.drafter == "vanilla":
            return f"vanilla-T{self.temperature}-{self.warp}"
        return f"{self.drafter}-{self.policy}-{self.verifier}-T{self.temperature}-{self.warp}"


# (drafter, policy, verifier, T, warping): the covering design described in the module docstring.
_DESIGN = [
    ("ngram", "static", "multiround", 1.0, "off"),
    ("ngram", "chain", "multiround", 1.0, "top-k"),
    ("ngram", "dynamic", "multiround", 1.5, "top-p"),
    ("ngram", "stochastic", "stochastic", 0.5, "both"),
    ("small-lm", "static", "multiround", 0.5, "top-k"),
    ("small-lm", "chain", "chain", 1.5, "off"),
    ("small-lm", "dynamic", "multiround", 1.0, "both"),
    ("small-lm", "stochastic", "stochastic", 1.0, "top-p"),
    ("eagle1", "static", "multiround", 1.5, "both"),
    ("eagle1", "chain", "chain", 0.5, "top-p"),
    ("eagle1", "dynamic", "multiround", 1.0, "top-k"),
    ("eagle1", "stochastic", "stochastic", 1.0, "off"),
    ("eagle3", "static", "multiround", 1.0, "top-p"),
    ("eagle3", "chain", "multiround", 1.5, "both"),
    ("eagle3", "dynamic", "multiround", 0.5, "off"),
    ("eagle3", "stochastic", "stochastic", 1.5, "top-k"),
    ("ngram", "stochastic-chain", "chain", 1.0, "both"),
    ("eagle3", "stochastic-chain", "chain", 0.5, "top-k"),
    ("eagle1-shortlist", "stochastic", "stochastic", 1.5, "off"),
    ("small-lm", "stochastic-sharp", "stochastic", 1.0, "top-k"),
    ("eagle1", "stochastic-gated", "stochastic", 1.5, "top-p"),
    ("vanilla", "-", "-", 1.5, "top-p"),
    ("eagle1", "stochastic-chain", "block", 1.5, "off"),
    ("small-lm", "chain", "block", 1.0, "top-p"),
]
CONFIGS = [Config(*row, seed=1000 + i) for i, row in enumerate(_DESIGN)]
FAMILY = len(CONFIGS)
LEVEL = ALPHA / FAMILY


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=3, seed=0, logit_scale=1.5)


def widest_siblings(policy) -> int:
    """Most children of any node of a static or stochastic shape (the rounds a stochastic verifier needs)."""
    shape = getattr(policy, "shape", policy)
    return max(level.width for level in shape.levels)


class ConfidentDrawsGate(LevelGate):
    """Draws a level iff a node it would expand has path probability above 0.3: a rule of the earlier draws only
    (the contract of :class:`~specdec.trees.level_gate.LevelGate`), with no timings, so the runs are reproducible."""

    def __init__(self) -> None:
        super().__init__(CostCurve(sizes=(1,), seconds=(1.0,)))
        self.decisions: list[bool] = []

    def draws(self, tree, frontier, added) -> bool:
        super().draws(tree, frontier, added)  # keeps the frontier's values for expanded()
        self.decisions.append(bool(self._pi.max() > 0.3))
        return self.decisions[-1]


#: The draft temperature ratio of the "stochastic-sharp" policy: children drawn at half the call's temperature.
SHARP = 0.5


def build_policy(kind: str):
    if kind == "stochastic-chain":
        return StochasticTreePolicy.chain(3)
    if kind == "stochastic-sharp":
        return StochasticTreePolicy(SMALL_PATHS, draft_temperature_ratio=SHARP)
    if kind == "stochastic-gated":
        return StochasticTreePolicy(SMALL_PATHS, gate=ConfidentDrawsGate())
    return make_policy(kind)


def build_verifier(kind: str, policy):
    if kind == "multiround":
        return MultiRoundVerifier()
    if kind == "chain":
        return ChainVerifier()
    if kind == "block":
        return BlockVerifier()
    if kind == "stochastic":
        return StochasticMultiRoundVerifier(max_children=widest_siblings(policy))
    raise ValueError(kind)


def speculative(model, drafter: str, policy, verifier) -> SpeculativeGenerator:
    target = HFTarget(model, max_len=MAX_LEN)
    return SpeculativeGenerator(target, make_drafter(drafter, model, MAX_LEN), policy, verifier)


def run(model, decoder, sampling: SamplingParams, seed: int, n_samples: int = N_SAMPLES) -> E2EReport:
    exact = exact_sequence_distribution(model, PROMPT, sampling, N_TOKENS)
    return e2e_check(
        decoder, model, PROMPT, sampling, n_samples, N_TOKENS, seed, ALPHA, FAMILY, exact=exact, controls=False
    )


def test_design_covers_every_level():
    rows = [c for c in CONFIGS if c.drafter != "vanilla"]
    temps, warps = {0.5, 1.0, 1.5}, set(WARPS)
    assert {(c.drafter, c.policy) for c in rows} >= {
        (d, p) for d in ("ngram", "small-lm", "eagle1", "eagle3") for p in ("static", "chain", "dynamic", "stochastic")
    }
    assert {(c.policy, c.verifier) for c in rows} == {
        ("static", "multiround"),
        ("chain", "multiround"),
        ("chain", "chain"),
        ("dynamic", "multiround"),
        ("stochastic", "stochastic"),
        ("stochastic-sharp", "stochastic"),
        ("stochastic-gated", "stochastic"),
        ("stochastic-chain", "chain"),
        ("stochastic-chain", "block"),
        ("chain", "block"),
    }
    for d in ("ngram", "small-lm", "eagle1", "eagle3"):
        assert {c.temperature for c in rows if c.drafter == d} == temps
        assert {c.warp for c in rows if c.drafter == d} == warps
    for p in ("static", "chain", "dynamic", "stochastic"):
        assert {c.temperature for c in rows if c.policy == p} == temps
        assert {c.warp for c in rows if c.policy == p} == warps
    assert {(c.temperature, c.warp) for c in rows} == {(t, w) for t in temps for w in warps}


def test_exact_distribution_matches_sequential_forwards(model):
    """The batched enumeration equals the chain rule computed one sequence at a time."""
    sampling = SamplingParams(temperature=1.0, top_k=4, top_p=0.9)
    exact = exact_sequence_distribution(model, PROMPT, sampling, N_TOKENS)
    assert exact.shape == (VOCAB,) * N_TOKENS and abs(float(exact.sum()) - 1.0) < 1e-12
    for seq in [(0, 0, 0), (2, 5, 1), tuple(int(t) for t in torch.unravel_index(exact.argmax(), exact.shape))]:
        prob = 1.0
        with torch.no_grad():
            for j, tok in enumerate(seq):
                logits = model(torch.cat([PROMPT, torch.tensor(seq[:j], dtype=torch.long)])[None]).logits[0, -1]
                prob *= float(warp(logits, sampling, torch.float64)[tok])
        # float32 logits: a batched and a one-sequence forward may round differently (seen: 2.5e-8).
        assert abs(float(exact[seq]) - prob) < 1e-6


def test_exact_distribution_refuses_ambiguous_warps():
    """A top-k / top-p / argmax decision within rounding of flipping makes "exact" ill-defined: refused."""

    def constant(row):
        return lambda ids: torch.tensor(row).expand(ids.shape[0], -1)

    for row, sampling in [
        ([2.0, 1.0, 1.0, 0.0], SamplingParams(temperature=1.0, top_k=2)),  # k-th and (k+1)-th tied
        ([1.0, 1.0, 0.0, 0.0], SamplingParams(temperature=0.0)),  # argmax tied
        ([0.0, 0.0, -50.0, -50.0], SamplingParams(temperature=1.0, top_p=0.5)),  # the cut falls exactly at 0.5
    ]:
        with pytest.raises(ValueError, match="from flipping"):
            exact_sequence_distribution(constant(row), PROMPT, sampling, 2)
    fine = exact_sequence_distribution(
        constant([2.0, 1.0, 1.0, 0.0]), PROMPT, SamplingParams(top_k=3, temperature=1), 2
    )
    assert fine.shape == (4, 4) and abs(float(fine.sum()) - 1.0) < 1e-12 and float(fine[3].sum()) == 0.0


def test_chosen_verifier_rounds_match_the_policy_width(model):
    """A generator with no pinned verifier gives the stochastic verifier the widest sibling group, not N - 1 rounds,
    and the greedy verifier at T = 0 (the same generator object)."""
    from specdec.drafters import NGramDrafter
    from specdec.verify import GreedyVerifier

    target = HFTarget(model, max_len=MAX_LEN)
    gen = SpeculativeGenerator(target, NGramDrafter(VOCAB), make_policy("stochastic"))
    _, verifier = gen.parts_for(SamplingParams(temperature=1.0))
    assert isinstance(verifier, StochasticMultiRoundVerifier) and verifier.max_children == 2
    _, verifier = gen.parts_for(SamplingParams(temperature=0.0))
    assert isinstance(verifier, GreedyVerifier)


#: Configurations in the README's quick test command; the others are ``heavy`` (CI runs them as a second step).
QUICK = {
    "eagle3-dynamic-multiround-T0.5-off",
    "small-lm-stochastic-stochastic-T1.0-top-p",
}


@pytest.mark.parametrize(
    "config",
    [pytest.param(c, id=c.id, marks=() if c.id in QUICK else pytest.mark.heavy) for c in CONFIGS],
)
def test_loop_matches_target_distribution(model, config: Config):
    if config.drafter == "vanilla":
        decoder = VanillaGenerator(HFTarget(model, max_len=MAX_LEN))
    else:
        policy = build_policy(config.policy)
        decoder = speculative(model, config.drafter, policy, build_verifier(config.verifier, policy))
    report = run(model, decoder, config.sampling, config.seed)
    if config.policy == "stochastic-gated":  # the gate decided both ways, so both kinds of trees were verified
        assert {True, False} <= set(policy.gate.decisions), policy.gate.decisions[:20]
    if config.drafter != "vanilla":
        assert report.acceptances >= MIN_SHARE * report.cycles, report.summary()
        assert report.rejections >= MIN_SHARE * report.cycles, report.summary()
    assert report.passed, report.summary()


# ----------------------------------------------------------------------------------------------------------
# Negative controls: deliberately broken verifiers in the same loop, on configurations where the bug matters, must be
# detected at the same per-check level LEVEL (fixed seeds, so "detected" is deterministic).


def run_control(model, drafter: str, policy, verifier, sampling: SamplingParams, seed: int) -> E2EReport:
    report = run(model, speculative(model, drafter, policy, verifier), sampling, seed, N_CONTROL)
    assert report.acceptances > 0 and report.rejections > 0, report.summary()
    assert report.p_value <= LEVEL, f"broken verifier {verifier!r} NOT detected: {report.summary()}"
    return report


@pytest.mark.heavy
def test_detects_residual_not_renormalised(model):
    """Later siblings accepted with the raw p(x_k): needs >= 2 deterministic children per node (static tree) whose
    second candidates are likely under the target (the small LM's are)."""
    run_control(
        model, "small-lm", make_policy("static"), ResidualNotRenormalisedVerifier(), SamplingParams(temperature=1.0), 1
    )


def test_detects_q_ignored(model):
    """Sampled candidates accepted with p(x) instead of min(1, p/q) while the residual still subtracts q."""
    policy = make_policy("stochastic")
    verifier = IgnoresQVerifier(max_children=widest_siblings(policy))
    run_control(model, "eagle3", policy, verifier, SamplingParams(temperature=1.5), 2)


@pytest.mark.heavy
def test_detects_one_sided_warp(model):
    """Acceptance against softmax(logits), residual from warp(logits): temperature and top-k on one side only."""
    sampling = SamplingParams(temperature=0.5, top_k=3)
    run_control(model, "ngram", make_policy("static"), OneSidedWarpVerifier(), sampling, 3)


@pytest.mark.heavy
def test_detects_only_rejected_token_zeroed(model):
    """Stochastic residual that only zeroes the rejected token instead of norm(max(0, p - q)) (the old EAGLE bug)."""
    policy = make_policy("stochastic")
    verifier = OnlyZeroRejectedResidualVerifier(max_children=widest_siblings(policy))
    run_control(model, "eagle3", policy, verifier, SamplingParams(temperature=1.0), 4)


@pytest.mark.heavy
def test_detects_stale_q(model):
    """Siblings drawn without replacement but judged against the parent's original q (needs >= 2 sampled children)."""
    policy = make_policy("stochastic")
    verifier = StaleQVerifier(max_children=widest_siblings(policy))
    run_control(model, "eagle1", policy, verifier, SamplingParams(temperature=1.0), 5)


@pytest.mark.heavy
def test_detects_q_recorded_at_the_calls_temperature(model):
    """Children drawn at ``SHARP x T`` but judged against the q at ``T`` (a draft temperature ratio forgotten where q
    is recorded). The small LM's q is far from flat, so the two q differ (a random EAGLE head's nearly flat q hides
    the bug: measured p-value 0.30 at these settings)."""
    policy = build_policy("stochastic-sharp")
    verifier = WrongTemperatureQVerifier(max_children=widest_siblings(policy), exponent=SHARP)
    run_control(model, "small-lm", policy, verifier, SamplingParams(temperature=1.0), 6)

"""Statistical, over several cycles: six tokens, so accepted drafts are followed by further cycles.

``tests/test_statistical_e2e.py`` compares three tokens; the first comes from the prefill, so any cycle that accepts
a draft ends the comparison and the state carried past it (the target's cache compaction, the drafter's commit) never
matters there. Here the compared object is the joint distribution of the first ``N_TOKENS = 6`` tokens (``4 ** 6``
sequences) of a tiny random Llama (vocab 4, ``logit_scale=2``: perplexity about 33 over the six tokens at T = 1),
with trees of depth 2, so a run has about three cycles and every token after the first cycle depends on what was
committed before. Each positive configuration asserts at least two cycles per run on average and at least
``MIN_SHARE`` of cycles with an accepted draft. Exact reference and test as in :mod:`specdec.testing.e2e`.

Configurations: the sampled EAGLE-1 tree with multi-round and with traversal verification, the small LM's
deterministic chain with block verification, EAGLE-3's dynamic tree with multi-round verification (top-p), the
n-gram drafter's static tree (top-k), EAGLE-3's sampled chain with block verification, EAGLE-3 with a retrieval chain
beside its sampled tree, EAGLE-3's sampled shape chosen per cycle from a menu (the root alone included), and EAGLE-3's
sampled tree shaped per cycle from its measured acceptance by draw rank: ``FAMILY = 9`` checks.

False-positive rate: Bonferroni at family-wise ``ALPHA = 1e-3`` (each check fails iff its p-value is
``<= ALPHA / FAMILY``), so a correct implementation fails this file with probability at most about 1e-3 over the
seeds; the seeds are fixed, so on a platform the outcome is deterministic.

Negative control (must fail, same threshold): :class:`~specdec.testing.broken.IndexOrderCompactionTarget`, a target
that keeps the cache entries of the first nodes in index order instead of the accepted path. It is invisible in
the three-token test and on chains; here it is caught with a p-value near 1e-150 at 800 runs (measured), and at
``N_CONTROL`` runs far below the level.

Runtime: the negative control runs in ``make test`` (about 30 s on a busy 2-core machine); the nine positive
configurations are marked ``heavy`` (``make test-heavy``, about a minute each on a busy machine). ``make test``
checks multi-cycle state with the deterministic invariants of ``tests/test_multicycle.py``.
"""

from __future__ import annotations

import pytest
import torch

from specdec.budget import CostCurve
from specdec.drafters import CompositeDrafter, RetrievalDrafter
from specdec.generate import SpeculativeGenerator
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing.broken import IndexOrderCompactionTarget, PointMassAsDrawVerifier
from specdec.testing.e2e import e2e_check, exact_sequence_distribution
from specdec.trees import (
    CompositeTreePolicy,
    DynamicTreePolicy,
    RankedSampledPolicy,
    SampledMenuPolicy,
    StaticTreePolicy,
    StochasticTreePolicy,
)
from specdec.verify import (
    BlockVerifier,
    MixedMultiRoundVerifier,
    MultiRoundVerifier,
    StochasticMultiRoundVerifier,
    TraversalVerifier,
)
from tests.factories import make_drafter

VOCAB = 4
N_TOKENS = 6
MAX_LEN = 32
PROMPT = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
N_SAMPLES = 600
N_CONTROL = 200
ALPHA = 1e-3
MIN_SHARE = 0.05
#: Depth-2 shape, two sampled children at the root and under its first child.
SHAPE = [(0,), (1,), (0, 0), (0, 1)]

CONFIGS = {
    "eagle1-stochastic-multiround-T1": ("eagle1", "stochastic", "stochastic", SamplingParams(temperature=1.0)),
    "eagle1-stochastic-traversal-T1-topk": (
        "eagle1",
        "stochastic",
        "traversal",
        SamplingParams(temperature=1.0, top_k=3),
    ),
    "small-lm-chain-block-T0.7": ("small-lm", "chain", "block", SamplingParams(temperature=0.7)),
    "eagle3-dynamic-multiround-T1-topp": (
        "eagle3",
        "dynamic",
        "multiround",
        SamplingParams(temperature=1.0, top_p=0.85),
    ),
    "ngram-static-multiround-T1.5-topk": ("ngram", "static", "multiround", SamplingParams(temperature=1.5, top_k=3)),
    "eagle3-stochastic-chain-block-T1": ("eagle3", "stochastic-chain", "block", SamplingParams(temperature=1.0)),
    "composite-mixed-T1": ("eagle3+retrieval", "composite", "mixed", SamplingParams(temperature=1.0)),
    "eagle3-menu-stochastic-T1": ("eagle3", "menu", "stochastic", SamplingParams(temperature=1.0)),
    "eagle3-ranked-stochastic-T1": ("eagle3", "ranked", "stochastic", SamplingParams(temperature=1.0)),
}
FAMILY = len(CONFIGS)
QUICK: set[str] = set()  # the invariant tests (tests/test_multicycle.py) cover multi-cycle state in `make test`


def policy(kind: str):
    return {
        "stochastic": lambda: StochasticTreePolicy(SHAPE),
        "chain": lambda: StaticTreePolicy.chain(2),
        "dynamic": lambda: DynamicTreePolicy(topk=2, depth=2, total_tokens=5),
        "static": lambda: StaticTreePolicy(SHAPE),
        "stochastic-chain": lambda: StochasticTreePolicy.chain(2),
        # EAGLE-3's sampled tree with a retrieval chain beside it wherever the context repeats (every node added)
        "composite": lambda: CompositeTreePolicy(StochasticTreePolicy(SHAPE), max_draft=2, min_prob=0.0),
        "menu": menu_policy,
        "ranked": ranked_policy,
    }[kind]()


def menu_policy() -> SampledMenuPolicy:
    """Shapes chosen per cycle: the root alone, one draw, two root draws and ``SHAPE``, with exploration every third
    cycle so that every shape is drawn often (made-up costs, no timing)."""
    policy = SampledMenuPolicy(CostCurve((1, 5), (1.0, 1.2)), ((), ((0,),), ((0,), (1,)), SHAPE), draft_seconds=0.05)
    policy.EXPLORE_EVERY = 3
    return policy


def ranked_policy() -> RankedSampledPolicy:
    """Shapes from measured acceptance by rank, up to ``SHAPE``'s size, depth and width, with exploration every third
    cycle so that the shapes change often (made-up costs, no timing)."""
    policy = RankedSampledPolicy(
        CostCurve((1, 5), (1.0, 1.2)), max_nodes=5, max_depth=2, max_width=2, draft_seconds=0.05
    )
    policy.EXPLORE_EVERY = 3
    return policy


def verifier(kind: str):
    return {
        "stochastic": lambda: StochasticMultiRoundVerifier(max_children=2),
        "multiround": MultiRoundVerifier,
        "traversal": TraversalVerifier,
        "block": BlockVerifier,
        "mixed": MixedMultiRoundVerifier,
        "point-mass-as-draw": PointMassAsDrawVerifier,
    }[kind]()


def drafter(kind: str, model):
    """``make_drafter``'s drafters, and ``"eagle3+retrieval"``: EAGLE-3 and a retrieval drafter in one composite."""
    if kind == "eagle3+retrieval":
        retrieval = RetrievalDrafter(VOCAB, max_draft=2, min_match=1)
        return CompositeDrafter(make_drafter("eagle3", model, MAX_LEN), [retrieval])
    return make_drafter(kind, model, MAX_LEN)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=3, seed=0, logit_scale=2.0)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.heavy) for n in CONFIGS], ids=list(CONFIGS)
)
def test_several_cycles_emit_the_target_distribution(model, name):
    draft, tree, verify, sampling = CONFIGS[name]
    decoder = SpeculativeGenerator(
        HFTarget(model, max_len=MAX_LEN), drafter(draft, model), policy(tree), verifier(verify)
    )
    seed = 2000 + list(CONFIGS).index(name)
    report = e2e_check(decoder, model, PROMPT, sampling, N_SAMPLES, N_TOKENS, seed, ALPHA, FAMILY, controls=False)
    cycles = report.accept_lengths
    assert len(cycles) >= 2 * N_SAMPLES, "too few cycles per run: state carried between cycles is barely used"
    assert sum(a > 0 for a in cycles) >= MIN_SHARE * len(cycles), "drafts were (almost) never accepted"
    assert report.passed, f"{name}: p = {report.p_value:.3g} <= {report.level:.3g}"


def test_a_compaction_bug_is_caught(model):
    sampling = SamplingParams(temperature=1.0)
    decoder = SpeculativeGenerator(
        IndexOrderCompactionTarget(model, max_len=MAX_LEN),
        make_drafter("eagle1", model, MAX_LEN),
        policy("stochastic"),
        verifier("stochastic"),
    )
    exact = exact_sequence_distribution(model, PROMPT, sampling, N_TOKENS)
    report = e2e_check(
        decoder, model, PROMPT, sampling, N_CONTROL, N_TOKENS, 7, ALPHA, FAMILY, exact=exact, controls=False
    )
    assert not report.passed, f"the compaction bug went unnoticed (p = {report.p_value:.3g})"


def test_a_retrieval_child_judged_with_the_drafts_q_is_caught(model):
    """Negative control of the mixed configuration: the composite's retrieval point masses judged as draws from
    EAGLE's q (:class:`~specdec.testing.broken.PointMassAsDrawVerifier`), same trees, same level."""
    sampling = SamplingParams(temperature=1.0)
    decoder = SpeculativeGenerator(
        HFTarget(model, max_len=MAX_LEN),
        drafter("eagle3+retrieval", model),
        policy("composite"),
        verifier("point-mass-as-draw"),
    )
    exact = exact_sequence_distribution(model, PROMPT, sampling, N_TOKENS)
    report = e2e_check(
        decoder, model, PROMPT, sampling, N_CONTROL, N_TOKENS, 8, ALPHA, FAMILY, exact=exact, controls=False
    )
    assert not report.passed, f"a point mass judged as a draw went unnoticed (p = {report.p_value:.3g})"

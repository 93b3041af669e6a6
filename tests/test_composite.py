"""Composite drafting: EAGLE's tree and a retrieval drafter's continuation in one tree.

Greedy output equals vanilla; at T > 0 the trees are mixed (draws beside point masses) and the generator picks the
mixed verifier; parts that cannot serve the target are refused, by name, when the composite is built. The
distribution proofs are in ``tests/test_verify_mixed.py`` (exact, one cycle) and
``tests/test_statistical_multicycle.py`` (several cycles, mixed trees).
"""

from __future__ import annotations

import pytest
import torch

from specdec import (
    ByTemperature,
    CompositeDrafter,
    CompositeTreePolicy,
    DynamicTreePolicy,
    HFTarget,
    RetrievalDrafter,
    SamplingParams,
    SpeculativeGenerator,
    StochasticTreePolicy,
    StopCondition,
    VanillaGenerator,
    VocabMismatchError,
)
from specdec.interfaces import UnservableDrafterError
from specdec.models import tiny_llama
from specdec.verify import MixedMultiRoundVerifier
from tests.factories import make_drafter

VOCAB = 16
PROMPT = torch.tensor([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2])
STOP = StopCondition(max_new_tokens=40, eos_token_ids=())


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=4, seed=3)  # its greedy text loops


def composite(model, base, min_prob: float = 0.0, max_total: int | None = None) -> SpeculativeGenerator:
    target = HFTarget(model, max_len=96)
    eagle = make_drafter("eagle3", model, 96)
    drafter = CompositeDrafter.for_target(target, eagle, [RetrievalDrafter(VOCAB, max_draft=4, min_match=1)])
    policy = CompositeTreePolicy(base, max_draft=4, min_prob=min_prob, max_total=max_total)
    return SpeculativeGenerator(target, drafter, policy)


def test_greedy_composite_equals_vanilla_and_uses_both_drafters(model):
    gen = composite(model, DynamicTreePolicy(topk=2, depth=2, total_tokens=5))
    added = []
    policy = gen.policy
    real_grow = policy.grow

    def grow(*args, **kwargs):
        tree = real_grow(*args, **kwargs)
        added.append(policy.last_added)
        return tree

    policy.grow = grow
    out = gen.generate(PROMPT, SamplingParams(), STOP)
    want = VanillaGenerator(HFTarget(model, max_len=96)).generate(PROMPT, SamplingParams(), STOP)
    assert out.tokens == want.tokens
    assert sum(added) > 0, "the retrieval drafter never added a node"
    assert max(out.metrics.accept_lengths) > 2, "no path deeper than the EAGLE tree was accepted"


def test_sampled_composite_grows_mixed_trees_for_the_mixed_verifier(model):
    shape = ((0,), (1,), (0, 0))
    gen = composite(
        model, ByTemperature(DynamicTreePolicy(topk=2, depth=2, total_tokens=5), StochasticTreePolicy(shape))
    )
    sampling = SamplingParams(temperature=1.0)
    policy, verifier = gen.parts_for(sampling)
    assert isinstance(verifier, MixedMultiRoundVerifier)
    trees = []
    real = policy.grow
    policy.grow = lambda *a, **k: trees.append(real(*a, **k)) or trees[-1]
    out = gen.generate(PROMPT, sampling, STOP)
    assert len(out.tokens) == STOP.max_new_tokens
    mixed = [t for t in trees if bool(t.point_mass.any())]
    assert mixed, "no cycle put a retrieval point mass beside the draws"
    for tree in mixed:  # the root's draws skip the point masses' first tokens: no token twice under the root
        root_kids = tree.tokens[tree.parents == 0].tolist()
        assert len(root_kids) == len(set(root_kids))
        assert torch.all(tree.q_dist[0, tree.tokens[(tree.parents == 0) & tree.point_mass]] == 0)


def test_parts_that_cannot_serve_the_target_are_refused_by_name(model):
    target = HFTarget(model, max_len=96)
    with pytest.raises(VocabMismatchError, match="RetrievalDrafter has a vocabulary of 99"):
        CompositeDrafter.for_target(target, None, [RetrievalDrafter(99)])
    eagle = make_drafter("eagle3", model, 96)
    small = tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=2, seed=5)
    with pytest.raises(UnservableDrafterError, match="Eagle3Drafter needs the hidden states of layers"):
        CompositeDrafter.for_target(HFTarget(small, max_len=96), eagle, [RetrievalDrafter(VOCAB)])
    with pytest.raises(UnservableDrafterError, match="no propose"):
        CompositeDrafter(eagle, [make_drafter("ngram", model, 96)])
    with pytest.raises(UnservableDrafterError, match="NGramDrafter proposes none"):
        SpeculativeGenerator(target, make_drafter("ngram", model, 96), CompositeTreePolicy(None)).generate(
            PROMPT, stop=STOP
        )


def test_a_retrieval_drafter_alone_fills_a_tree_of_proposals(model):
    """The composite policy reads proposals through the Drafter interface: a retrieval drafter needs no composite
    around it, and its greedy output is vanilla's."""
    target = HFTarget(model, max_len=96)
    alone = SpeculativeGenerator(target, RetrievalDrafter(VOCAB), CompositeTreePolicy(None)).generate(PROMPT, stop=STOP)
    assert alone.tokens == VanillaGenerator(target).generate(PROMPT, stop=STOP).tokens
    assert alone.metrics.tau > 1.0  # the repetitive prompt's continuations were accepted


def test_max_total_bounds_the_whole_tree(model):
    """``max_total`` counts the base tree and the continuations together (``MethodOptions.total_tokens`` for the
    composite): retrieval still adds nodes, never past the bound, and greedy output stays vanilla's."""
    gen = composite(model, DynamicTreePolicy(topk=2, depth=2, total_tokens=5), max_total=7)
    sizes = []
    policy = gen.policy
    real = policy.grow
    policy.grow = _recording(real, sizes)
    out = gen.generate(PROMPT, SamplingParams(), STOP)
    want = VanillaGenerator(HFTarget(model, max_len=96)).generate(PROMPT, SamplingParams(), STOP)
    assert out.tokens == want.tokens
    assert policy.max_nodes == 7 and max(sizes) == 7, sizes  # retrieval filled the room, and no more
    with pytest.raises(ValueError, match="max_total counts the root"):
        CompositeTreePolicy(None, max_total=1)


def _recording(grow, sizes):
    def recorded(*args, **kwargs):
        tree = grow(*args, **kwargs)
        sizes.append(tree.num_nodes)
        return tree

    return recorded


def test_the_loop_counts_generations_and_a_drafter_without_history_is_refused(model):
    """Drafter.generation is counted by the decoding loop (a drafter's own reset need not call the base's), and
    CompositeTreePolicy refuses by name a drafter that keeps no history (an EAGLE drafter outside a composite)."""
    target = HFTarget(model, max_len=96)
    policy = CompositeTreePolicy(DynamicTreePolicy(topk=2, depth=2, total_tokens=6))
    with pytest.raises(UnservableDrafterError, match="Eagle3Drafter keeps none"):
        SpeculativeGenerator(target, make_drafter("eagle3", model, 96), policy).generate(PROMPT, stop=STOP)
    eagle = make_drafter("eagle3", model, 96)  # its reset does not call Drafter.reset
    composite = CompositeDrafter(eagle, [RetrievalDrafter(VOCAB)])
    gen = SpeculativeGenerator(target, composite, policy)
    for n in (1, 2):
        gen.generate(PROMPT, stop=STOP)
        assert composite.generation == n

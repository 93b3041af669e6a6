"""Several prompts decoded together (:mod:`specdec.batched`): each row is the prompt decoded alone.

Proofs, each with a negative control that must fail:

* Logits: one batched forward of ragged trees gives every row the logits of its tree forwarded alone, for full,
  sliding-window and hybrid attention, across cycles whose rejected nodes leave gaps in a row's slots and after a
  compaction (control: a mask that lets a row see a rejected node's slot).
* Greedy: every row's tokens equal the same prompt decoded alone, token for token, for vanilla and three
  speculative pipelines, with rows of different prompt lengths finishing at different times and prompts waiting for
  a free row (control: the batch's sync handed to the rows one place off, as a peer credited each token to its
  neighbour, is caught; the rows' continuations differ by construction, so it must be).
* Stops: an EOS inside a multi-token accept ends that row exactly where decoding alone does; a row whose prompt and
  budget overflow the cache fails alone (:class:`BatchRowError`) while the others finish as alone.
* Law: at T > 0 each of 3 rows (different prompt lengths, temperatures, top-k and top-p) emits its own target law
  (G-test per row at a family-wise level of 1e-3, fixed seeds; control: the rotated sync fails it), also when the
  batch alternates speculative cycles and plain steps (:mod:`specdec.pace`), and when the one-sequence loop does
  (``generate(..., speculate=...)``, each prompt alone); control: a step that samples the untempered logits fails both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

import specdec.batched as batched
import specdec.cycle as cycle_phases
from specdec.batched import BatchRowError
from specdec.budget import CostCurve
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.interfaces import DraftTree
from specdec.models import tiny_llama
from specdec.pace import BATCH_SIZES, OWN, PACED, ROW_DECAY, STEEP, STEP, Always, Fixed, Pace, auto_pace
from specdec.rows import BatchRows, BatchUnsupportedError
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing.e2e import exact_sequence_distribution, sequence_index
from specdec.testing.stats import g_test
from specdec.trees import AdaptiveTreePolicy
from tests.factories import make_drafter, make_policy, tiny_family

VOCAB = 32
PROMPTS = [torch.tensor([1, 5, 9, 2]), torch.tensor([3, 3, 7, 1, 2, 8, 4, 4, 6]), torch.tensor([7, 2])]
STOP = StopCondition(max_new_tokens=14, eos_token_ids=())
PIPELINES = [("ngram", "static"), ("eagle3", "dynamic"), ("small-lm", "chain")]


class Alternate(Pace):
    """Speculates and steps in turn (a schedule the timings could produce), to prove both and the switch."""

    def choose(self) -> int:
        self.cycle += 1
        return OWN if self.cycle % 2 == 1 else STEP


class Rotate(Pace):
    """Own trees, a step, then trees resized to 2, 3 and 4 nodes in turn, from ``start``: every arm of a batch's
    pace (a law test's calls start at each arm in turn, so each arm runs first cycles too)."""

    def __init__(self, start: int = 0) -> None:
        super().__init__(sizes=(2, 3, 4))
        self.cycle = start

    def choose(self) -> int:
        self.cycle += 1
        return (OWN, STEP, 2, 3, 4)[self.cycle % 5]


def test_pace_warms_both_modes_then_runs_the_faster_and_explores():
    """Warm-up in order, then the faster mode; every 4th cycle explores: the other mode when it is within
    ``Pace.CLOSE`` of the best, else only every ``Pace.FAR_EVERY``-th exploring cycle."""
    for step_tokens, explored in [(7.5, [8, 12, 16]), (4, [16])]:  # steps close to speculation's 8 tokens, or far
        pace = Pace(explore_every=4, warm=2)
        chosen = []
        for _ in range(16):
            arm = pace.choose()
            chosen.append(arm)
            pace.record(arm, tokens=8 if arm == OWN else step_tokens, seconds=1.0)
        assert chosen[:4] == [OWN, OWN, STEP, STEP]
        assert chosen[4:] == [STEP if c in explored else OWN for c in range(5, 17)]
    pace = Pace(explore_every=4, warm=2)
    for _ in range(12):
        arm = pace.choose()
        pace.record(arm, tokens=2 if arm == OWN else 4, seconds=1.0)  # steps faster
    assert pace.rate(STEP) > pace.rate(OWN)
    assert pace.choose() == STEP  # cycle 13: not an exploring one, so the faster mode
    runs = {a: pace.runs[a] for a in (OWN, STEP)}  # the totals are undecayed: every cycle's tokens and seconds
    assert pace.totals == {OWN: [runs[OWN], 2 * runs[OWN], runs[OWN]], STEP: [runs[STEP], 4 * runs[STEP], runs[STEP]]}
    with pytest.raises(ValueError, match="explore_every"):
        Pace(explore_every=1)


def test_pace_finds_the_best_tree_size_and_explores_the_stalest_arm():
    """Five arms: each warmed in order, then the fastest (size 3 here); an exploring cycle (every 4th) runs the
    stalest close arm (size 4), every ``FAR_EVERY``-th one the stalest of all; a size no row takes is dropped, and
    bad sizes are refused."""
    pace = Pace(explore_every=4, warm=1, sizes=(2, 3, 4))
    tokens = {OWN: 4, 2: 5, 3: 7, 4: 6.5, STEP: 3}
    chosen = []
    for _ in range(29):
        arm = pace.choose()
        chosen.append(arm)
        pace.record(arm, tokens=tokens[arm], seconds=1.0)
    assert chosen[:5] == [OWN, 2, 3, 4, STEP]
    explored = [chosen[c - 1] for c in range(8, 30, 4)]  # cycles 8, 12, ... 28
    assert explored == [4, 4, OWN, 4, 4, 2]
    assert all(a == 3 for c, a in enumerate(chosen[5:], start=6) if c % 4)
    pace.drop(3)
    assert pace.arms == [OWN, 2, 4, STEP] and pace.choose() == 4
    for bad in [(1,), (2, 2), (True,)]:
        with pytest.raises(ValueError, match="sizes"):
            Pace(sizes=bad)
    with pytest.raises(ValueError, match="stay"):
        pace.drop(STEP)


def test_a_size_no_policy_takes_is_dropped_and_the_cycle_speculates():
    """``Pace.arm_for``: a chosen size that ``fits`` refuses is dropped from the arms and the cycle runs the own
    trees; sizes that fit, steps and own trees pass through; ``auto_pace`` tries every size, remembering longer for
    one sequence than for a batch."""
    pace = Fixed(3)
    assert pace.arm_for(lambda m: m != 3) == OWN and pace.arms == [OWN, STEP]
    assert Fixed(2).arm_for(lambda m: True) == 2
    assert Fixed(STEP).arm_for(lambda m: False) == STEP
    one, batch = auto_pace(1, steep=True), auto_pace(4)
    assert one.arms == batch.arms == [OWN, *BATCH_SIZES, STEP]
    assert one.decay == ROW_DECAY > batch.decay
    assert auto_pace(1).arms == [OWN, STEP] and auto_pace(4, steep=True).arms == batch.arms


@pytest.mark.parametrize(("eight", "sizes", "paced"), [(1.2, (), False), (1.4, (), True), (STEEP, BATCH_SIZES, True)])
def test_one_sequence_tries_small_trees_only_where_its_forwards_are_steep(model, eight, sizes, paced):
    """``speculate="auto"`` for one sequence: the depth-1 sizes are arms only where the cost curve its policy holds
    prices 8 tokens at :data:`STEEP` steps or more (a flat curve: speculate or step); a policy with no curve: none.
    The default (None) paces a target from :data:`PACED` steps (1.4: paced without the sizes) and always speculates
    on a flatter one. The greedy tokens are the prompt's alone either way."""
    assert 1.2 < PACED < 1.4 < STEEP  # the three cases: flat, paced without the sizes, steep
    target = target_of(model)
    curve = CostCurve((1, 8), (1e-3, eight * 1e-3), {"device": "cpu"})  # as measured (a curve made up: not read)
    policy = AdaptiveTreePolicy(topk=3, depth=3, max_total=8, curve=curve)
    gen = SpeculativeGenerator(target, make_drafter("eagle3", model, target.max_len), policy)
    pace = gen.auto_pace()
    assert pace.arms == [OWN, *sizes, STEP]
    t1 = SamplingParams(temperature=1.0)
    default = gen._pace(None, 1, t1)
    assert isinstance(default, Always) if not paced else (type(default) is Pace and default.arms == pace.arms)
    assert gen._pace(None, 1, t1.model_copy(update={"seed": 5})) is default  # kept across calls per setting
    assert gen._pace(None, 1, SamplingParams(temperature=0.7)) is not default
    assert gen._pace("auto", 1, t1) is not gen._pace("auto", 1, t1)  # "auto": a pace for this call alone
    with pytest.raises(ValueError, match="speculate must be"):
        gen._pace("sometimes")
    assert (
        gen.generate(PROMPTS[0], None, STOP, speculate=pace).tokens
        == VanillaGenerator(target).generate(PROMPTS[0], None, STOP).tokens
    )
    no_curve = SpeculativeGenerator(target, make_drafter("eagle3", model, target.max_len), make_policy("dynamic"))
    assert no_curve.auto_pace().arms == [OWN, STEP]
    made_up = AdaptiveTreePolicy(topk=3, depth=3, max_total=8, curve=CostCurve((1, 8), (1e-3, 9e-3)))
    assert SpeculativeGenerator(target, make_drafter("eagle3", model, target.max_len), made_up).auto_pace().arms == [
        OWN,
        STEP,
    ]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=3, seed=1, logit_scale=2.0)


def target_of(model, max_len: int = 96) -> HFTarget:
    # row-invariant numerics: a row's logits do not depend on the rows or masked slots beside it (batched.py)
    return HFTarget(model, max_len=max_len, weights="packed", invariant=True)


def decoder(kind: str, model, target: HFTarget):
    if kind == "vanilla":
        return VanillaGenerator(target)
    if kind == "composite":  # EAGLE-3 dynamic at T = 0 / sampled at T > 0, with prompt-lookup continuations beside
        from specdec.drafters import CompositeDrafter, RetrievalDrafter
        from specdec.trees import ByTemperature, CompositeTreePolicy

        drafter = CompositeDrafter(make_drafter("eagle3", model, target.max_len), [RetrievalDrafter(target.vocab_size)])
        policy = CompositeTreePolicy(ByTemperature(make_policy("dynamic"), make_policy("stochastic")), min_prob=0.0)
        return SpeculativeGenerator(target, drafter, policy)
    drafter_kind, policy = kind.split("/")
    return SpeculativeGenerator(target, make_drafter(drafter_kind, model, target.max_len), make_policy(policy))


def chain_tree(tokens: list[int]) -> DraftTree:
    n = len(tokens)
    return DraftTree.from_parents(torch.tensor(tokens), torch.arange(n) - 1, n - 1)


def branching_tree(tokens: list[int]) -> DraftTree:
    parents = torch.tensor([-1, 0, 0, 1, 1, 2][: len(tokens)])
    return DraftTree.from_parents(torch.tensor(tokens), parents, 3)


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma3"])
def test_batched_forward_gives_each_row_its_own_logits(family):
    """Three cycles of ragged trees (and a compaction) against each row's own target, tree by tree."""
    model = tiny_family(family, window=6, vocab=VOCAB)
    batch_target = target_of(model, 64)
    rows = BatchRows(batch_target)
    alone = [target_of(model, 64) for _ in PROMPTS]
    for prompt, own in zip(PROMPTS, alone, strict=True):
        rows.join(prompt)
        own.prefill(prompt)
    g = torch.Generator().manual_seed(0)
    for cycle in range(4):
        if cycle == 3:
            before = rows.clock
            rows.compact()
            assert rows.clock == max(rows.lengths) < before  # the rejected nodes' slots are gone
        trees = [
            chain_tree(torch.randint(0, VOCAB, (1 + r,), generator=g).tolist())
            if (r + cycle) % 2
            else branching_tree(torch.randint(0, VOCAB, (6,), generator=g).tolist())
            for r in range(len(PROMPTS))
        ]
        steps = rows.forward(trees)
        for r, (tree, own) in enumerate(zip(trees, alone, strict=True)):
            expected = own.forward_tree(tree).logits
            assert torch.equal(steps[r].logits, expected), (family, cycle, r)  # bit for bit
            path = [0] if tree.num_nodes == 1 else [0, 1, 3][: min(3, tree.num_nodes)]
            if tree.max_depth == tree.num_nodes - 1:  # a chain: keep its first two nodes
                path = list(range(min(2, tree.num_nodes)))
            rows.commit(r, path)
            own.commit(torch.tensor(path), len(path))
        rows.advance()


def test_a_row_that_sees_a_rejected_slot_is_caught():
    """Negative control of the logits proof: marking one rejected node's slot as the row's changes its logits."""
    model = tiny_family("llama", vocab=VOCAB)
    target = HFTarget(model, max_len=64, weights="stock")
    rows, own = BatchRows(target), HFTarget(model, max_len=64, weights="stock")
    rows.join(PROMPTS[0])
    own.prefill(PROMPTS[0])
    tree = branching_tree([4, 5, 6, 7, 8, 9])
    rows.forward([tree])
    own.forward_tree(tree)
    rows.commit(0, [0, 1])
    rows.valid[0, rows.clock + 2] = True  # the planted bug: node 2 (rejected) stays visible
    own.commit(torch.tensor([0, 1]), 2)
    rows.advance()
    nxt = chain_tree([3, 4])
    assert not torch.allclose(rows.forward([nxt])[0].logits, own.forward_tree(nxt).logits, atol=1e-4)


@pytest.mark.parametrize("kind", ["vanilla", "composite"] + [f"{d}/{p}" for d, p in PIPELINES])
@pytest.mark.parametrize(
    ("max_batch", "pace"),
    [
        (None, "always"),
        (2, "always"),
        (None, "alternate"),
        (None, "rotate"),
        (None, "auto"),
        (1, "auto"),
        (1, "alternate"),
        (1, "rotate"),
    ],
)
def test_greedy_rows_equal_each_prompt_alone(model, kind, max_batch, pace):
    target = target_of(model)
    gen = decoder(kind, model, target)
    alone = [gen.generate(p, None, STOP).tokens for p in PROMPTS]
    assert len({tuple(a) for a in alone}) == len(PROMPTS)  # continuations differ: a row given another's would show
    stops = [STOP, StopCondition(max_new_tokens=5, eos_token_ids=()), STOP]  # row 1 finishes first
    speculate = {"alternate": Alternate, "rotate": Rotate}.get(pace, lambda: pace)()
    results = gen.generate_batch(PROMPTS, None, stops, max_batch=max_batch, speculate=speculate)
    assert [r.tokens for r in results] == [alone[0], alone[1][:5], alone[2]]
    assert [r.finish_reason for r in results] == ["length"] * 3
    if kind != "vanilla" and pace == "always":
        assert any(a > 0 for r in results for a in r.metrics.accept_lengths)  # multi-token accepts happened
    if kind != "vanilla" and pace == "alternate":  # both kinds of cycle ran
        assert {min(n, 2) for r in results for n in r.metrics.tree_sizes} == {1, 2}
    if kind in ("eagle3/dynamic", "composite") and pace == "rotate":  # resized: the root and 1-3 children (and
        assert {2, 3, 4} <= {n for r in results for n in r.metrics.tree_sizes}  # a composite's continuations)


def test_rows_credited_to_their_neighbours_are_caught(model, monkeypatch):
    """Negative control of the greedy proof: the batch's one sync handed out one row off."""
    target = target_of(model)
    gen = decoder("ngram/static", model, target)
    alone = [gen.generate(p, None, STOP).tokens for p in PROMPTS]
    sync = batched._one_sync
    monkeypatch.setattr(batched, "_one_sync", lambda packed: (lambda v: v[1:] + v[:1])(sync(packed)))
    got = [r.tokens for r in gen.generate_batch(PROMPTS, None, STOP)]
    assert got != alone


def test_eos_inside_a_multi_token_accept_ends_the_row_where_alone_does(model):
    target = target_of(model)
    gen = decoder("ngram/static", model, target)
    full = gen.generate(PROMPTS[0], None, STOP)
    # an EOS id first emitted inside a cycle that accepted draft tokens (not as that cycle's first token)
    cycle_of = []
    for c, a in enumerate(full.metrics.accept_lengths):
        cycle_of += [c] * (a + 1)
    inside = [i for i in range(2, len(full.tokens)) if i - 1 < len(cycle_of) and cycle_of[i - 1] == cycle_of[i - 2]]
    inside = [i for i in inside if full.tokens[i] not in full.tokens[:i]]
    assert inside, "no token first seen inside a multi-token accept; choose other prompts"
    eos = full.tokens[inside[0]]
    stop_eos = StopCondition(max_new_tokens=14, eos_token_ids=(eos,))
    alone = gen.generate(PROMPTS[0], None, stop_eos)
    results = gen.generate_batch(PROMPTS, None, [stop_eos, STOP, STOP])
    assert results[0].tokens == alone.tokens == full.tokens[: inside[0] + 1]
    assert results[0].finish_reason == "eos"
    assert [r.tokens for r in results[1:]] == [gen.generate(p, None, STOP).tokens for p in PROMPTS[1:]]


def test_a_row_that_overflows_the_cache_fails_alone(model):
    target = target_of(model, max_len=40)
    gen = decoder("ngram/static", model, target)
    long_prompt = torch.arange(30) % VOCAB
    prompts = [PROMPTS[0], long_prompt, PROMPTS[2]]
    with pytest.raises(BatchRowError, match="row 1: CacheFullError") as caught:
        gen.generate_batch(prompts, None, StopCondition(max_new_tokens=12, eos_token_ids=()))
    results = caught.value.results
    assert results[1].finish_reason == "error" and results[1].tokens == []
    stop = StopCondition(max_new_tokens=12, eos_token_ids=())
    assert [results[0].tokens, results[2].tokens] == [gen.generate(p, None, stop).tokens for p in prompts[::2]]


def test_bad_batch_input_is_refused_by_name(model):
    target = target_of(model)
    gen = VanillaGenerator(target)
    with pytest.raises(ValueError, match="non-empty list of prompts"):
        gen.generate_batch([])
    with pytest.raises(ValueError, match="non-empty list of prompts"):
        gen.generate_batch(PROMPTS[0])
    with pytest.raises(ValueError, match="2 sampling settings for 3 prompts"):
        gen.generate_batch(PROMPTS, [SamplingParams(), SamplingParams()])
    with pytest.raises(ValueError, match="max_batch"):
        gen.generate_batch(PROMPTS, max_batch=0)
    static = HFTarget(model, max_len=64, weights="stock", static_shapes=True)
    with pytest.raises(BatchUnsupportedError, match="static_shapes=False"):
        VanillaGenerator(static).generate_batch(PROMPTS)


# ------------------------------------------------------------------------------------------- the law of each row
LAW_VOCAB, LAW_TOKENS, ALPHA = 8, 3, 1e-3
LAW_PROMPTS = [torch.tensor([1, 2, 3, 1, 2]), torch.tensor([4, 4]), torch.tensor([5, 1, 6, 2, 7, 3, 0])]
LAW_SAMPLING = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(temperature=1.3, top_p=0.9),
]


def row_law_p_values(
    kind: str, n_runs: int, seed: int = 0, pace: Callable[[int], Pace] | None = None, max_batch: int | None = None
) -> list[float]:
    """Per row, the G-test p-value of ``n_runs`` batched calls' first tokens against that row's exact law
    (``max_batch=1``: each prompt through the one-sequence loop)."""
    model = tiny_llama(vocab_size=LAW_VOCAB, hidden_size=16, num_layers=2, seed=3, logit_scale=1.5)
    target = HFTarget(model, max_len=64, weights="packed")
    gen = decoder(kind, model, target)
    g = torch.Generator().manual_seed(seed)
    stop = StopCondition(max_new_tokens=LAW_TOKENS, eos_token_ids=())
    tokens: list[list[list[int]]] = [[] for _ in LAW_PROMPTS]
    for run in range(n_runs):
        seeds = torch.randint(0, 2**62, (len(LAW_PROMPTS),), generator=g).tolist()
        settings = [s.model_copy(update={"seed": x}) for s, x in zip(LAW_SAMPLING, seeds, strict=True)]
        speculate = "always" if pace is None else pace(run)
        results = gen.generate_batch(LAW_PROMPTS, settings, stop, speculate=speculate, max_batch=max_batch)
        for r, result in enumerate(results):
            tokens[r].append(result.tokens)
    p_values = []
    for prompt, sampling, rows in zip(LAW_PROMPTS, LAW_SAMPLING, tokens, strict=True):
        exact = exact_sequence_distribution(model, prompt, sampling, LAW_TOKENS)
        counts = torch.bincount(sequence_index(torch.tensor(rows), LAW_VOCAB), minlength=exact.numel())
        p_values.append(g_test(counts, exact))
    return p_values


@pytest.mark.parametrize(
    ("kind", "n_runs"),
    [
        pytest.param("eagle3/stochastic", 600, marks=pytest.mark.heavy),  # fast suite: the alternating test below
        pytest.param("vanilla", 600, marks=pytest.mark.heavy),
        pytest.param("ngram/static", 600, marks=pytest.mark.heavy),
        pytest.param("small-lm/stochastic", 600, marks=pytest.mark.heavy),
    ],
)
def test_each_row_emits_its_own_law(kind, n_runs):
    """Level: Bonferroni over the 3 rows of 3 pipelines (family-wise 1e-3 per 3 pipelines)."""
    p_values = row_law_p_values(kind, n_runs)
    print(kind, "p-values", p_values)
    assert min(p_values) > ALPHA / 9


def test_rotated_rows_fail_the_law(monkeypatch):
    """Negative control of the law: rows handed their neighbours' values emit another prompt's law."""
    sync = batched._one_sync
    monkeypatch.setattr(batched, "_one_sync", lambda packed: (lambda v: v[1:] + v[:1])(sync(packed)))
    p_values = row_law_p_values("vanilla", n_runs=150)
    print("rotated rows' p-values", p_values)
    assert min(p_values) < ALPHA / 9


# the batch (the fast suite's one positive law of the batched loop), and each prompt through the one-sequence loop
@pytest.mark.parametrize("max_batch", [None, pytest.param(1, marks=pytest.mark.heavy)])
def test_each_row_emits_its_own_law_when_the_loop_alternates_cycles_and_steps(max_batch):
    p_values = row_law_p_values("eagle3/stochastic", 300, pace=lambda _: Alternate(), max_batch=max_batch)
    print("alternating p-values", p_values)
    assert min(p_values) > ALPHA / 9


@pytest.mark.parametrize("n_runs", [150, pytest.param(600, marks=pytest.mark.heavy)])
@pytest.mark.parametrize("max_batch", [None, 1])
@pytest.mark.parametrize("kind", ["eagle3/dynamic", "eagle3/stochastic", "composite"])
def test_each_row_emits_its_own_law_with_trees_resized_for_the_batch(kind, max_batch, n_runs):
    """Every arm of a batch's pace in turn (own trees, a step, depth-1 trees of 2, 3 and 4 nodes; the sampled shape
    has 2 root children, so it runs its own tree for 4) at T > 0, in a batch and in the one-sequence loop
    (``max_batch=1``: ``speculate="auto"`` tries the sizes there too): deterministic candidates and draws verified
    exactly whatever their size (level as above; the power of this check is the rotated-rows control's, the same
    counts and test)."""
    p_values = row_law_p_values(kind, n_runs, pace=Rotate, max_batch=max_batch)  # run r starts at arm r % 5
    print("resized trees' p-values", p_values)
    assert min(p_values) > ALPHA / 9
    model = tiny_llama(vocab_size=LAW_VOCAB, hidden_size=16, num_layers=2, seed=3, logit_scale=1.5)
    gen = decoder(kind, model, HFTarget(model, max_len=64, weights="packed"))
    stop = StopCondition(max_new_tokens=12, eos_token_ids=())
    results = gen.generate_batch(LAW_PROMPTS, LAW_SAMPLING, stop, speculate=Rotate(), max_batch=max_batch)
    assert {2, 3} <= {n for r in results for n in r.metrics.tree_sizes}  # the resized trees ran


def test_resized_sampled_trees_that_misrecord_q_fail_the_law(monkeypatch):
    """Negative control of the resized arm: the sampled trees resized for the batch draw from the draft but record a
    uniform q, so the verifier accepts nearly every draw and the rows emit the draft's law."""
    from specdec.trees import StochasticTreePolicy

    real = StochasticTreePolicy.resized

    def misrecorded(self, total):
        policy = real(self, total)
        grow = policy.grow

        def uniform_q(*args, **kwargs):
            tree = grow(*args, **kwargs)
            return dataclasses.replace(tree, q_dist=torch.full_like(tree.q_dist, 1.0 / tree.q_dist.shape[-1]))

        policy.grow = uniform_q
        return policy

    monkeypatch.setattr(StochasticTreePolicy, "resized", misrecorded)
    p_values = row_law_p_values("eagle3/stochastic", 150, pace=lambda _: Fixed(3))
    print("misrecorded resized trees' p-values", p_values)
    assert min(p_values) < ALPHA / 9


def test_a_pace_that_answers_true_or_false_is_refused_by_name(model):
    """A pace subclass written for the former speculate-or-step choice (True / False) would be read as OWN / STEP:
    refused before any cycle runs, as is a size the pace does not have."""

    class Boolean(Pace):
        def choose(self):
            return True

    class Unknown(Pace):
        def choose(self):
            return 7

    gen = decoder("eagle3/dynamic", model, target_of(model))
    for pace in (Boolean(), Unknown()):
        with pytest.raises(ValueError, match="returned"):
            gen.generate_batch(PROMPTS, None, STOP, speculate=pace)
        with pytest.raises(ValueError, match="returned"):
            gen.generate(PROMPTS[0], None, STOP, speculate=pace)


@pytest.mark.heavy  # 7 s on an Intel Xeon (family 6 model 106); the fast suite's law control: rotated rows (above)
@pytest.mark.parametrize("max_batch", [None, 1])
def test_a_step_that_ignores_the_temperature_fails_the_law(monkeypatch, max_batch):
    """Negative control of the switch: the batch's plain step samples the untempered, unfiltered logits."""

    def untempered(row, drafted, step):
        token = torch.multinomial(torch.softmax(step.logits[0], -1), 1, generator=row.g)[0]
        drafted.accepted, drafted.bonus = torch.zeros(1, dtype=torch.long), token
        return torch.stack([token, torch.ones((), dtype=torch.long)])

    monkeypatch.setattr(cycle_phases, "judge_step", untempered)  # both loops' plain step (specdec.cycle.phases)
    p_values = row_law_p_values("eagle3/stochastic", 150, pace=lambda _: Alternate(), max_batch=max_batch)
    print("untempered steps' p-values", p_values)
    assert min(p_values) < ALPHA / 9


def test_stream_batch_yields_each_rows_tokens_as_decided(model):
    target = target_of(model, max_len=40)
    gen = decoder("eagle3/dynamic", model, target)
    stop = StopCondition(max_new_tokens=10, eos_token_ids=())
    prompts = [PROMPTS[0], torch.arange(33) % VOCAB, PROMPTS[2]]  # the middle one cannot fit: it fails alone
    events = list(gen.stream_batch(prompts, None, stop))
    assert [(e.row, type(e.error).__name__) for e in events if e.error is not None] == [(1, "CacheFullError")]
    for row in (0, 2):
        assert [e.token for e in events if e.row == row] == gen.generate(prompts[row], None, stop).tokens
    first_of = {row: next(i for i, e in enumerate(events) if e.row == row and e.token is not None) for row in (0, 2)}
    last_of = {row: max(i for i, e in enumerate(events) if e.row == row) for row in (0, 2)}
    assert first_of[2] < last_of[0]  # the rows interleave: row 2 starts before row 0 ends


def test_rows_with_trees_of_different_sizes_share_the_cache(model):
    """A greedy row with a large tree beside a sampled row near its cache limit (found in review: the shared clock
    writes the largest tree of any row, so the rows' cache holds max_len + that tree)."""
    from specdec.drafters import NGramDrafter
    from specdec.trees import ByTemperature, DynamicTreePolicy, StaticTreePolicy

    target = target_of(model, max_len=64)
    policy = ByTemperature(DynamicTreePolicy(topk=4, depth=4, total_tokens=30), StaticTreePolicy.chain(2))
    gen = SpeculativeGenerator(target, NGramDrafter(VOCAB, num_candidates=4), policy)
    prompts = [PROMPTS[0], torch.arange(40) % VOCAB]
    settings = [SamplingParams(), SamplingParams(temperature=0.8, seed=0)]
    results = gen.generate_batch(prompts, settings, StopCondition(eos_token_ids=()), speculate="always")
    assert [len(r.tokens) for r in results] == [64 - 4 - 30, 64 - 40 - 3]  # each row's own budget
    assert results[0].tokens == gen.generate(prompts[0], settings[0], StopCondition(eos_token_ids=())).tokens


def test_rows_that_all_fail_while_drafting_are_reported(model):
    """Every live row failing at its draft (a drafter's cache too small) ends the call with each row's error."""
    target = target_of(model)
    gen = SpeculativeGenerator(target, make_drafter("small-lm", model, 16), make_policy("chain"))
    with pytest.raises(BatchRowError) as caught:
        gen.generate_batch(PROMPTS[:2], None, StopCondition(max_new_tokens=30, eos_token_ids=()), speculate="always")
    results = caught.value.results
    assert [r.finish_reason for r in results] == ["error", "error"]
    assert all(r.tokens for r in results)  # what each row emitted before it failed is kept


def test_a_composite_fork_keeps_the_generation_count(model):
    from specdec.drafters import CompositeDrafter, RetrievalDrafter

    composite = CompositeDrafter(make_drafter("ngram", model, 64), [RetrievalDrafter(VOCAB)])
    composite.generation = 3
    assert composite.fork().generation == 3  # its policy's copy tells the fork's first generation from the parent's

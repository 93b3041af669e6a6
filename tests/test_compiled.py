"""Static shapes (:mod:`specdec.backends.compiled`): fixed-shape target forwards under ``torch.compile``.

What is shown here, on a tiny random Llama (inductor on the CPU, ``fullgraph=True``):

* the buckets: a tree of ``n`` nodes pads to the next bucket, never by more than the largest bucket;
* greedy exactness: vanilla and speculative decoding on the compiled target emit the eager stock target's tokens;
* no recompilation per step: after one warm-up generation, further generations (other prompts, other tree sizes
  in the same buckets) compile no new graph, and the graphs compiled are at most one per bucket;
* distribution (``heavy``: about 4 minutes on 2 busy cores): the sampled loop on the compiled target passes the
  end-to-end G-test of :mod:`specdec.testing.e2e` (family-wise false-positive rate ``ALPHA = 1e-3`` over the two
  drafters' checks, fixed seeds),
  and a verifier that ignores q, through the same compiled target, fails it (the negative control);
* a CUDA test, skipped without a GPU, that runs the same greedy check with CUDA graphs.

Compile time dominates (tens of seconds per bucket on 2 cores), so every test shares one compiled model per
process (``in_place=True``: the adapter runs that model object itself, not a copy; dynamo guards on the object).
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from specdec.backends import FastPathWarning
from specdec.backends.compiled import BUCKETS, bucket, compiled_graphs, freezes
from specdec.bench.syncs import HostSyncCounter
from specdec.drafters import NGramDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.testing.broken import IgnoresQVerifier
from specdec.testing.e2e import e2e_check
from specdec.trees import DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy
from specdec.verify import GreedyVerifier, StochasticMultiRoundVerifier
from tests.factories import SMALL_PATHS, make_drafter, tiny_family

# a silent fall back to eager must fail these tests (the fallback test expects its one warning explicitly)
pytestmark = pytest.mark.filterwarnings("error::specdec.backends.FastPathWarning")

GREEDY = SamplingParams(temperature=0.0)
MAX_LEN = 96
BUCKETS_HERE = (1, 4, 8)  # trees of up to 8 nodes: three graphs to compile
ALPHA, FAMILY = 1e-3, 2  # two positive end-to-end checks (one per drafter); the negative controls are outside it


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=6, hidden_size=16, num_layers=3, logit_scale=1.5)


def compiled_target(model) -> HFTarget:
    return HFTarget(model, max_len=MAX_LEN, static_shapes=True, buckets=BUCKETS_HERE, in_place=True)


def test_buckets() -> None:
    assert [bucket(n) for n in (1, 2, 4, 5, 16, 17, 32, 33, 64)] == [1, 4, 4, 8, 16, 32, 32, 64, 64]
    assert bucket(70) == 128 and max(BUCKETS) == 64 and bucket(70, (1, 32)) == 96
    assert bucket(3, (8, 2)) == 8
    with pytest.raises(ValueError, match="at least one token"):
        bucket(0)


def test_compile_backend_keeps_plain_linears(model) -> None:
    target = compiled_target(model)
    assert target.execution.label == "stock+static" and target.static and target.model is model
    assert all(type(m).__name__ != "PackedLinear" for m in model.modules())
    assert target.cache.max_len == MAX_LEN + max(BUCKETS_HERE)  # room for a padded tree


def test_greedy_exact_and_no_recompiles(model) -> None:
    """Compiled vanilla and speculative greedy equal the eager stock vanilla tokens; after the warm-up (at most one
    graph per bucket) no decoding step compiles a new graph."""
    stop = StopCondition(max_new_tokens=24, eos_token_ids=())
    prompts = [torch.randint(0, 6, (5 + s,), generator=torch.Generator().manual_seed(s)) for s in range(4)]
    eager = HFTarget(model, max_len=MAX_LEN, weights="stock")
    expected = [VanillaGenerator(eager).generate(p, GREEDY, stop).tokens for p in prompts]
    target = compiled_target(model)
    drafter = make_drafter("eagle3", model, MAX_LEN + 8)
    trees = [DynamicTreePolicy(topk=2, depth=3, total_tokens=8), StaticTreePolicy.chain(3)]  # buckets 8 and 4
    specs = [SpeculativeGenerator(target, drafter, policy, GreedyVerifier()) for policy in trees]

    before = compiled_graphs()
    seconds = target.warm_up()
    warm = compiled_graphs()
    assert set(seconds) == set(BUCKETS_HERE) and warm - before <= len(BUCKETS_HERE)
    sizes, accepted = set(), 0
    for p, want in zip(prompts, expected, strict=True):
        for spec in specs:
            result = spec.generate(p, GREEDY, stop)
            sizes.update(result.metrics.tree_sizes)
            accepted += sum(result.metrics.accept_lengths)
            assert result.tokens == want
        assert VanillaGenerator(target).generate(p, GREEDY, stop).tokens == want
    assert compiled_graphs() == warm, "a decoding step recompiled"
    assert target.runner.compiled, "the target fell back to eager"
    assert len({bucket(n, BUCKETS_HERE) for n in sizes}) >= 2  # the trees really spanned several buckets
    assert accepted > 0  # and commits moved accepted entries, not only bonus tokens


def test_stale_cache_entries_past_the_prefix_are_never_read(model, monkeypatch) -> None:
    """After every commit, every cache slot past the committed prefix is overwritten with large finite garbage (a
    commit of the root alone moves nothing, so a tree's stale nodes stay there): greedy speculative decoding on the
    compiled target still equals eager vanilla. The same garbage written into the prefix changes the tokens, so the
    check could see a slot that the masks let through."""
    stop = StopCondition(max_new_tokens=16, eos_token_ids=())
    prompts = [torch.randint(0, 6, (6 + s,), generator=torch.Generator().manual_seed(10 + s)) for s in range(2)]
    eager = HFTarget(model, max_len=MAX_LEN, weights="stock")
    expected = [VanillaGenerator(eager).generate(p, GREEDY, stop).tokens for p in prompts]
    target = compiled_target(model)
    spec = SpeculativeGenerator(target, make_drafter("eagle3", model, MAX_LEN + 8), StaticTreePolicy.chain(3))
    commit = HFTarget.commit

    def poison(inside_prefix: bool):
        def commit_then_poison(self, accepted: torch.Tensor, count: int) -> None:
            commit(self, accepted, count)
            span = slice(0, self.length - 1) if inside_prefix else slice(self.length, None)
            for layer in self.cache.layers:
                layer.keys[:, :, span] = 1e3
                layer.values[:, :, span] = -1e3

        return commit_then_poison

    monkeypatch.setattr(HFTarget, "commit", poison(inside_prefix=False))
    assert [spec.generate(p, GREEDY, stop).tokens for p in prompts] == expected
    monkeypatch.setattr(HFTarget, "commit", poison(inside_prefix=True))  # the control
    assert [spec.generate(p, GREEDY, stop).tokens for p in prompts] != expected


@pytest.mark.parametrize("kind", ["eagle3", "eagle1-shortlist", "small-lm"])
def test_compiled_drafter_steps_greedy_exact_and_no_recompiles(model, kind: str) -> None:
    """Drafters on the compile backend beside the compiled target: EAGLE (root step padded to a bucket, node steps
    over the whole buffer) and the small LM (catch-up and tree steps padded to buckets over a static cache), all
    compiled with fullgraph=True. The eager stock loop's tokens; the first pass compiles a graph per bucket and
    frontier width, a second pass none."""
    stop = StopCondition(max_new_tokens=24, eos_token_ids=())
    prompts = [torch.randint(0, 6, (5 + s,), generator=torch.Generator().manual_seed(s)) for s in range(3)]
    eager_target = HFTarget(model, max_len=MAX_LEN, weights="stock")
    target = compiled_target(model)
    target.warm_up()
    policy = DynamicTreePolicy(topk=2, depth=3, total_tokens=8)
    loops = {
        name: SpeculativeGenerator(t, make_drafter(kind, model, MAX_LEN + 8, **kw), policy, GreedyVerifier())
        for name, t, kw in (
            ("stock", eager_target, {"weights": "stock"}),
            ("compile", target, {"static_shapes": True}),
        )
    }
    assert loops["compile"].drafter.static
    before = compiled_graphs()
    for p in prompts:
        want = loops["stock"].generate(p, GREEDY, stop)
        got = loops["compile"].generate(p, GREEDY, stop)
        assert got.tokens == want.tokens and got.metrics.accept_lengths == want.metrics.accept_lengths
    first = compiled_graphs()
    assert 2 <= first - before <= len(BUCKETS_HERE) + 2  # root buckets + one node-step width (+ a buffer resize)
    for p in prompts:
        loops["compile"].generate(p, GREEDY, stop)
    assert compiled_graphs() == first, "a drafter step recompiled"
    if kind == "small-lm":  # its static cache was allocated outside any trace: fixed addresses for CUDA graphs,
        layer = loops["compile"].drafter.cache.layers[0]  # plain inputs where graphs freeze (no shared attributes)
        marked = getattr(layer.keys, "_dynamo_static_input_type", None) is not None
        assert marked == (not freezes(layer.keys.device))


@pytest.mark.heavy  # 20-27 s per drafter on 2 cores (two drafters' shapes compiled)
@pytest.mark.parametrize("kind", ["eagle3", "small-lm"])
def test_warm_up_compiles_every_shape_a_generation_runs(model, kind: str) -> None:
    """specdec.warm.warm_up compiles the target's buckets and the drafter's root-step buckets and node-step widths
    at the policy's tree capacity, so whole generations then compile nothing. Control: a fresh drafter of the same
    kind after the target's warm-up alone compiles graphs in the same generations (each phase's drafter has a
    buffer size no other test uses, so no graph of it was compiled before)."""
    from specdec.warm import warm_up

    target = compiled_target(model)
    stop = StopCondition(max_new_tokens=24, eos_token_ids=())

    def compiles(warm, max_len: int) -> int:  # the drafter's buffers, hence its shapes, this phase's own
        drafter = make_drafter(kind, model, max_len, static_shapes=True)
        policy = DynamicTreePolicy(topk=2, depth=3, total_tokens=8)
        gen = SpeculativeGenerator(target, drafter, policy, GreedyVerifier())
        warm(gen)
        assert target.length == 0  # the cache is left empty
        before = compiled_graphs()
        for s in range(3):
            gen.generate(torch.randint(0, 6, (5 + s,), generator=torch.Generator().manual_seed(s)), GREEDY, stop)
        return compiled_graphs() - before

    assert compiles(lambda gen: warm_up(gen, GREEDY), MAX_LEN + 12) == 0, "a shape was compiled inside a generation"
    assert compiles(lambda gen: gen.target.warm_up(), MAX_LEN + 16) >= 2  # control: the drafter's shapes compile later


def test_a_model_that_cannot_compile_falls_back_with_one_warning() -> None:
    """A graph break under ``fullgraph=True`` (here a forward pre-hook that forces one) is not a crash: one
    FastPathWarning, then the same static forward runs eagerly, with the eager tokens."""
    model = tiny_llama(vocab_size=16, hidden_size=16, num_layers=2, seed=4)
    stop = StopCondition(max_new_tokens=6, eos_token_ids=())
    prompt = torch.arange(5)
    eager = VanillaGenerator(HFTarget(model, max_len=MAX_LEN, weights="stock")).generate(prompt, GREEDY, stop)
    model.model.layers[0].register_forward_pre_hook(lambda *_: torch._dynamo.graph_break())
    target = HFTarget(model, max_len=MAX_LEN, static_shapes=True, buckets=(1,))
    with pytest.warns(FastPathWarning, match="cannot serve this model") as caught:
        assert VanillaGenerator(target).generate(prompt, GREEDY, stop).tokens == eager.tokens
    assert len([w for w in caught if issubclass(w.category, FastPathWarning)]) == 1


def test_a_small_lm_drafter_that_cannot_compile_falls_back_with_one_warning(model) -> None:
    """The same contract for the small-LM drafter: a forced graph break in its layer gives one FastPathWarning,
    then its static forwards run eagerly, and the speculative tokens stay the eager loop's."""
    small = tiny_llama(vocab_size=6, hidden_size=16, num_layers=3, logit_scale=1.5)
    small.load_state_dict(model.state_dict())
    stop = StopCondition(max_new_tokens=12, eos_token_ids=())
    prompt = torch.arange(5) % 6
    policy = DynamicTreePolicy(topk=2, depth=3, total_tokens=8)
    eager = SpeculativeGenerator(
        HFTarget(small, max_len=MAX_LEN, weights="stock"),
        make_drafter("small-lm", small, MAX_LEN + 8, weights="stock"),
        policy,
        GreedyVerifier(),
    ).generate(prompt, GREEDY, stop)
    drafter = make_drafter("small-lm", small, MAX_LEN + 8, static_shapes=True)
    drafter.model.model.layers[0].register_forward_pre_hook(lambda *_: torch._dynamo.graph_break())
    loop = SpeculativeGenerator(HFTarget(small, max_len=MAX_LEN, weights="stock"), drafter, policy, GreedyVerifier())
    with pytest.warns(FastPathWarning, match="cannot serve this model") as caught:
        assert loop.generate(prompt, GREEDY, stop).tokens == eager.tokens
    assert len([w for w in caught if issubclass(w.category, FastPathWarning)]) == 1
    assert not drafter.runner.compiled


def test_an_eagle_head_that_cannot_compile_falls_back_with_one_warning(model) -> None:
    """The same contract for an EAGLE head's compiled step (before, a compile error or dynamo's recompile limit under
    ``fullgraph=True`` ended the generation): one FastPathWarning, then the step runs eagerly, same tokens."""
    stop = StopCondition(max_new_tokens=12, eos_token_ids=())
    prompt = torch.arange(5) % 6
    want = VanillaGenerator(HFTarget(model, max_len=MAX_LEN, weights="stock")).generate(prompt, GREEDY, stop).tokens
    drafter = make_drafter("eagle3", model, MAX_LEN + 8, weights="stock", static_shapes=True)
    assert drafter.static
    drafter.head.midlayer.register_forward_pre_hook(lambda *_: torch._dynamo.graph_break())
    policy = DynamicTreePolicy(topk=2, depth=3, total_tokens=8)
    loop = SpeculativeGenerator(HFTarget(model, max_len=MAX_LEN, weights="stock"), drafter, policy, GreedyVerifier())
    with pytest.warns(FastPathWarning, match="cannot serve this model") as caught:
        assert loop.generate(prompt, GREEDY, stop).tokens == want
    assert len([w for w in caught if issubclass(w.category, FastPathWarning)]) == 1
    assert drafter._head_step is drafter._scored  # eager from then on


def test_host_sync_counter_sees_every_value_read() -> None:
    vector, scalar = torch.tensor([1, 2]), torch.tensor(3)
    item = torch.Tensor.item
    with HostSyncCounter() as syncs:
        vector.tolist(), int(scalar), scalar.item(), bool(scalar > 0), float(scalar), [0, 1, 2, 3][scalar]
        vector + scalar  # no read
    assert syncs.count == 6
    assert torch.Tensor.item is item  # methods restored


def test_one_host_sync_per_compiled_vanilla_step(model) -> None:
    """Each decoding step reads the device once (token and logits health together): the extra reads of a longer
    generation equal its extra steps."""
    target = compiled_target(model)
    target.warm_up()  # tracing reads tensors too
    gen = VanillaGenerator(target)
    prompt = torch.tensor([1, 2, 3, 4])
    counts = {}
    for n in (8, 20):
        stop = StopCondition(max_new_tokens=n, eos_token_ids=())
        with HostSyncCounter() as syncs:
            result = gen.generate(prompt, GREEDY, stop)
        counts[n] = (syncs.count, result.metrics.cycles)
    (short, short_steps), (long, long_steps) = counts[8], counts[20]
    assert long_steps - short_steps == 12 and long - short == 12


def test_one_host_sync_per_compiled_eagle3_cycle_with_the_deferred_budget(model, monkeypatch) -> None:
    """EAGLE-3 drafting an adaptive tree on the compiled target: with the deferred budget the tree size rides on
    the loop's sync, so each cycle reads the device once (the policy's first-cycle read happens in a warm-up). The
    contract checks take the path they take on a GPU (their early reads are a CPU's only: ``free_reads``)."""
    from specdec import tree_checks
    from specdec.budget import CostCurve

    monkeypatch.setattr(tree_checks, "free_reads", lambda device: False)
    from specdec.trees.adaptive import AdaptiveTreePolicy

    target = compiled_target(model)
    target.warm_up()
    curve = CostCurve((1, 8), (1.0, 1.2))
    policy = AdaptiveTreePolicy(topk=2, depth=3, max_total=8, curve=curve, draft_seconds=0.0, deferred=True)
    gen = SpeculativeGenerator(target, make_drafter("eagle3", model, MAX_LEN + 8), policy, GreedyVerifier())
    prompt = torch.tensor([1, 2, 3, 4])
    gen.generate(prompt, GREEDY, StopCondition(max_new_tokens=4, eos_token_ids=()))  # the policy's first own read
    counts = []
    for n in (8, 24):
        stop = StopCondition(max_new_tokens=n, eos_token_ids=())
        with HostSyncCounter() as syncs:
            result = gen.generate(prompt, GREEDY, stop)
        counts.append((syncs.count, result.metrics.cycles))
    (short, short_cycles), (long, long_cycles) = counts
    assert long_cycles > short_cycles and long - short == long_cycles - short_cycles


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["eagle3", "small-lm"])
def test_sampled_distribution_and_negative_control(model, kind: str) -> None:
    """The sampled loop on the compiled target emits the target's distribution; a verifier that ignores q does not
    (the configuration of ``tests/test_statistical_e2e.py::test_detects_q_ignored``, here on the compiled target
    with compiled EAGLE-3 or small-LM drafter steps)."""
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    policy = StochasticTreePolicy(SMALL_PATHS)  # 7 nodes: bucket 8
    drafter = make_drafter(kind, model, MAX_LEN + 8, static_shapes=True)  # compiled drafter steps too

    def loop(verifier) -> SpeculativeGenerator:
        return SpeculativeGenerator(compiled_target(model), drafter, policy, verifier)

    sampling = SamplingParams(temperature=1.0, top_k=4)
    good = loop(StochasticMultiRoundVerifier(max_children=2))
    report = e2e_check(good, model, prompt, sampling, 800, 3, seed=11, alpha=ALPHA, n_tests=FAMILY, controls=False)
    assert report.passed, report.summary()
    assert report.acceptances > 0 and report.rejections > 0, report.summary()
    hot = SamplingParams(temperature=1.5)
    control = e2e_check(
        loop(IgnoresQVerifier(max_children=2)), model, prompt, hot, 400, 3, seed=2, alpha=ALPHA, controls=False
    )
    assert control.acceptances > 0 and control.rejections > 0, control.summary()
    assert not control.passed, f"negative control NOT detected: {control.summary()}"


@pytest.mark.heavy
@pytest.mark.parametrize("family", ["mistral", "gemma3"])
def test_sliding_window_families_greedy_exact(family: str) -> None:
    """Sliding-window (mistral) and hybrid (gemma3) layouts: the window mask over the whole static capacity keeps
    compiled greedy decoding equal to eager stock decoding past the window (prompt 10 + 20 tokens, window 6)."""
    model = tiny_family(family, window=6)
    stop = StopCondition(max_new_tokens=20, eos_token_ids=())
    prompt = torch.arange(10) % 7
    eager = VanillaGenerator(HFTarget(model, max_len=MAX_LEN, weights="stock")).generate(prompt, GREEDY, stop)
    target = HFTarget(model, max_len=MAX_LEN, static_shapes=True, buckets=(4,))  # one graph: steps pad to 4 rows
    spec = SpeculativeGenerator(target, NGramDrafter(vocab_size=32), StaticTreePolicy.chain(3), GreedyVerifier())
    assert VanillaGenerator(target).generate(prompt, GREEDY, stop).tokens == eager.tokens
    assert spec.generate(prompt, GREEDY, stop).tokens == eager.tokens


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
def test_cuda_graphs_greedy_exact() -> None:
    model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=2, seed=2).cuda()
    stop = StopCondition(max_new_tokens=16, eos_token_ids=())
    prompt = torch.arange(6, device="cuda")
    eager = VanillaGenerator(HFTarget(model, max_len=MAX_LEN, weights="stock")).generate(prompt, GREEDY, stop)
    target = HFTarget(model, max_len=MAX_LEN, static_shapes=True, buckets=BUCKETS_HERE)
    skips = counters["inductor"]["cudagraph_skips"]
    assert VanillaGenerator(target).generate(prompt, GREEDY, stop).tokens == eager.tokens
    assert counters["inductor"]["cudagraph_skips"] == skips, "the target's step skipped CUDA graphs"
    for kind in ("eagle3", "small-lm"):  # CUDA-graph drafter steps too
        drafter = make_drafter(kind, model, MAX_LEN + 8, static_shapes=True)
        policy = DynamicTreePolicy(topk=2, depth=3, total_tokens=8)
        spec = SpeculativeGenerator(target, drafter, policy, GreedyVerifier())
        skips = counters["inductor"]["cudagraph_skips"]
        assert spec.generate(prompt, GREEDY, stop).tokens == eager.tokens, kind
        # every step captured: the first GPU run's head wrote unmarked buffers and ran without graphs
        assert counters["inductor"]["cudagraph_skips"] == skips, f"{kind}: a compiled step skipped CUDA graphs"

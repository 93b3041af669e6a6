"""Ahead-of-time packages (:mod:`specdec.backends.aot`): the static forward compiled once per machine and loaded.

What is shown here, on tiny random Llamas, with specdec's cache in a temporary folder:

* greedy exactness: vanilla and speculative decoding (an EAGLE-3 head, dynamic trees of any size up to 8 nodes,
  unpadded) on a target served by the package emit the eager stock target's tokens, and a tree forward's logits
  match the eager forward's;
* compiled once: the first target builds one package; a second target of the same model loads it (building is
  patched to fail, so a build would show), and ``static_shapes="auto"`` on a CPU finds it; a model with other
  weights gets another file name and stays eager under ``"auto"`` (the control: a key that ignored the weights would
  hand it the first model's package);
* several prompts at once on the package (the batch package, its batch dimension dynamic, built beside the first):
  every row's greedy tokens equal the prompt decoded alone, while the rows' caches grow; data generation's steps on
  it likewise;
* a package that cannot be loaded is not a crash: one FastPathWarning, then the same static forward eagerly, with
  the eager tokens, and the file is set aside (``"auto"`` then stays eager);
* ``"aot"`` off a CPU is refused by name.
"""

from __future__ import annotations

import pytest
import torch

from specdec import rows as rows_module
from specdec.backends import BackendError, FastPathWarning, resolve
from specdec.backends import aot as aot_module
from specdec.backends.aot import package_path
from specdec.backends.compiled import PackageError
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.rows import BatchUnsupportedError
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.train.continuous import Job, generate_continuous
from specdec.train.features import FeatureSpec
from specdec.tree import DraftTree
from specdec.trees import DynamicTreePolicy, StaticTreePolicy
from specdec.verify import GreedyVerifier
from tests.factories import make_drafter

pytestmark = pytest.mark.filterwarnings("error::specdec.backends.FastPathWarning")

GREEDY = SamplingParams(temperature=0.0)
MAX_LEN = 96
STOP = StopCondition(max_new_tokens=24, eos_token_ids=())


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """specdec's cache (packages among it) in a folder of this module's own, seen by ``static_shapes="auto"``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECDEC_CACHE", str(tmp_path_factory.mktemp("specdec-cache")))
        patch.setenv("SPECDEC_PACKAGES", "on")  # the suite hides packages from "auto" (conftest); here they count
        yield


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=6, hidden_size=16, num_layers=2, logit_scale=1.5)  # 2 layers: a faster build


@pytest.fixture(scope="module")
def built(model, private_cache) -> HFTarget:
    """The first target of ``model`` with ``"aot"``: builds the package at its first static forward."""
    target = HFTarget(model, max_len=MAX_LEN, static_shapes="aot")
    target.warm_up()
    return target


def prompts() -> list[torch.Tensor]:
    return [torch.randint(0, 6, (5 + s,), generator=torch.Generator().manual_seed(s)) for s in range(3)]


def test_package_target_is_greedy_exact(model, built) -> None:
    assert built.execution.label == "stock+aot" and built.runner.aot and built.runner.compiled
    one_sequence = [f for f in package_path(built.model).parent.glob("*.pt2") if not f.name.endswith("-batch.pt2")]
    assert package_path(built.model).exists() and len(one_sequence) == 1
    eager = HFTarget(model, max_len=MAX_LEN, weights="stock")
    drafter = make_drafter("eagle3", model, MAX_LEN + 8)
    trees = [DynamicTreePolicy(topk=2, depth=3, total_tokens=8), StaticTreePolicy.chain(2)]  # 8 and 3 rows
    specs = [SpeculativeGenerator(built, drafter, policy, GreedyVerifier()) for policy in trees]
    sizes, accepted = set(), 0
    for p in prompts():
        want = VanillaGenerator(eager).generate(p, GREEDY, STOP).tokens
        assert VanillaGenerator(built).generate(p, GREEDY, STOP).tokens == want
        for spec in specs:
            result = spec.generate(p, GREEDY, STOP)
            assert result.tokens == want
            sizes.update(result.metrics.tree_sizes)
            accepted += sum(result.metrics.accept_lengths)
    assert accepted > 0 and 3 in sizes and 8 in sizes  # drafts accepted; 3 rows ran unpadded (no bucket of 3)
    assert built.runner.compiled, "the package fell back to eager"


def test_tree_forward_logits_match_eager(model, built) -> None:
    """A 5-node tree (two branches) through the package: the eager stock forward's logits, row for row."""
    eager = HFTarget(model, max_len=MAX_LEN, weights="stock")
    parents = torch.tensor([-1, 0, 0, 1, 2])
    tree = DraftTree.from_parents(torch.tensor([1, 2, 3, 4, 5]), parents, 5)
    out = []
    for target in (eager, built):
        target.prefill(torch.arange(7) % 6)
        out.append(target.forward_tree(tree).logits)
        target.reset()
    assert out[0].shape == out[1].shape == (5, 6)
    torch.testing.assert_close(out[1], out[0], atol=1e-5, rtol=1e-5)


def test_later_targets_load_the_package_and_auto_finds_it(model, built, monkeypatch) -> None:
    def no_build(*args, **kwargs):
        raise AssertionError("a package was built again")

    monkeypatch.setattr(aot_module, "build_package", no_build)
    again = HFTarget(model, max_len=MAX_LEN + 10, static_shapes="aot")  # another capacity: the same package
    auto = HFTarget(model, max_len=MAX_LEN)
    assert auto.execution.aot and auto.static and auto.execution.label == "stock+aot"
    want = VanillaGenerator(HFTarget(model, max_len=MAX_LEN, weights="stock")).generate(prompts()[0], GREEDY, STOP)
    for target in (again, auto):
        assert VanillaGenerator(target).generate(prompts()[0], GREEDY, STOP).tokens == want.tokens
    assert [r.tokens for r in VanillaGenerator(auto).generate_batch(prompts()[:1], None, STOP)] == [want.tokens]
    other = tiny_llama(vocab_size=6, hidden_size=16, num_layers=2, logit_scale=1.5, seed=11)  # control: other weights
    assert package_path(other) != package_path(model)
    assert not HFTarget(other, max_len=MAX_LEN).static  # no package of its own: eager under "auto"


def test_several_prompts_on_the_package_equal_each_alone(model, built, monkeypatch) -> None:
    """Batches on the batch package (its batch dimension dynamic): 3 prompts of different lengths at 2 rows at a time
    (the third joins when one leaves), greedy, plain and speculative (trees of up to 8 nodes a row, ragged): every row's
    tokens equal its prompt decoded alone on the same package. The rows' caches start at 2 slots of room and grow many
    times (``ROOM`` patched), so a grown cache that lost or moved a written slot would show; the prompts' own
    continuations differ, so a row reading another's cache or logits would too. The package's limits patched small
    (2 rows at once, 4 nodes a row): a third row waits its turn, and larger trees run the same forward eagerly."""
    monkeypatch.setattr(rows_module, "ROOM", 2)
    monkeypatch.setattr(rows_module, "MAX_BATCH", 2)
    monkeypatch.setattr(rows_module, "MAX_ROWS", 4)
    drafter = make_drafter("eagle3", model, MAX_LEN + 8)
    gens = [
        VanillaGenerator(built),
        SpeculativeGenerator(built, drafter, DynamicTreePolicy(topk=2, depth=3, total_tokens=8), GreedyVerifier()),
    ]
    alone = [VanillaGenerator(built).generate(p, GREEDY, STOP).tokens for p in prompts()]
    assert len({tuple(t) for t in alone}) == 3  # the control: rows that swapped caches would not go unseen
    grown = []
    real_reserve = rows_module.BatchRows._reserve

    def reserve(rows, slots):
        real_reserve(rows, slots)
        grown.append(rows.slots)
        assert rows.slots <= rows.capacity

    monkeypatch.setattr(rows_module.BatchRows, "_reserve", reserve)
    for gen in gens:
        together = gen.generate_batch(prompts(), GREEDY, STOP, max_batch=3, speculate="always")
        assert [r.tokens for r in together] == alone
    assert len(set(grown)) > 3
    assert package_path(model, batch=True).exists()  # several rows ran on the batch package, built beside the first
    assert built.runner.compiled, "the package fell back to eager"
    compiled = HFTarget(model, max_len=64, weights="stock", static_shapes=True)  # compiled in-process: still refused
    with pytest.raises(BatchUnsupportedError, match="static_shapes=False"):
        VanillaGenerator(compiled).generate_batch(prompts()[:2], None, STOP)


def test_a_batch_package_that_cannot_be_built_leaves_the_batch_eager(model, built, monkeypatch) -> None:
    def refuse(self, keys, values, batch=False):
        raise PackageError("no batch package here")

    target = HFTarget(model, max_len=MAX_LEN, static_shapes="aot")
    target.warm_up()
    monkeypatch.setattr(type(target.runner._run), "load", refuse)
    alone = [VanillaGenerator(target).generate(p, GREEDY, STOP).tokens for p in prompts()]
    with pytest.warns(FastPathWarning, match="no batch package here; the batch runs its forwards eagerly"):
        together = VanillaGenerator(target).generate_batch(prompts(), GREEDY, STOP)
    assert [r.tokens for r in together] == alone


def test_data_generation_steps_on_the_batch_package(model, built, monkeypatch) -> None:
    """The continuous batcher of data generation (:mod:`specdec.train.continuous`) with its steps on the batch package:
    through refills, compactions and a shrinking batch, every greedy response equals its prompt decoded alone on the
    package, and the captured features (the last hidden state and two layers' inputs) equal the eager batcher's up to
    float rounding; the jobs' responses differ, so rows that swapped caches would show."""
    g = torch.Generator().manual_seed(5)
    work = [
        Job(i, torch.randint(0, 6, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist())
        for i in range(9)
    ]
    run = dict(batch_size=3, max_new_tokens=14, eos_token_id=5, capacity=40, compact_at=8)
    spec = FeatureSpec(final=True, layers=(0, 1))
    steps = []
    real_step = type(built.runner._run).step
    monkeypatch.setattr(
        type(built.runner._run), "step", lambda self, ids, *a: steps.append(ids.shape[0]) or real_step(self, ids, *a)
    )
    on = {
        f.job.key: f
        for f in generate_continuous(
            model, work, capture=spec, capture_dtype=torch.float32, package=built.runner._run, **run
        )
    }
    off = {f.job.key: f for f in generate_continuous(model, work, capture=spec, capture_dtype=torch.float32, **run)}
    stop = StopCondition(max_new_tokens=14, eos_token_ids=(5,))
    responses = set()
    for job in work:
        want = VanillaGenerator(built).generate(torch.tensor(job.ids), GREEDY, stop).tokens
        assert on[job.key].response == off[job.key].response == want
        torch.testing.assert_close(on[job.key].final, off[job.key].final, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(on[job.key].fused, off[job.key].fused, atol=1e-5, rtol=1e-5)
        responses.add(tuple(want))
    assert len(responses) > 5 and max(steps) == 3  # the steps ran on the batch package
    with pytest.raises(ValueError, match="at most 64 rows"):
        list(generate_continuous(model, work, **{**run, "batch_size": 65}, package=built.runner._run))


def test_a_package_that_cannot_load_falls_back_with_one_warning(built) -> None:
    model = tiny_llama(vocab_size=16, hidden_size=16, num_layers=2, seed=4)
    path = package_path(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a package")
    prompt = torch.arange(5)
    eager = HFTarget(model, max_len=MAX_LEN, weights="stock", static_shapes=False)
    want = VanillaGenerator(eager).generate(prompt, GREEDY, STOP)
    target = HFTarget(model, max_len=MAX_LEN)  # "auto" finds the file
    with pytest.warns(FastPathWarning, match="ahead-of-time package cannot serve this model") as caught:
        assert VanillaGenerator(target).generate(prompt, GREEDY, STOP).tokens == want.tokens
    assert len([w for w in caught if issubclass(w.category, FastPathWarning)]) == 1
    assert target.execution.aot and not target.runner.compiled
    assert not path.exists() and not HFTarget(model, max_len=MAX_LEN).static  # set aside: "auto" finds none now


def test_aot_is_refused_off_a_cpu() -> None:
    with torch.device("meta"):
        model = tiny_llama(vocab_size=6, hidden_size=16, num_layers=1)
    with pytest.raises(BackendError, match="run on a CPU"):
        resolve(model, "auto", "aot")


def test_the_command_line_and_bench_take_aot() -> None:
    from argparse import Namespace

    from specdec.bench.config import BenchConfig
    from specdec.cli_options import target_backend
    from specdec.errors import UsageError

    args = Namespace(static_shapes="aot", weights="auto", draft_weights=None, invariant="auto")
    assert target_backend(args)["static_shapes"] == "aot"
    with pytest.raises(UsageError, match="--weights packed cannot run with static shapes"):
        target_backend(Namespace(static_shapes="aot", weights="packed", draft_weights=None, invariant="auto"))
    assert BenchConfig(static_shapes="aot").static_shapes == "aot"
    with pytest.raises(ValueError, match="'auto', 'aot', True or False"):
        BenchConfig(static_shapes="ahead")


def test_doctor_lists_the_packages(built, capsys) -> None:
    from specdec.backends.aot import packages
    from specdec.cli_measure import _print_packages

    found = [p for p in packages() if p["path"] == str(package_path(built.model))]
    assert len(found) == 1 and found[0]["this_machine"] and found[0]["dtype"] == "float32"
    assert found[0]["parameters"] == sum(p.numel() for p in built.model.parameters()) and found[0]["bytes"] > 0
    _print_packages()
    out = capsys.readouterr().out
    assert "ahead-of-time packages:" in out and f"{found[0]['path']}:" in out and "this machine" in out


def test_a_small_lm_drafter_cut_from_a_package_target(model, built) -> None:
    """The small-LM drafter made of the package target's first layer runs eager shapes (it has no package of its
    own: "auto" never compiles unasked) on modules it shares with the target; greedy tokens stay the eager loop's."""
    from specdec.drafters import SmallLMDrafter

    drafter = SmallLMDrafter.from_target(built, num_layers=1)
    assert not drafter.static and built.runner.aot
    eager = HFTarget(model, max_len=MAX_LEN, weights="stock", static_shapes=False)
    policy = DynamicTreePolicy(topk=2, depth=3, total_tokens=8)
    spec = SpeculativeGenerator(built, drafter, policy, GreedyVerifier())
    for p in prompts():
        assert spec.generate(p, GREEDY, STOP).tokens == VanillaGenerator(eager).generate(p, GREEDY, STOP).tokens
    assert built.runner.compiled and built.execution.label == "stock+aot"


def test_the_cache_is_sized_to_the_generation_and_grown_keeping_its_slots(model, built, monkeypatch) -> None:
    """The package reads every slot of its cache, so the runner sizes the cache at each prompt and grows it as tokens
    come (``ModelRunner._fit``). With 2 slots of room it grows inside every generation, and vanilla and speculative
    tokens stay the eager target's. The control: a growth that drops the kept slots changes the tokens."""
    eager = HFTarget(model, max_len=MAX_LEN, weights="stock")
    monkeypatch.setattr(built.runner, "room", 2)
    resize, sizes = built.cache.resize, []

    def recorded(max_len: int, keep: int) -> None:
        sizes.append((max_len, keep))
        resize(max_len, keep)

    monkeypatch.setattr(built.cache, "resize", recorded)
    spec = SpeculativeGenerator(
        built,
        make_drafter("eagle3", model, MAX_LEN + 8),
        DynamicTreePolicy(topk=2, depth=3, total_tokens=8),
        GreedyVerifier(),
    )
    wants = [VanillaGenerator(eager).generate(p, GREEDY, STOP).tokens for p in prompts()]
    for p, want in zip(prompts(), wants, strict=True):
        assert VanillaGenerator(built).generate(p, GREEDY, STOP).tokens == want
        assert spec.generate(p, GREEDY, STOP).tokens == want
    first = sizes[0][0]
    assert first == prompts()[0].shape[0] + 2 + max(built.buckets)  # the prompt, the room, a bucket's padding
    assert any(keep > 0 for _, keep in sizes) and max(s for s, _ in sizes) <= MAX_LEN + max(built.buckets)
    assert built.runner.compiled
    monkeypatch.setattr(built.cache, "resize", lambda max_len, keep: resize(max_len, 0))  # the control
    got = [VanillaGenerator(built).generate(p, GREEDY, STOP).tokens for p in prompts()]
    assert got != wants, "losing the kept slots went unnoticed"


def test_only_a_static_cache_is_resized() -> None:
    from specdec.kvcache import PositionCache

    with pytest.raises(ValueError, match="only a static cache is resized"):
        PositionCache(2, 16).resize(8, keep=0)
    with pytest.raises(ValueError, match="cannot keep 9 slots in a cache of 8"):
        PositionCache(2, 16, static=True).resize(8, keep=9)

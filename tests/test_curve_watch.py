"""The cached forward-cost curve checked against the tree forwards the decoding loop times (specdec.curve_watch)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from specdec import cost_probe, curve_watch
from specdec.budget import CostCurve, curve_path, curves_in, forward_cost_curve
from specdec.curve_watch import CHECK_EVERY, CONTEXT_BAND, MIN_SAMPLES, WARMUP, CurveWatch, watch_of
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees.adaptive import AdaptiveTreePolicy
from specdec.verify import GreedyVerifier
from tests.factories import make_drafter

CURVE = CostCurve((1, 2, 4, 8, 16), (0.010, 0.011, 0.012, 0.014, 0.020), {"device": "cpu"})


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))


def fed(watch: CurveWatch, tokens: int, ratio: float, n: int, jitter: float = 0.0) -> CurveWatch:
    """``n`` forwards of ``tokens`` tokens at ``ratio`` x the curve's cost (alternately +- ``jitter``), after the
    watch's warm-up forwards (at 3x: not counted)."""
    for _ in range(WARMUP - watch.seen):
        watch.record(tokens, CURVE.cost(tokens) * 3.0)
    for i in range(n):
        watch.record(tokens, CURVE.cost(tokens) * ratio * (1 + (jitter if i % 2 else -jitter)))
    return watch


def test_a_bucket_the_loop_pays_more_for_is_a_disagreement(tmp_path):
    """The stale curve of a Zen 3 (trees of 8 priced at 1.11x a step, paid at 1.40x) is what it must catch; loop
    times within the tolerance, with a jitter of +-10 % per forward, are not; a bucket with fewer than MIN_SAMPLES
    forwards is not judged, and judging runs every CHECK_EVERY forwards."""
    path = tmp_path / "curve.json"
    agree = fed(CurveWatch(CURVE, path, fresh=True), 1, 1.0, 4 * CHECK_EVERY, jitter=0.1)
    agree = fed(agree, 7, 1.1, 4 * CHECK_EVERY, jitter=0.1)
    assert agree.verdict is None and agree.disagreement() is None
    few = fed(fed(CurveWatch(CURVE, path, fresh=True), 1, 1.0, CHECK_EVERY), 16, 2.0, MIN_SAMPLES - 1)
    assert few.disagreement() is None  # too few forwards of 9-16 tokens to judge
    stale = fed(fed(CurveWatch(CURVE, path, fresh=True), 1, 1.0, CHECK_EVERY), 6, 1.26, CHECK_EVERY)
    assert stale.verdict is not None and stale.verdict.startswith("tree forwards of 5-8 tokens took 1.26x")
    cheap = fed(CurveWatch(CURVE, path, fresh=True), 3, 0.7, CHECK_EVERY)  # a curve too dear is caught too
    assert cheap.verdict is not None and "of 3-4 tokens took 0.70x" in cheap.verdict
    assert not path.exists()  # a curve measured in this process is only kept in the watch


def test_forwards_at_contexts_far_past_the_probes_are_not_judged(tmp_path):
    """A curve probed at 256 tokens of context: trees paid at 1.35x after 1,000 committed tokens (a long prompt) are
    not judged; the same forwards within twice the probe's context are (the control), as are forwards whose context
    is not given or a curve that does not say its probe's."""
    probed = CostCurve(CURVE.sizes, CURVE.seconds, {"device": "cpu", "context": 256})
    path = tmp_path / "curve.json"

    def after(context, curve=probed):
        watch = CurveWatch(curve, path, fresh=True)
        for _ in range(WARMUP + 2 * CHECK_EVERY):
            watch.record(6, curve.cost(6) * 1.35, context)
        return watch

    assert after(1000).verdict is None and after(1000).count == 0
    assert after(CONTEXT_BAND * 256).verdict is not None  # within the band: caught
    assert after(None).verdict is not None and after(1000, CURVE).verdict is not None


def test_a_stale_cached_curve_is_marked_and_measured_again(tiny, monkeypatch):
    """A curve read back from the cache whose prices the decoding loop contradicts (planted 100x too cheap) is
    marked stale in its file with a warning, during a real greedy generation; the next use measures it again. The
    loop hands the watch every tree forward it runs, with its size."""
    target = HFTarget(tiny, max_len=256)
    sizes = (1, 2, 4, 8, 16)
    path = curve_path(target.model, target.device)
    planted = CostCurve(sizes, tuple(1e-6 * (10 + m) for m in sizes), {"device": "cpu", "threads": 1})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(planted.to_json()))
    curve = forward_cost_curve(target)
    assert curve == planted and forward_cost_curve(target) is curve  # generators built in turn share one watch
    policy = AdaptiveTreePolicy(topk=2, depth=3, max_total=16, curve=curve)
    watch = watch_of(curves_in(policy))
    assert watch is not None and watch.curve is curve and not watch.fresh
    seen = []
    record = watch.record
    monkeypatch.setattr(watch, "record", lambda tokens, secs, ctx: seen.append(tokens) or record(tokens, secs, ctx))
    gen = SpeculativeGenerator(target, make_drafter("eagle1", tiny, 256), policy, GreedyVerifier())
    prompt = torch.tensor([1, 5, 9, 2, 7])
    with pytest.warns(UserWarning, match="the cached forward-cost curve is stale: tree forwards of"):
        result = gen.generate(prompt, SamplingParams(temperature=0.0), StopCondition(max_new_tokens=60))
    assert seen == result.metrics.tree_sizes[: len(seen)] and len(seen) >= WARMUP + CHECK_EVERY
    assert json.loads(path.read_text())["meta"]["stale"] == watch.verdict
    calls = []
    monkeypatch.setattr(cost_probe, "probe", lambda t, s, trees, r: calls.append(1) or [1e-3 * (10 + m) for m in s])
    again = forward_cost_curve(target, sizes=sizes, repeats=1, context=16)
    assert calls and again.seconds != planted.seconds and not again.meta.get("stale")
    assert watch_of(curves_in(AdaptiveTreePolicy(topk=2, depth=3, max_total=16, curve=again))).fresh


def test_only_a_synchronous_device_and_a_whole_curve_are_watched(tmp_path):
    """On CUDA the loop's clock times a forward's launch, and a batch row's share is not the cached curve."""
    cuda = CostCurve((1, 2), (1.0, 2.0), {"device": "cuda-NVIDIA_H200"})
    assert curve_watch.watch_curve(cuda, tmp_path / "c.json", fresh=False) is cuda
    assert watch_of(curves_in(AdaptiveTreePolicy(topk=2, depth=2, max_total=8, curve=cuda))) is None
    cpu = curve_watch.watch_curve(CostCurve((1, 2), (1.0, 2.0), {"device": "cpu"}), tmp_path / "c.json", False)
    assert watch_of(curves_in(AdaptiveTreePolicy(topk=2, depth=2, max_total=8, curve=cpu))) is not None
    assert watch_of(curves_in(AdaptiveTreePolicy(topk=2, depth=2, max_total=8, curve=cpu.per_row(4)))) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CurveWatch(cpu, tmp_path / "c.json", fresh=False).record(1, float("nan"))  # ignored, no error


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, seed=3, logit_scale=2.0)

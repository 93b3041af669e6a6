"""Frozen compiled graphs on a CPU (:func:`specdec.backends.compiled.freezes`): the weights really become packed graph
constants, each model and each cache gets its own graphs, and tuned GEMMs keep greedy decoding exact.

Each check has the control that shows what it catches: the compile options alone (without freezing on while dynamo
traces) fold nothing; a static cache left marked as a static address lets a second cache of the same shapes run on
the first one's tensors.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from specdec.backends.compiled import compile_forward, cpu_options, freezes
from specdec.generate import StopCondition, VanillaGenerator
from specdec.kvcache import PositionCache
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

pytestmark = [
    pytest.mark.filterwarnings("error::specdec.backends.FastPathWarning"),
    pytest.mark.skipif(not freezes(torch.device("cpu")), reason="CPU graphs freeze"),
]
GREEDY = SamplingParams(temperature=0.0)


def _packed() -> int:
    return int(counters["inductor"]["mkldnn_linear_weight_pack_matcher_count"])


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 24)).eval()


def test_cpu_options_and_the_switch(monkeypatch) -> None:
    monkeypatch.setenv("SPECDEC_TUNE_GEMMS", "0")
    assert cpu_options() == {"freezing": True}
    monkeypatch.setenv("SPECDEC_TUNE_GEMMS", "1")
    assert cpu_options()["max_autotune"] and cpu_options()["max_autotune_gemm_backends"] == "CPP,ATEN"
    monkeypatch.setenv("SPECDEC_TUNE_GEMMS", "yes")
    with pytest.raises(ValueError, match="SPECDEC_TUNE_GEMMS must be 0 or 1"):
        cpu_options()


@torch.no_grad()
def test_weights_are_frozen_and_each_model_gets_its_own_graph() -> None:
    """Two models of one class with different weights: both compiled forwards fold (pack) their linears and each
    returns its own model's output. Control: ``torch.compile`` with ``freezing`` in its options only packs
    nothing (dynamo hands inductor the weights as inputs)."""
    x = torch.randn(3, 24)
    models = [_mlp(1), _mlp(2)]
    before = _packed()
    runs = [compile_forward(m) for m in models]
    for m, run in zip(models, runs, strict=True):
        torch.testing.assert_close(run(x), m(x))
    assert _packed() - before == 4  # two linears in each of two graphs
    control = _mlp(3)
    before = _packed()
    plain = torch.compile(control, fullgraph=True, dynamic=False, options=cpu_options())
    torch.testing.assert_close(plain(x), control(x))
    assert _packed() == before, "the control froze weights: the trace-time switch would prove nothing"


@pytest.mark.parametrize("release", [True, False])
def test_two_caches_of_one_model_never_share_a_graphs_tensors(monkeypatch, release: bool) -> None:
    """Two static targets on one model (same shapes, same weights, so dynamo reuses the graph): each decodes its own
    prompt exactly as the eager model does. Control (``release=False``): the caches left marked as static addresses,
    as transformers leaves them for CUDA graphs, and the second target's step runs on the first one's cache."""
    if not release:
        monkeypatch.setattr(PositionCache, "release_static_addresses", lambda self: None)
    model = tiny_llama(vocab_size=32, hidden_size=16, num_layers=1, seed=7 + release)
    prompts = [torch.arange(5) % 32, (torch.arange(5) * 7 + 3) % 32]
    eager = [HFTarget(model, max_len=40, weights="stock") for _ in prompts]
    static = [HFTarget(model, max_len=40, static_shapes=True, buckets=(1,), in_place=True) for _ in prompts]
    matches = []
    for group in (eager, static):
        for target, prompt in zip(group, prompts, strict=True):
            target.prefill(prompt)
        logits = [target.decode_one(torch.tensor(3)).logits for target in group]
        logits += [target.decode_one(torch.tensor(4)).logits for target in group]
        matches.append(logits)
    same = [torch.allclose(a, b, atol=1e-4) for a, b in zip(*matches, strict=True)]
    if release:
        assert all(same), same
    else:
        assert not all(same), "control: a shared cache went unnoticed"


@pytest.mark.heavy  # inductor builds and times a template per GEMM shape: ~30 s on 2 cores with a cold cache
def test_tuned_gemms_keep_greedy_decoding_exact(monkeypatch) -> None:
    """With the GEMM autotuning on (the default outside the test suite), compiled vanilla greedy decoding emits the
    eager stock tokens, and the tuning really ran: inductor timed its choices or emitted its GEMM template. Control:
    the same model compiled with ``SPECDEC_TUNE_GEMMS=0`` does neither."""

    def tuned(switch: str, seed: int) -> int:  # a model of its own: graphs of its own, compiled under `switch`
        monkeypatch.setenv("SPECDEC_TUNE_GEMMS", switch)
        # one layer whose GEMMs have three shapes (q/k/v/o 16 -> 16, gate/up and the vocabulary 16 -> 32, down 32 -> 16)
        model = tiny_llama(vocab_size=32, hidden_size=16, num_layers=1, num_kv_heads=4, seed=seed)
        stop = StopCondition(max_new_tokens=16, eos_token_ids=())
        prompt = torch.arange(6)
        eager = VanillaGenerator(HFTarget(model, max_len=64, weights="stock")).generate(prompt, GREEDY, stop)
        before = _tuning()
        target = HFTarget(model, max_len=64, static_shapes=True, buckets=(1,))
        assert VanillaGenerator(target).generate(prompt, GREEDY, stop).tokens == eager.tokens
        assert target.runner.compiled
        return _tuning() - before

    assert tuned("1", 11) > 0
    assert tuned("0", 12) == 0, "control: the switch off still tuned"


def _tuning() -> int:
    """Inductor's autotuning runs plus GEMM-template kernels emitted so far in this process."""
    return int(counters["inductor"]["select_algorithm_autotune"] + counters["inductor"]["cpp_templated_kernel_counter"])

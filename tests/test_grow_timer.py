"""Drafting clocks on a device that runs ahead of the host: the device's work is waited for where a grow is timed.

CUDA is stood in for by a ``torch.device("cuda")`` object and a patched ``torch.cuda.synchronize`` that stands for the
device's queued work (it sleeps), so these run on any CPU.
"""

from __future__ import annotations

import time

import pytest
import torch

from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.trees import draft_clock
from specdec.trees.adaptive import AdaptiveTreePolicy
from specdec.trees.draft_clock import TIMED_EVERY, DraftClock, GrowTimer
from tests.test_budget import linear_curve, run_adaptive

CUDA = torch.device("cuda")
WORK = 0.02  # seconds of queued device work a sync waits for


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, seed=3, logit_scale=2.0)


@pytest.fixture
def device_work(monkeypatch):
    """``torch.cuda.synchronize`` counted, each call waiting :data:`WORK` seconds (the device's queued kernels)."""
    calls = []

    def synchronize(device=None):
        calls.append(device)
        time.sleep(WORK)

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    return calls


def test_a_cpu_grow_is_always_timed_and_never_waits(device_work) -> None:
    timer = GrowTimer()
    for _ in range(2 * TIMED_EVERY):
        assert timer.stop(timer.start(torch.device("cpu"))) is not None
    assert device_work == []


def test_a_cuda_grow_is_timed_when_due_with_its_work_waited_for(device_work) -> None:
    timer = GrowTimer()
    seconds = []
    for _ in range(2 * TIMED_EVERY):
        s = timer.stop(timer.start(CUDA))
        seconds.append(s)
        if s is not None:
            timer.used()
    timed = [i for i, s in enumerate(seconds) if s is not None]
    assert timed == [1, 1 + TIMED_EVERY]  # never the first grow (it runs the prompt), then one in TIMED_EVERY
    assert len(device_work) == 4  # two waits per timed grow, none for the others
    # the end's wait is inside the time: without it a timed grow would read its launches only (~0 s here)
    assert all(seconds[i] >= WORK for i in timed)


def test_an_unused_reading_leaves_the_next_grow_due_and_a_synced_grow_never_waits(device_work) -> None:
    timer = GrowTimer()
    assert timer.stop(timer.start(CUDA)) is None
    assert timer.stop(timer.start(CUDA)) is not None  # due, and not used (left out by its user) ...
    assert timer.stop(timer.start(CUDA)) is not None  # ... so the next one is due too
    timer.used()
    assert timer.stop(timer.start(CUDA)) is None
    waits = len(device_work)
    assert all(timer.stop(timer.start(CUDA, synced=True)) is not None for _ in range(5))  # reads back: always timed
    assert len(device_work) == waits  # and never waited for


def test_the_draft_clock_folds_only_timed_grows_on_cuda(device_work) -> None:
    class Drafter:
        generation = 0

    clock, drafter = DraftClock(smoothing=1.0), Drafter()
    clock.record(drafter, clock.start(CUDA), 1)  # the generation's first grow: untimed, left out
    clock.record(drafter, clock.start(CUDA), 1)  # the second: due, timed with the device's work inside
    assert clock.seconds is not None and clock.seconds >= WORK
    first = clock.seconds
    for _ in range(TIMED_EVERY - 1):  # untimed: nothing folded
        clock.record(drafter, clock.start(CUDA), 1)
        assert clock.seconds == first
    drafter.generation += 1
    clock.record(drafter, clock.start(CUDA), 1)  # due, but a generation's first grow: left out ...
    assert clock.seconds == first
    clock.record(drafter, clock.start(CUDA), 1)  # ... so the next is timed and folded
    assert clock.seconds != first and clock.seconds >= WORK


def test_a_deferred_adaptive_policy_learns_its_level_time_from_timed_grows_only(tiny, device_work, monkeypatch):
    curve = linear_curve(base=1.0, per_token=0.05, top=16)
    policy = AdaptiveTreePolicy(topk=3, depth=4, max_total=16, curve=curve, deferred=True)
    start, stop = policy._timer.start, policy._timer.stop
    readings = []
    monkeypatch.setattr(policy._timer, "start", lambda device=None, synced=False: start(CUDA, synced))  # a CPU root
    monkeypatch.setattr(policy._timer, "stop", lambda started: readings.append(stop(started)) or readings[-1])
    prompt = torch.randint(0, 32, (7,), generator=torch.Generator().manual_seed(1))
    vanilla, result = run_adaptive(tiny, policy, prompt, kind="ngram")
    assert result.tokens == vanilla
    assert len(readings) > TIMED_EVERY
    # the first cycle reads its own values back (timed, no wait); the others ride the loop's sync: one in 16 timed
    assert [i for i, s in enumerate(readings) if s is not None] == list(range(0, len(readings), TIMED_EVERY))
    assert all(s >= WORK for s in readings[TIMED_EVERY::TIMED_EVERY])  # the riding ones hold the device's work
    assert len(device_work) == 2 * len(readings[TIMED_EVERY::TIMED_EVERY])


def test_the_policies_pass_the_roots_device_to_their_clocks(device_work, monkeypatch) -> None:
    """Every clock's call site hands it the root's device: with any device treated as one that runs ahead, the
    grows of the menu, the ranked policy, a gated sampled shape and a deferred adaptive tree wait for it."""
    from specdec.budget import CostCurve
    from specdec.trees import StochasticTreePolicy
    from specdec.trees import level_gate as level_gate_module
    from specdec.trees.level_gate import LevelGate
    from specdec.trees.menu import SampledMenuPolicy
    from specdec.trees.ranked import RankedSampledPolicy
    from tests.test_trees import FakeDrafter, random_logits

    waits = lambda device: lambda: torch.cuda.synchronize(device)  # noqa: E731 (the counted stand-in)
    monkeypatch.setattr(draft_clock, "device_sync", waits)
    monkeypatch.setattr(level_gate_module, "device_sync", waits)
    flat = CostCurve((1, 16), (1.0, 1.05))
    policies = {
        "menu": SampledMenuPolicy(flat),
        "ranked": RankedSampledPolicy(flat, max_nodes=6, max_depth=2, max_width=3),
        "gated": StochasticTreePolicy([[0], [1], [0, 0]], gate=LevelGate(flat)),
        "adaptive, deferred": AdaptiveTreePolicy(topk=2, depth=2, max_total=6, curve=flat, deferred=True),
    }
    g = torch.Generator().manual_seed(0)
    for name, policy in policies.items():
        before = len(device_work)
        for _ in range(TIMED_EVERY + 2):  # the adaptive tree's first grow reads back: its next is due 16 on
            policy.grow(FakeDrafter(9, random_logits(9, 3)), torch.tensor(1), SamplingParams(temperature=1.0), g)
            payload = policy.sync_payload()  # the adaptive tree's values, as the loop's sync carries them back
            policy.observe(0, None if payload is None else payload.tolist())
        assert len(device_work) > before, name


def test_device_sync_is_none_on_a_cpu() -> None:
    assert draft_clock.device_sync(torch.device("cpu")) is None
    assert draft_clock.device_sync(CUDA) is not None


def test_the_level_gate_waits_for_each_level_on_cuda_only(device_work) -> None:
    from specdec.trees.level_gate import LevelGate

    gate = LevelGate(linear_curve())
    gate.start(torch.device("cpu"))
    gate.level_done(first=True)
    gate.level_done(first=False)
    assert device_work == []
    gate = LevelGate(linear_curve())
    gate.start(CUDA)
    gate.level_done(first=True)  # the root level's work waited for: the next level's time starts after it
    gate.level_done(first=False)
    assert len(device_work) == 2
    assert gate.level_seconds is not None and gate.level_seconds >= WORK  # the level's work inside its time

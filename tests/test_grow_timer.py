"""Drafting clocks on a device that runs ahead of the host: the device's work is waited for where a grow is timed.

CUDA is stood in for by a ``torch.device("cuda")`` object and a patched ``torch.cuda.synchronize`` that stands for the
device's queued work (it sleeps), so these run on any CPU.
"""

from __future__ import annotations

import time

import pytest
import torch

from specdec.models import tiny_llama
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


def test_a_cuda_grow_is_timed_one_in_timed_every_with_its_work_waited_for(device_work) -> None:
    timer = GrowTimer()
    seconds = [timer.stop(timer.start(CUDA)) for _ in range(2 * TIMED_EVERY)]
    timed = [i for i, s in enumerate(seconds) if s is not None]
    assert timed == [0, TIMED_EVERY]
    assert len(device_work) == 4  # two waits per timed grow, none for the others
    # the end's wait is inside the time: without it a timed grow would read its launches only (~0 s here)
    assert all(seconds[i] >= WORK for i in timed)


def test_the_draft_clock_folds_only_timed_grows_on_cuda(device_work) -> None:
    class Drafter:
        generation = 0

    clock, drafter = DraftClock(smoothing=1.0), Drafter()
    clock.record(drafter, clock.start(CUDA), 1)  # the generation's first grow: left out (timed: grows 1, 17, ...)
    for _ in range(TIMED_EVERY - 1):  # untimed: nothing folded
        clock.record(drafter, clock.start(CUDA), 1)
        assert clock.seconds is None
    clock.record(drafter, clock.start(CUDA), 1)  # the 17th: timed, the device's work inside
    assert clock.seconds is not None and clock.seconds >= WORK


def test_a_deferred_adaptive_policy_learns_its_level_time_from_timed_grows_only(tiny, device_work, monkeypatch):
    curve = linear_curve(base=1.0, per_token=0.05, top=16)
    policy = AdaptiveTreePolicy(topk=3, depth=4, max_total=16, curve=curve, deferred=True)
    start = policy._timer.start
    monkeypatch.setattr(policy._timer, "start", lambda device=None: start(CUDA))  # the tiny model's root is on CPU
    learnt = []
    grow = policy.grow

    def recording(*args, **kwargs):
        before = policy._step_seconds
        tree = grow(*args, **kwargs)
        learnt.append(policy._step_seconds != before)
        return tree

    policy.grow = recording
    prompt = torch.randint(0, 32, (7,), generator=torch.Generator().manual_seed(1))
    vanilla, result = run_adaptive(tiny, policy, prompt, kind="ngram")
    assert result.tokens == vanilla
    assert len(learnt) > TIMED_EVERY
    assert [i for i, changed in enumerate(learnt) if changed] == list(range(0, len(learnt), TIMED_EVERY))
    assert policy._step_seconds >= WORK / policy.depth  # the timed grow's waits are in its level time


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

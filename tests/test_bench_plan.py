"""What a bench run says before it starts: the default methods, the count of generations, the measured estimate, and a
progress bar whose remaining time counts only this run's work."""

from __future__ import annotations

import io

import pytest
import torch

import specdec.bench.runner
import specdec.methods
from specdec.bench import load_rows
from specdec.bench.plan import (
    DEFAULT_TEMPERATURES,
    PRIOR_SLOWDOWN,
    Generation,
    VanillaProbe,
    default_methods,
    estimate_seconds,
    measured_slowdowns,
    plan_line,
    probe_vanilla,
    progress_bar,
)
from specdec.methods import preference
from specdec.target import HFTarget
from tests import test_bench
from tests.test_bench import bench, row

private_cache = test_bench.private_cache  # the same fixtures as tests/test_bench.py (autouse: a private cache)
tiny = test_bench.tiny


# ----------------------------------------------------------------------------------------------- the default run
def test_default_is_the_best_method_and_its_baselines_at_t0(monkeypatch):
    assert default_methods() == ["vanilla", preference()[0], "hf-generate"]  # the shipped heads are in the repository
    assert DEFAULT_TEMPERATURES == (0.0,)
    monkeypatch.setattr(specdec.methods, "HEADS_DIR", specdec.methods.HEADS_DIR / "absent")
    assert default_methods() == ["vanilla", "ngram", "hf-generate"]  # no head: the best training-free method


def test_run_bench_without_methods_runs_the_default(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(specdec.methods, "HEADS_DIR", tmp_path / "no-heads")  # default: ngram, buildable here
    bench(tiny, tmp_path, methods=None, limit=1, temperatures=DEFAULT_TEMPERATURES)
    rows = load_rows(tmp_path)
    assert [(r["method"], r["temperature"]) for r in rows if r["method"] != "vanilla"] == [
        ("ngram", 0.0),
        ("hf-generate", 0.0),
    ]


# ----------------------------------------------------------------------------------------------- the line
def test_plan_line_counts_and_estimate():
    probe = VanillaProbe(prefill_per_token=0.0, step=1 / 41)
    assert plan_line({0.0: 3, 1.0: 3}, 16, 12, 14 * 60, probe) == (
        "bench: 3 methods x 2 temperatures x 16 prompts = 96 generations (12 already done), about 14 min on this "
        "machine (estimate from vanilla timed here at 41 tok/s)"
    )
    assert (
        plan_line({0.0: 1}, 1, 0, 20.4)
        == "bench: 1 method x 1 temperature x 1 prompt = 1 generation, about 20 s on this machine"
    )
    # A +dynamic row runs at T > 0 only: the line says so, and the product stays exact.
    assert plan_line({0.0: 2, 1.0: 3}, 4, 0).startswith(
        "bench: 3 methods (2 at T=0) x 2 temperatures x 4 prompts = 20 "
    )
    assert plan_line({0.0: 2}, 4, 8) == "bench: 2 methods x 1 temperature x 4 prompts = 8 generations, all already done"
    assert "about 2.5 h" in plan_line({0.0: 2}, 4, 0, 2.5 * 3600)
    assert "at 2.5 tok/s" in plan_line({0.0: 2}, 4, 0, 100, VanillaProbe(0.0, 0.4))


# ----------------------------------------------------------------------------------------------- the estimate
def test_estimate_scales_vanilla_by_measured_or_prior_slowdowns():
    probe = VanillaProbe(prefill_per_token=0.01, step=0.1)
    assert probe.seconds(prompt_tokens=50, max_new_tokens=11) == pytest.approx(0.5 + 10 * 0.1)
    todo = [
        Generation("vanilla", "vanilla", 0.0, 50),
        Generation("ngram", "ngram", 0.0, 50),  # measured: twice vanilla's speed
        Generation("ngram", "ngram", 1.0, 50),  # not measured at T = 1: as slow as vanilla
        Generation("hf-generate", "hf-generate", 0.0, 50),  # the prior of HF generate
    ]
    seconds = estimate_seconds(todo, probe, 11, {("ngram", 0.0): 0.5})
    assert seconds == pytest.approx(1.5 * (1 + 0.5 + 1 + PRIOR_SLOWDOWN["hf-generate"]))


def test_slowdowns_are_learnt_from_rows_at_the_same_budget():
    rows = [
        row("vanilla", "a", 10, 2.0),
        row("vanilla", "b", 10, 2.0),
        row("ngram", "a", 10, 1.0),  # 2x vanilla on a
        row("hf-generate", "a", 10, 3.0),
        row("ngram", "b", 10, 1.0, max_new_tokens=64),  # another budget: not this run's
    ]
    assert measured_slowdowns(rows, 16) == pytest.approx({
        ("vanilla", 0.0): 1.0,
        ("ngram", 0.0): 0.5,
        ("hf-generate", 0.0): 1.5,
    })  # fmt: skip
    assert measured_slowdowns(rows, 32) == {}


def test_probe_times_vanilla_on_this_machine(tiny):
    target = HFTarget(tiny, max_len=64)
    probe = probe_vanilla(target, torch.tensor([1, 2, 3, 4]), tokens=8)
    assert probe.step > 0 and probe.prefill_per_token > 0
    assert probe.seconds(4, 8) == pytest.approx(4 * probe.prefill_per_token + 7 * probe.step)


# ----------------------------------------------------------------------------------------------- the run says it
def test_the_line_comes_before_the_first_generation_and_counts_resumed_rows(tiny, tmp_path, monkeypatch, capsys):
    seen = []  # (rows on disk when the line was made, the bar's total and initial)
    line = specdec.bench.runner.plan_line

    def spy_line(*args, **kw):
        seen.append(len(load_rows(tmp_path)))
        return line(*args, **kw)

    bar = specdec.bench.runner.progress_bar

    def spy_bar(total, done, enabled=True, **kw):
        seen.append((total, done))
        return bar(total, done, enabled, **kw)

    monkeypatch.setattr(specdec.bench.runner, "plan_line", spy_line)
    monkeypatch.setattr(specdec.bench.runner, "progress_bar", spy_bar)
    bench(tiny, tmp_path, methods=("ngram",), limit=2)
    first = capsys.readouterr().err
    assert "bench: 2 methods x 1 temperature x 2 prompts = 4 generations, about " in first
    assert "on this machine (estimate from vanilla timed here at " in first
    bench(tiny, tmp_path, methods=("ngram",))
    assert "= 6 generations (4 already done), about " in capsys.readouterr().err
    bench(tiny, tmp_path, methods=("ngram",))
    assert "= 6 generations, all already done" in capsys.readouterr().err
    assert seen == [0, (4, 0), 4, (6, 4), 6, (6, 6)]


# ----------------------------------------------------------------------------------------------- the bar
def test_resumed_rows_count_as_done_not_as_fast_work():
    bar = progress_bar(total=10, done=6, file=io.StringIO())
    bar.start_t -= 2.0  # this run has worked 2 s for one generation
    bar.update(1)
    meter = bar.format_meter(**bar.format_dict)
    bar.close()
    # 3 left at this run's 2 s per generation: 6 s. Counting the 6 resumed ones as work would say under a second.
    assert "7/10" in meter and "<00:06" in meter, meter


def test_a_skipped_method_leaves_the_total_not_the_rate(tiny, tmp_path, monkeypatch):
    """A method that cannot be built (no head) is taken off the bar's total: nothing passes for work done fast."""
    monkeypatch.setattr(specdec.methods, "HEADS_DIR", tmp_path / "no-heads")
    bars = []
    bar = specdec.bench.runner.progress_bar

    def shown_bar(total, done, enabled=True):  # shown (a hidden bar counts nothing), into a buffer
        bars.append(bar(total, done, True, file=io.StringIO()))
        return bars[-1]

    monkeypatch.setattr(specdec.bench.runner, "progress_bar", shown_bar)
    bench(tiny, tmp_path, methods=("ngram", "eagle3"), limit=2)
    (run,) = bars
    assert run.total == run.n == 2 * 2  # vanilla and ngram on two prompts; eagle3's two are off the total


def test_resumed_filters_are_checked_only_where_this_run_samples(tmp_path):
    """A folder sampled at T=1 with top-p 0.9 resumes at T=0 (greedy rows take no filters), and is refused at T=1
    with other filters, naming the options that fix it."""
    from specdec.bench.resume import ResumeMismatchError, check_resumed_filters

    rows = [{"status": "ok", "temperature": 1.0, "top_p": 0.9, "top_k": 0}, {"status": "ok", "temperature": 0.0}]
    check_resumed_filters(rows, [0.0], 1.0, 0, tmp_path)
    check_resumed_filters(rows, [0.0, 1.0], 0.9, 0, tmp_path)
    with pytest.raises(ResumeMismatchError, match="--top-p/--top-k, --fresh, or another --out"):
        check_resumed_filters(rows, [1.0], 1.0, 0, tmp_path)

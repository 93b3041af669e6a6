"""What an end-to-end check could have caught: its power against planted bugs, on the user's own pipeline.

A pass of :func:`~specdec.testing.e2e.e2e_check` says the samples fit the target's law; it does not say the check
could have failed. :func:`check_power` plants each applicable bug of :mod:`specdec.testing.controls` in the same
pipeline (same target, drafter, policy, prompt, sampling, number of tokens) and asks whether the same check, at the
same sample size and level, would have caught it:

* **exact** (trees of deterministic candidates and a plan verifier: :func:`~specdec.testing.pipeline.pipeline_law`
  enumerates the pipeline through its own loop): the law of the pipeline with the bug is computed exactly, so the
  check's power at ``n`` samples is the probability that a G-test of ``n`` draws from that law rejects at the
  check's level (estimated by simulating ``sims`` such tests; counts drawn as independent Poisson cells, the usual
  approximation of a multinomial), and the sample size that gives 80 % power is found by doubling ``n``. A bug that
  leaves the law unchanged (every cell within ``tol``) has no power at any ``n``; the report says which path of the
  walk it needs and how much of it the pipeline ran. The user's own pipeline gets an exact verdict too.
* **sampled** (sampled trees, or a verifier without a plan): each control runs the same sampled check (same ``n``,
  same seed) through the loop; caught means its p-value fell below the level. No sample-size estimate.

False positives: the exact power is a property of the bug, not a test, so it adds none; the sampled controls each
run one G-test at the check's level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from specdec.generate import SpeculativeGenerator
from specdec.sampling import SamplingParams
from specdec.testing.controls import CONTROLS, Control, applicable_controls
from specdec.testing.coverage import EVENTS, Coverage
from specdec.testing.pipeline import enumerable, pipeline_law
from specdec.testing.stats import ZERO_PROB, check_settings

__all__ = ["EXACT_TOL", "ControlResult", "PowerReport", "check_power", "g_test_power", "samples_for_power"]

#: Power a report calls enough to have caught a bug.
TARGET_POWER = 0.8

#: The largest ``|P_pipeline - P_target|`` an enumerated pipeline may show (float32 plans and cached forwards
#: round to ~1e-7; a planted bug moves cells by 1e-5 or more).
EXACT_TOL = 1e-5


def g_test_power(
    law: torch.Tensor,
    exact: torch.Tensor,
    n: int,
    level: float,
    sims: int = 200,
    seed: int = 0,
    min_expected: float = 5.0,
) -> float:
    """Probability that a G-test of ``n`` draws from ``law`` against ``exact`` rejects at ``level``.

    Simulated with ``sims`` count vectors whose cells are independent Poisson variables of mean ``n * law`` (the
    usual approximation of a multinomial), tested by the rule of :func:`~specdec.testing.stats.g_test`: cells with
    expected count ``n * exact < min_expected`` pooled into one (into the smallest other cell if still below), a
    chi-square tail, and p = 0 for a count in a cell of probability ``<= 1e-12``.
    """
    g = torch.Generator().manual_seed(seed)
    p = exact.detach().flatten().to(torch.float64).cpu()
    p = p / p.sum()
    counts = torch.poisson((law.flatten().clamp(min=0.0).to(torch.float64).cpu() * n).expand(sims, -1), generator=g)
    possible = p > ZERO_PROB
    impossible_seen = (counts[:, ~possible] > 0).any(-1)
    o, e = counts[:, possible], n * p[possible]
    small = e < min_expected
    o_big, e_big = o[:, ~small], e[~small]
    if bool(small.any()):
        o_pool, e_pool = o[:, small].sum(-1, keepdim=True), e[small].sum().reshape(1)
        if float(e_pool) < min_expected and e_big.numel() > 0:
            j = int(e_big.argmin())
            o_big, e_big = o_big.clone(), e_big.clone()
            o_big[:, j] += o_pool[:, 0]
            e_big[j] += e_pool[0]
        else:
            o_big, e_big = torch.cat([o_big, o_pool], -1), torch.cat([e_big, e_pool])
    df = e_big.numel() - 1
    if df < 1:
        return float(impossible_seen.double().mean())
    e_big = e_big * (o_big.sum(-1, keepdim=True) / n)  # expected counts at each vector's own total, as g_test does
    terms = torch.where(o_big > 0, o_big * torch.log(o_big / e_big), torch.zeros_like(o_big))
    stat = (2.0 * terms.sum(-1)).clamp(min=0.0)
    p_values = torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2.0)
    return float(((p_values <= level) | impossible_seen).double().mean())


def samples_for_power(
    law: torch.Tensor, exact: torch.Tensor, level: float, start: int, power: float = TARGET_POWER, limit: int = 10**9
) -> int | None:
    """The smallest ``start * 2**k`` at which :func:`g_test_power` reaches ``power`` (``None``: not below ``limit``)."""
    n = max(int(start), 1)
    while n <= limit:
        if g_test_power(law, exact, n, level) >= power:
            return n
        n *= 2
    return None


@dataclass
class ControlResult:
    """The check against one planted bug.

    Attributes:
        control: the bug.
        caught: the check would have caught it (exact: the bug moves the pipeline's exact law beyond the check's
            tolerance; sampled: the control's run failed the check).
        power: exact mode: the probability that the G-test alone, at the check's ``n``, fails on the bug.
        samples: exact mode: samples giving 80 % power (None: none up to 1e9, or the law is unchanged).
        max_diff: exact mode: ``max |P_bug - P_target|`` over continuations.
        p_value: sampled mode: the control's p-value.
        path_per_run: how often the pipeline ran the bug's path, per generated sequence.
    """

    control: Control
    caught: bool
    power: float | None = None
    samples: int | None = None
    max_diff: float | None = None
    p_value: float | None = None
    path_per_run: float = 0.0
    unchanged: bool = False

    def describe(self, n: int) -> str:
        c = self.control
        head = f"{c.name} ({c.bug}): "
        path = f"{EVENTS[c.path]}: {self.path_per_run:.3g} per run"
        if self.unchanged:
            return (
                f"{head}NO POWER: the bug leaves this pipeline's law unchanged (max |dP| {self.max_diff:.1e}); "
                f"it needs {path}; to exercise it: {c.hint}"
            )
        if self.power is not None:
            need = f"~{self.samples:,} samples give it 80 %" if self.samples else "not even 1e9 samples give it 80 %"
            verdict = "caught by the exact law" if self.caught else "NO POWER (below the exact tolerance)"
            return (
                f"{head}{verdict} (max |dP| {self.max_diff:.1e}); the G-test alone: power {self.power:.2f} at "
                f"n={n:,}, {need}; {path}"
            )
        verdict = "caught" if self.caught else "NO POWER (not caught)"
        return f"{head}{verdict}: p-value {self.p_value:.3g} at n={n:,} ({path}); to exercise it: {c.hint}"


@dataclass
class PowerReport:
    """:func:`check_power`'s findings.

    Attributes:
        mode: ``"exact"`` or ``"sampled"`` (see the module docstring), and why when sampled.
        n: the check's sample size; level: its per-check level.
        coverage: what the user's pipeline exercised (exact: expected counts per run; sampled: from its runs).
        pipeline_max_diff: exact mode: ``max |P_pipeline - P_target|`` of the user's own pipeline.
        controls: one result per applicable control.
        skipped: controls that do not apply to this pipeline (another kind of tree or sampling).
        exact_tol: the largest ``max |P_pipeline - P_target|`` the exact law may show.
        not_planted: why no bug was planted (``controls=False``; the pipeline fails the check itself, so a planted
            bug's failure would say nothing), or ``None`` when the applicable ones were.
    """

    mode: str
    n: int
    level: float
    coverage: Coverage
    pipeline_max_diff: float | None = None
    controls: list[ControlResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    exact_tol: float = EXACT_TOL
    not_planted: str | None = None

    @property
    def exact_ok(self) -> bool:
        """The pipeline's exact law is the target's (to ``exact_tol``), or was not computed (sampled mode)."""
        return self.pipeline_max_diff is None or self.pipeline_max_diff <= self.exact_tol

    @property
    def powerless(self) -> list[str]:
        """Names of the controls the check would not have caught."""
        return [r.control.name for r in self.controls if not r.caught]

    @property
    def unmeasured(self) -> str | None:
        """Why the check's power was not measured (no bug planted, or none applies here); ``None`` when it was."""
        if self.not_planted is not None:
            return f"no bug planted: {self.not_planted}"
        if not self.controls:
            return "no planted bug applies to this pipeline" + (
                f" ({', '.join(self.skipped)} do not)" * bool(self.skipped)
            )
        return None

    def describe(self) -> str:
        lines = [f"power against planted bugs ({self.mode}; n={self.n:,}, level {self.level:.3g}):"]
        if self.pipeline_max_diff is not None:
            lines.append(f"  this pipeline's exact law: max |P_pipeline - P_target| = {self.pipeline_max_diff:.1e}")
        lines.append(f"  coverage {self.coverage.describe()}")
        if self.unmeasured is not None:
            lines.append(f"  power not measured: {self.unmeasured}")
        lines += [f"  - {r.describe(self.n)}" for r in self.controls]
        if self.skipped:
            lines.append(f"  not applicable here: {', '.join(self.skipped)}")
        return "\n".join(lines)


def check_power(
    decoder: SpeculativeGenerator,
    prompt: torch.Tensor,
    sampling: SamplingParams,
    exact: torch.Tensor,
    n_samples: int,
    level: float,
    n_tokens: int,
    sampled_check: Callable[[SpeculativeGenerator], tuple[float, Coverage]],
    coverage: Coverage | None = None,
    names: Sequence[str] | None = None,
    tol: float = 1e-6,
    exact_tol: float = EXACT_TOL,
    sampled_ok: bool = True,
) -> PowerReport:
    """Plant each applicable control in ``decoder`` and say whether the check would have caught it.

    Args:
        decoder: the user's pipeline.
        prompt, sampling, n_tokens: the check's.
        exact: the target's exact law (``[V] * n_tokens``).
        n_samples, level: the check's sample size and per-check level.
        sampled_check: runs the user's sampled check on a decoder, returning its p-value and coverage (sampled mode).
        coverage: the user's pipeline's coverage from its sampled run (sampled mode).
        names: only these controls (default: every applicable one); an empty list: none (the pipeline's exact law
            is still computed where it can be).
        sampled_ok: the user's own sampled check passed. When it did not, or the pipeline's exact law is not the
            target's, no bug is planted: a planted bug that fails a failing check was caught by nothing
            (:attr:`PowerReport.not_planted` says so).
        tol: a law whose every cell is within ``tol`` of the target's counts as unchanged (float32 plans and cached
            forwards round to ~1e-7).
        exact_tol: in exact mode the check compares the pipeline's exact law with the target's at this tolerance
            (:data:`EXACT_TOL`), so a bug that moves a cell by more is caught whatever ``n``.
    """
    check_settings(level, n_samples=n_samples)
    controls = applicable_controls(decoder, sampling, None if names is None else tuple(names))
    kind = decoder.policy.for_sampling(sampling).kind(sampling)
    skipped = [c.name for c in CONTROLS if (names is None or c.name in names) and c not in controls]
    why = enumerable(decoder, sampling)
    if why is None:
        mine = pipeline_law(decoder, prompt, sampling, n_tokens)
        diff = float((mine.law - exact).abs().max())
        report = PowerReport("exact", n_samples, level, mine.coverage, diff, exact_tol=exact_tol)
    else:
        report = PowerReport(f"sampled: {why}", n_samples, level, coverage or Coverage())
    report.skipped = skipped
    if names is not None and not names:
        report.not_planted = "controls=False"
    elif not (sampled_ok and report.exact_ok):
        report.not_planted = "this pipeline fails the check itself"
    if report.not_planted is not None:
        return report
    if why is None:
        for c in controls:
            bugged = pipeline_law(c.build(decoder, kind, sampling), prompt, sampling, n_tokens)
            diff = float((bugged.law - exact).abs().max())
            path = mine.coverage.per_run(c.path)
            if diff <= tol:
                report.controls.append(ControlResult(c, False, 0.0, None, diff, path_per_run=path, unchanged=True))
                continue
            power = g_test_power(bugged.law, exact, n_samples, level)
            samples = n_samples if power >= TARGET_POWER else samples_for_power(bugged.law, exact, level, n_samples)
            report.controls.append(ControlResult(c, diff > exact_tol, power, samples, diff, path_per_run=path))
    else:
        for c in controls:
            p_value, _ = sampled_check(c.build(decoder, kind, sampling))
            path = report.coverage.per_run(c.path)
            report.controls.append(ControlResult(c, p_value <= level, p_value=p_value, path_per_run=path))
    return report

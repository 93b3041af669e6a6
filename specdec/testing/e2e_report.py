"""What an end-to-end check found (:class:`E2EReport`, made by :func:`~specdec.testing.e2e.e2e_check`): the G-test,
the pipeline's exact law where it was enumerated, the power against planted bugs, and which of those ran."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.testing.coverage import Coverage
from specdec.testing.power import PowerReport

__all__ = ["E2EReport"]


@dataclass
class E2EReport:
    """Outcome of :func:`e2e_check`.

    Attributes:
        p_value: G-test p-value of the sampled sequences against the exact distribution.
        level: the per-check threshold ``alpha / n_tests``; the check passes iff ``p_value > level``.
        counts: ``[V] * n_tokens`` observed counts.
        exact: ``[V] * n_tokens`` exact probabilities.
        accept_lengths, tree_depths: per cycle, from the runs' metrics (empty for a vanilla decoder's prefill-only
            runs; a vanilla cycle has accept length 0).
    """

    p_value: float
    level: float
    counts: torch.Tensor
    exact: torch.Tensor
    accept_lengths: list[int]
    tree_depths: list[int]
    coverage: Coverage | None = None
    power: PowerReport | None = None

    @property
    def passed(self) -> bool:
        """The samples fit the target's law (and, where the pipeline was enumerated, so does its exact law)."""
        return self.p_value > self.level and (self.power is None or self.power.exact_ok)

    @property
    def verdict(self) -> str:
        """``"FAIL"``; ``"pass"`` (and every applicable planted bug would have been caught); ``"NO POWER against X,
        Y"`` (the samples fit, but the check could not have caught those bugs); or ``"pass, power not measured
        (why)"`` (no bug was planted, so nothing says the check could have failed)."""
        if not self.passed:
            return "FAIL"
        if self.power is None:
            return "pass, power not measured (no bug can be planted in a decoder other than a SpeculativeGenerator)"
        if self.power.unmeasured is not None:
            return f"pass, power not measured ({self.power.unmeasured})"
        if self.power.powerless:
            return f"NO POWER against {', '.join(self.power.powerless)}"
        return "pass"

    @property
    def checks(self) -> list[str]:
        """What this check ran, in words: the G-test, the pipeline's exact law (or why not), the planted bugs."""
        out = [f"G-test of {self.n_samples:,} samples at level {self.level:.3g}"]
        if self.power is None:
            return [*out, "no exact law and no planted bugs (not a SpeculativeGenerator)"]
        if self.power.pipeline_max_diff is not None:
            out.append(f"the pipeline's exact law (tolerance {self.power.exact_tol:.0e})")
        else:
            out.append(f"no exact law ({self.power.mode})")
        planted = len(self.power.controls)
        out.append(
            f"{planted} planted bug{'s' * (planted != 1)}" if planted else f"no planted bugs ({self.power.unmeasured})"
        )
        return out

    @property
    def n_samples(self) -> int:
        return int(self.counts.sum())

    @property
    def cycles(self) -> int:
        return len(self.accept_lengths)

    @property
    def acceptances(self) -> int:
        """Cycles that accepted at least one draft token."""
        return sum(a > 0 for a in self.accept_lengths)

    @property
    def rejections(self) -> int:
        """Cycles that stopped before the bottom of their tree (some draft token was rejected)."""
        return sum(a < d for a, d in zip(self.accept_lengths, self.tree_depths, strict=True))

    @property
    def root_rejections(self) -> int:
        """Cycles that accepted nothing (every child of the root rejected)."""
        return sum(a == 0 for a in self.accept_lengths)

    def largest_deviations(self, k: int = 3) -> list[tuple[tuple[int, ...], float, float]]:
        """The ``k`` sequences with the largest ``|frequency - probability|``: ``(sequence, freq, prob)``."""
        n = max(self.n_samples, 1)
        freq = self.counts.flatten().double() / n
        prob = self.exact.flatten()
        order = torch.argsort((freq - prob).abs(), descending=True)[:k]
        shape = self.exact.shape
        return [
            (
                tuple(int(t) for t in torch.unravel_index(i, shape)),
                float(freq[i]),
                float(prob[i]),
            )
            for i in order
        ]

    def summary(self) -> str:
        dev = ", ".join(f"{s}: freq {f:.4f} vs p {p:.4f}" for s, f, p in self.largest_deviations())
        verdict = self.verdict
        if self.power is not None and not self.power.exact_ok:  # the exact law failed, whatever the G-test said
            verdict += (
                f" (the pipeline's exact law differs from the target's: max |P_pipeline - P_target| = "
                f"{self.power.pipeline_max_diff:.1e} > {self.power.exact_tol:.0e})"
            )
        elif not self.passed:
            verdict += " (the G-test rejected the samples)"
        power = "" if self.power is None else "\n" + self.power.describe()
        return (
            f"{verdict}: G-test p-value {self.p_value:.3g} vs level {self.level:.3g} (n={self.n_samples}, "
            f"{self.exact.numel()} cells); {self.cycles} cycles, {self.acceptances} with an acceptance, "
            f"{self.rejections} with a rejection ({self.root_rejections} at the root); largest deviations {dev}"
            f"\nchecks run: {'; '.join(self.checks)}{power}"
        )

"""What a bench run will do, said before it starts: the default methods, the count of generations, and a measured
estimate of how long they take.

The default run is the best method and its baselines at T = 0 (:func:`default_methods`, :data:`DEFAULT_TEMPERATURES`):
three generations per prompt, against two for every method in the full grid (every method at T = 0 and T = 1).

The estimate is measured on this machine, never read from a table:

1. :func:`probe_vanilla` times one vanilla greedy generation of :data:`PROBE_TOKENS` tokens (after a short warm-up,
   so first-call costs stay out): prefill seconds per prompt token and seconds per decode step.
2. A vanilla generation of a prompt of ``n`` tokens then takes ``n * prefill_per_token + (max_new_tokens - 1) *
   step`` (the full budget: EOS only ever shortens it).
3. Every other row label takes that times its *slowdown*, its seconds per token over vanilla's: measured, as
   ``1 / (x vanilla)`` of the rows already in ``results.jsonl`` at the same temperature (a resumed run), else
   :data:`PRIOR_SLOWDOWN` (conservative: no speculative method is assumed faster than vanilla).

Building each method and its warm-up are not counted. The progress bar then refines the estimate with the rate of
this run's own generations (:func:`progress_bar`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specdec.bench.report import aggregate
from specdec.generate import StopCondition
from specdec.methods import build_method, default_method
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = [
    "DEFAULT_TEMPERATURES",
    "PRIOR_SLOWDOWN",
    "PROBE_TOKENS",
    "WARMUP_TOKENS",
    "Generation",
    "VanillaProbe",
    "default_methods",
    "estimate_seconds",
    "measured_slowdowns",
    "plan_line",
    "probe_vanilla",
    "progress_bar",
]

#: Temperatures of the default run: greedy only (each further temperature runs every generation again).
DEFAULT_TEMPERATURES: tuple[float, ...] = (0.0,)
#: Tokens of the timed vanilla generation behind the estimate.
PROBE_TOKENS = 16
#: Seconds per token over our vanilla loop's, assumed for a row label not yet measured. HF ``generate`` on the stock
#: model ran 1.0-1.7x slower than our vanilla loop on the CPUs of the results page: 2 keeps the estimate on the long
#: side. A speculative method defaults to 1, as slow as vanilla: usually it is faster, and the bar's ETA corrects it.
PRIOR_SLOWDOWN: Mapping[str, float] = {"hf-generate": 2.0, "hf-prompt-lookup": 2.0}
#: Tokens of the untimed warm-up generation of each method (first-call costs stay out of the timed runs).
WARMUP_TOKENS = 4


def default_methods() -> list[str]:
    """The default run's methods: vanilla, the best method whose assets are present (the first available of
    :func:`specdec.methods.preference`) and HF ``generate``, the two baselines of its speedups."""
    return list(dict.fromkeys(["vanilla", default_method(), "hf-generate"]))


@dataclass(frozen=True)
class Generation:
    """One generation a run still owes: a row label (and its method) at a temperature, on a prompt of this length."""

    label: str
    method: str
    temperature: float
    prompt_tokens: int


@dataclass(frozen=True)
class VanillaProbe:
    """One timed vanilla generation on this machine.

    Attributes:
        prefill_per_token: prefill seconds divided by the prompt's tokens.
        step: seconds per decode step (one token each) after the prefill.
    """

    prefill_per_token: float
    step: float

    def seconds(self, prompt_tokens: int, max_new_tokens: int) -> float:
        """A vanilla generation of the full budget on a prompt of ``prompt_tokens`` (the first token comes from the
        prefill)."""
        return prompt_tokens * self.prefill_per_token + max(0, max_new_tokens - 1) * self.step

    @property
    def tokens_per_second(self) -> float:
        """The decode rate the probe measured."""
        return 1.0 / self.step if self.step > 0 else float("inf")


def probe_vanilla(target: HFTarget, ids: torch.Tensor, tokens: int = PROBE_TOKENS) -> VanillaProbe:
    """Time vanilla greedy decoding of ``tokens`` tokens on ``ids`` (``[L]``), after a short untimed warm-up."""
    vanilla = build_method("vanilla", target)
    greedy = SamplingParams()
    vanilla.generate(ids, greedy, StopCondition(max_new_tokens=WARMUP_TOKENS))
    m = vanilla.generate(ids, greedy, StopCondition(max_new_tokens=tokens)).metrics
    steps = max(1, m.new_tokens - 1)
    return VanillaProbe(m.time_prefill / max(1, int(ids.shape[0])), (m.time_total - m.time_prefill) / steps)


def measured_slowdowns(rows: Sequence[dict], max_new_tokens: int) -> dict[tuple[str, float], float]:
    """Per (row label, temperature) measured in ``rows`` at this budget: seconds per token over vanilla's on the
    same prompts (``1 / x vanilla`` of the report)."""
    same_budget = [r for r in rows if r.get("status") == "ok" and int(r["max_new_tokens"]) == max_new_tokens]
    return {
        (s.method, s.temperature): 1.0 / s.speedup_vs_vanilla for s in aggregate(same_budget) if s.speedup_vs_vanilla
    }


def estimate_seconds(
    todo: Sequence[Generation],
    probe: VanillaProbe,
    max_new_tokens: int,
    slowdowns: Mapping[tuple[str, float], float],
) -> float:
    """Seconds the generations of ``todo`` should take: each one vanilla's time (``probe``) times the row label's
    measured slowdown (``slowdowns``), or :data:`PRIOR_SLOWDOWN` where it has none (1 for a speculative method)."""
    total = 0.0
    for g in todo:
        slowdown = slowdowns.get((g.label, g.temperature), PRIOR_SLOWDOWN.get(g.method, 1.0))
        total += slowdown * probe.seconds(g.prompt_tokens, max_new_tokens)
    return total


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _duration(seconds: float) -> str:
    """``about 40 s``, ``about 14 min``, ``about 2.5 h``."""
    if seconds < 60:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def plan_line(
    labels_at: Mapping[float, int],
    prompts: int,
    done: int,
    seconds: float | None = None,
    probe: VanillaProbe | None = None,
) -> str:
    """The one line said before the first generation, e.g. ``bench: 3 methods x 1 temperature x 16 prompts = 48
    generations (12 already done), about 14 min on this machine (estimate from vanilla timed here at 41 tok/s)``.

    Args:
        labels_at: row labels run at each temperature (a ``+dynamic`` row runs at T > 0 only).
        prompts: prompts of the run.
        done: generations already in ``results.jsonl`` (skipped on resume).
        seconds: the estimate of the remaining generations (:func:`estimate_seconds`); None: not estimated.
        probe: the vanilla timing behind ``seconds``, quoted in the line.
    """
    most = max(labels_at.values(), default=0)
    methods = _count(most, "method")
    fewer = {t: n for t, n in labels_at.items() if n != most}
    if fewer:
        methods += " (" + ", ".join(f"{n} at T={t:g}" for t, n in fewer.items()) + ")"
    total = prompts * sum(labels_at.values())
    line = f"bench: {methods} x {_count(len(labels_at), 'temperature')} x {_count(prompts, 'prompt')} = "
    line += _count(total, "generation")
    if done >= total:
        return line + ", all already done"
    if done:
        line += f" ({done} already done)"
    if seconds is not None:
        line += f", {_duration(seconds)} on this machine"
        if probe is not None:
            rate = probe.tokens_per_second
            line += f" (estimate from vanilla timed here at {rate:.{0 if rate >= 10 else 1}f} tok/s)"
    return line


def progress_bar(total: int, done: int, enabled: bool = True, **kwargs) -> tqdm:
    """The run's tqdm bar, its remaining time from this run's own rate: the generations already done start the bar
    (``initial``), so they count as done but not as work done fast, and the rate is the run's average
    (``smoothing=0``), as methods of different speeds take turns."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, disable=not enabled, unit="run", desc="bench", smoothing=0, **kwargs)

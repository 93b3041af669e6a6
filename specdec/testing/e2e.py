"""End-to-end statistical checks: the whole decoding loop against the exact target process.

:mod:`specdec.testing.stats` checks one verification cycle on a tabulated target. This module checks a complete
decoder (``SpeculativeGenerator`` or ``VanillaGenerator``): prefill, drafter, tree policy, the target's tree
forward through its KV cache, verifier, commit, and the next cycle. The compared object is the joint distribution
of the first ``n_tokens`` generated tokens:

* **exact**: enumerate all ``V ** n_tokens`` continuations with batched forwards of the model (no KV cache, plain
  causal forwards over ``prompt + prefix``) and multiply the conditionals ``warp(logits, sampling)``: that is the
  definition of the target process;
* **empirical**: run ``decoder.generate(prompt, sampling, StopCondition(max_new_tokens=n_tokens), g)`` many times
  with one ``torch.Generator`` ``g`` seeded once;
* a G-test (:func:`~specdec.testing.stats.g_test`) of the counts against the exact probabilities.

Typical use on your own pipeline (keep ``V ** n_tokens`` small: a tiny random model with a small vocabulary)::

    from specdec.testing.e2e import assert_e2e_lossless

    decoder = SpeculativeGenerator(HFTarget(model, max_len=64), drafter, policy, verifier)
    report = assert_e2e_lossless(decoder, model, prompt, SamplingParams(temperature=1.0, top_k=3),
                                 n_samples=2000, seed=0, alpha=1e-3, n_tests=number_of_checks_you_run)
    assert report.acceptances > 0 and report.rejections > 0   # the verifier was really exercised

False positives: for a lossless decoder the p-value is (asymptotically) uniform, so a check fails wrongly with
probability about ``alpha / n_tests``; a family of ``n_tests`` checks fails wrongly with probability at most about
``alpha`` (Bonferroni). At a fixed seed a check is deterministic. The exact distribution is computed without the
KV cache, so the two sides round differently (about 1e-6): :func:`exact_sequence_distribution` refuses a setting
where that could flip a top-k / top-p / argmax decision (a margin below ``min_margin``), because then "exact"
would not be well defined.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specdec.generate import GenerationResult, SpeculativeGenerator, StopCondition
from specdec.sampling import SamplingParams, logits_ok, warp
from specdec.testing.coverage import Coverage, RecordingVerifier
from specdec.testing.e2e_report import E2EReport
from specdec.testing.pipeline import policy_copy
from specdec.testing.power import EXACT_TOL, check_power
from specdec.testing.stats import check_settings, g_test

__all__ = [
    "EXACT_TOL",
    "Decoder",
    "SampledSequences",
    "assert_e2e_lossless",
    "e2e_check",
    "exact_sequence_distribution",
    "sample_sequences",
    "sequence_index",
    "warp_margin",
]


class Decoder(Protocol):
    """Anything with the ``generate`` of :class:`~specdec.generate.SpeculativeGenerator`."""

    def generate(
        self, input_ids: torch.Tensor, sampling: SamplingParams, stop: StopCondition, generator=None
    ) -> GenerationResult: ...


def warp_margin(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """``[B]`` float64: how far each row of ``logits [B, V]`` is from flipping a decision ``warp`` makes.

    * greedy: the gap between the two largest logits (an argmax flip);
    * top-k: the gap between the k-th and (k+1)-th tempered logits (which tokens are kept);
    * top-p: the smallest ``|mass before a token - top_p|`` over the tokens that top-k kept (where the cut falls).

    ``inf`` where no decision is made (temperature > 0 without top-k/top-p).
    """
    x = logits.to(torch.float64)
    margin = torch.full(x.shape[:-1], torch.inf, dtype=torch.float64, device=x.device)
    v = x.shape[-1]
    if sampling.greedy:
        if v > 1:
            top2 = torch.topk(x, 2, dim=-1).values
            margin = top2[..., 0] - top2[..., 1]
        return margin
    x = torch.sort(x / sampling.temperature, dim=-1, descending=True).values
    keep = v
    if sampling.top_k and sampling.top_k < v:
        keep = sampling.top_k
        margin = torch.minimum(margin, x[..., keep - 1] - x[..., keep])
    if sampling.top_p < 1.0 and keep > 1:
        p = torch.softmax(x[..., :keep], dim=-1)
        mass_before = (p.cumsum(-1) - p)[..., 1:]
        margin = torch.minimum(margin, (mass_before - sampling.top_p).abs().amin(-1))
    return margin


def _last_logits(model: torch.nn.Module | Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    if isinstance(model, torch.nn.Module):
        return model(input_ids=ids).logits[:, -1]
    return model(ids)


@torch.no_grad()
def exact_sequence_distribution(
    model: torch.nn.Module | Callable[[torch.Tensor], torch.Tensor],
    prompt: torch.Tensor,
    sampling: SamplingParams,
    n_tokens: int = 3,
    batch_size: int = 1024,
    min_margin: float = 1e-4,
) -> torch.Tensor:
    """The target process's exact distribution of the first ``n_tokens`` tokens after ``prompt``.

    Step ``d`` runs every prefix of ``d`` tokens (``V ** d`` sequences ``prompt + prefix``) through the model in
    batches of ``batch_size`` and takes ``warp(last logits, sampling)`` in float64; the joint is the product of the
    conditionals. Cost: ``sum_d V ** d`` sequences, so keep ``V ** (n_tokens - 1)`` small.

    Args:
        model: a Hugging Face causal LM (called as ``model(input_ids=ids).logits``, no cache) or a function mapping
            ``[B, L]`` long ids to the last position's logits ``[B, V]``.
        prompt: ``[L]`` long prompt (the decoder's ``input_ids``).
        sampling: the settings the decoder uses.
        n_tokens: length of the compared continuations.
        batch_size: sequences per forward.
        min_margin: refuse settings where some prefix is within this margin of a top-k / top-p / argmax flip
            (see :func:`warp_margin`); ``0`` disables the check.

    Returns:
        ``[V] * n_tokens`` float64 probabilities, summing to 1.

    Raises:
        ValueError: NaN/+inf logits or an all -inf row, or a warp decision within ``min_margin`` of flipping.
    """
    if prompt.ndim != 1 or prompt.shape[0] == 0:
        raise ValueError(f"prompt must be a non-empty 1-D tensor, got shape {tuple(prompt.shape)}")
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be at least 1, got {n_tokens}")
    joint: torch.Tensor | None = None
    vocab = 0
    for d in range(n_tokens):
        if d == 0:
            prefixes = torch.zeros(1, 0, dtype=torch.long)
        else:
            prefixes = torch.tensor(list(itertools.product(range(vocab), repeat=d)), dtype=torch.long)
        ids = torch.cat([prompt.cpu().long().expand(prefixes.shape[0], -1), prefixes], dim=1).to(prompt.device)
        logits = torch.cat([_last_logits(model, chunk) for chunk in ids.split(batch_size)]).float()
        if not bool(logits_ok(logits)):
            raise ValueError(f"target logits with NaN/+inf or an all -inf row after some prefix of length {d}")
        vocab = logits.shape[-1]
        if min_margin > 0:
            # NaN margins come from ties between -inf logits, which round identically everywhere: not ambiguous.
            margin = torch.nan_to_num(warp_margin(logits, sampling), nan=torch.inf)
            worst = int(margin.argmin())
            if float(margin[worst]) < min_margin:
                raise ValueError(
                    f"after prefix {prefixes[worst].tolist()} the {sampling} decision is {float(margin[worst]):.3g} "
                    f"from flipping (< min_margin={min_margin:g}): float rounding between a cached and an uncached "
                    "forward could change it, so the exact distribution is ill-defined; use another prompt or model"
                )
        cond = warp(logits, sampling, torch.float64).cpu()  # [V ** d, V]
        joint = cond[0] if joint is None else (joint.reshape(-1, 1) * cond).reshape(-1)
    assert joint is not None
    return joint.reshape((vocab,) * n_tokens)


def sequence_index(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[S]`` row-major flat index of each sequence in ``tokens [S, n]`` (matches ``exact.flatten()``)."""
    flat = torch.zeros(tokens.shape[0], dtype=torch.long)
    for j in range(tokens.shape[1]):
        flat = flat * vocab_size + tokens[:, j].long()
    return flat


@dataclass
class SampledSequences:
    """What :func:`sample_sequences` collected.

    Attributes:
        tokens: ``[S, n_tokens]`` long, the first ``n_tokens`` tokens of every run.
        accept_lengths: accepted draft tokens of every cycle of every run (``GenerationMetrics.accept_lengths``).
        tree_depths: depth bound of the tree of each of those cycles.
    """

    tokens: torch.Tensor
    accept_lengths: list[int] = field(default_factory=list)
    tree_depths: list[int] = field(default_factory=list)


def sample_sequences(
    decoder: Decoder,
    prompt: torch.Tensor,
    sampling: SamplingParams,
    n_samples: int,
    n_tokens: int = 3,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> SampledSequences:
    """Run ``decoder.generate`` ``n_samples`` times with one generator seeded ``seed`` (reused across runs).

    Args:
        device: device of the generator; default the decoder's target device (``decoder.target.device``) or CPU.

    Raises:
        AssertionError: a run emitted a number of tokens other than ``n_tokens`` (no EOS or stop string may end it).
    """
    if device is None:
        target = getattr(decoder, "target", None)
        device = getattr(target, "device", "cpu")
    g = torch.Generator(device=device).manual_seed(seed)
    stop = StopCondition(max_new_tokens=n_tokens)
    rows: list[list[int]] = []
    out = SampledSequences(torch.zeros(0, n_tokens, dtype=torch.long))
    # a speculative loop runs its own cycles every time (a pace, the default on steep forwards, would interleave plain
    # steps, whose law tests/test_batched.py proves): what is checked is its drafter, tree policy and verifier
    own = {"speculate": "always"} if isinstance(decoder, SpeculativeGenerator) else {}
    for _ in range(n_samples):
        result = decoder.generate(prompt, sampling, stop, g, **own)
        if len(result.tokens) != n_tokens:
            raise AssertionError(f"a run emitted {len(result.tokens)} tokens, expected {n_tokens}: {result.tokens}")
        rows.append(result.tokens)
        out.accept_lengths.extend(result.metrics.accept_lengths)
        out.tree_depths.extend(result.metrics.tree_depths)
    out.tokens = torch.tensor(rows, dtype=torch.long).reshape(n_samples, n_tokens)
    return out


def _recording(decoder: Decoder, sampling: SamplingParams) -> tuple[Decoder, RecordingVerifier | None]:
    """``decoder`` with its verifier at ``sampling`` wrapped in a :class:`RecordingVerifier` (same parts)."""
    if not isinstance(decoder, SpeculativeGenerator):
        return decoder, None
    recorder = RecordingVerifier(decoder.parts_for(sampling)[1])
    return SpeculativeGenerator(decoder.target, decoder.drafter, decoder.policy, recorder), recorder


def e2e_check(
    decoder: Decoder,
    model: torch.nn.Module | Callable[[torch.Tensor], torch.Tensor],
    prompt: torch.Tensor,
    sampling: SamplingParams,
    n_samples: int,
    n_tokens: int = 3,
    seed: int = 0,
    alpha: float = 1e-3,
    n_tests: int = 1,
    exact: torch.Tensor | None = None,
    controls: bool | str | Sequence[str] = True,
) -> E2EReport:
    """Sample ``decoder`` and G-test its first ``n_tokens`` tokens against the exact target process (no raise),
    then measure what the check could have caught (:mod:`specdec.testing.power`).

    Args:
        decoder: e.g. a ``SpeculativeGenerator`` around a target built from ``model``.
        model: the target model for :func:`exact_sequence_distribution` (ignored when ``exact`` is given).
        prompt, sampling, n_tokens: as for :func:`exact_sequence_distribution`.
        n_samples, seed: as for :func:`sample_sequences`.
        alpha, n_tests: the check's level is ``alpha / n_tests`` (Bonferroni over a family of ``n_tests``).
        exact: a precomputed :func:`exact_sequence_distribution`, to share between checks.
        controls: ``True``: plant every applicable bug of :mod:`specdec.testing.controls` in the same pipeline and
            report the check's power against each (``report.power``; exact and fast for trees of deterministic
            candidates, one more sampled check per bug otherwise); a list of names: only those; ``False``: none
            (a suite with its own negative controls: the verdict then says the power was not measured). Whatever
            ``controls`` says, a pipeline the kit can enumerate (:mod:`specdec.testing.pipeline`) is also judged by
            its exact law, and no bug is planted in a pipeline that fails the check itself. ``report.checks`` lists
            what ran.
    """
    check_settings(alpha, n_tests, n_samples)
    if exact is None:
        exact = exact_sequence_distribution(model, prompt, sampling, n_tokens)
    elif exact.ndim != n_tokens or len(set(exact.shape)) != 1:
        raise ValueError(
            f"exact must be [V] * n_tokens = {n_tokens} equal dimensions (exact_sequence_distribution's shape), "
            f"got {tuple(exact.shape)}"
        )
    level = alpha / n_tests

    def run(dec: Decoder) -> tuple[float, E2EReport]:
        recorded, recorder = _recording(dec, sampling)
        sampled = sample_sequences(recorded, prompt, sampling, n_samples, n_tokens, seed)
        counts = torch.bincount(sequence_index(sampled.tokens, exact.shape[-1]), minlength=exact.numel())
        report = E2EReport(
            p_value=g_test(counts, exact),
            level=level,
            counts=counts.reshape(exact.shape),
            exact=exact,
            accept_lengths=sampled.accept_lengths,
            tree_depths=sampled.tree_depths,
        )
        if recorder is not None:
            recorder.coverage.runs = float(n_samples)
            report.coverage = recorder.coverage
        return report.p_value, report

    judged = isinstance(decoder, SpeculativeGenerator)
    if judged:  # the controls and the exact law start from the policy state this check started from
        frozen = SpeculativeGenerator(decoder.target, decoder.drafter, policy_copy(decoder), decoder.verifier)
    _, report = run(decoder)
    if judged:
        names = _control_names(controls)

        def sampled_check(dec: SpeculativeGenerator) -> tuple[float, Coverage]:
            p_value, r = run(dec)
            return p_value, r.coverage or Coverage()

        report.power = check_power(
            frozen,
            prompt,
            sampling,
            exact,
            n_samples,
            level,
            n_tokens,
            sampled_check,
            report.coverage,
            names,
            sampled_ok=report.p_value > level,
        )
    return report


def assert_e2e_lossless(
    decoder: Decoder,
    model: torch.nn.Module | Callable[[torch.Tensor], torch.Tensor],
    prompt: torch.Tensor,
    sampling: SamplingParams,
    n_samples: int,
    n_tokens: int = 3,
    seed: int = 0,
    alpha: float = 1e-3,
    n_tests: int = 1,
    exact: torch.Tensor | None = None,
    controls: bool | str | Sequence[str] = True,
    require_power: bool = True,
) -> E2EReport:
    """:func:`e2e_check`, raising ``AssertionError`` (with :meth:`E2EReport.summary`) unless its verdict is
    ``"pass"``: the samples fit, the exact law where it was computed, and every applicable planted bug would have
    been caught. ``require_power=False`` accepts a fit without measured power (``NO POWER``, or ``controls=False``
    with a suite's own negative controls); the returned report's :attr:`~E2EReport.verdict` still says which. A
    decoder the kit cannot plant bugs in (one that is not a ``SpeculativeGenerator``, e.g. ``VanillaGenerator``) has
    no measured power, so it passes only with ``require_power=False``."""
    report = e2e_check(decoder, model, prompt, sampling, n_samples, n_tokens, seed, alpha, n_tests, exact, controls)
    if not report.passed or (require_power and report.verdict != "pass"):
        raise AssertionError(f"{_describe(decoder)} with {sampling}: {report.summary()}")
    return report


def _control_names(controls: bool | str | Sequence[str] | None) -> list[str] | None:
    """``e2e_check``'s ``controls`` as names (None: every applicable control; ``False`` or None: none)."""
    if controls is True:
        return None
    if controls is False or controls is None:
        return []
    return [controls] if isinstance(controls, str) else list(controls)


def _describe(decoder: Decoder) -> str:
    parts = []
    if hasattr(decoder, "drafter"):
        parts.append(f"drafter={type(decoder.drafter).__name__}")
    parts += [f"{name}={getattr(decoder, name)!r}" for name in ("policy", "verifier") if hasattr(decoder, name)]
    return f"{type(decoder).__name__}({', '.join(parts)})"

"""The exact law of a whole decoding pipeline's first tokens, by enumerating its random choices through the loop.

:func:`specdec.testing.e2e.exact_sequence_distribution` is what a lossless decoder must produce; this module
computes what a given :class:`~specdec.generate.SpeculativeGenerator` *does* produce, without sampling. Where a
pipeline's only random choices are the first token and the verifier's walk (trees of deterministic candidates,
any :class:`~specdec.verify.base.PlanVerifier`), its law over the first ``n`` tokens is a finite sum over
histories: the first token, then one outcome (end node, bonus token) per cycle. Each history is **replayed
through the decoder's own loop** (``generate``: prefill, drafter, policy, the target's cached tree forwards,
commits), with two seams and nothing else changed:

* the first token is forced by the target's prefill logits (one finite entry: ``warp`` then gives a point mass),
  and its probability read from the real logits;
* the verifier is wrapped: on the replayed cycles it returns the scripted verdict, and on the next cycle it
  returns the law of every outcome: ``stop_law(tree, plan)`` (the walk's own :func:`~specdec.verify.walk.end_nodes`
  over every outcome of the coins) times the residual row the walk would draw the bonus from.

So state carried between cycles (cache compaction, drafter commits, an adaptive policy's observations) is what the
loop leaves, and a bug there shows in the law. Contract for the policy: at this sampling it grows the same tree
for the same history (``policy.kind(sampling).sampled`` false; it may learn from earlier cycles); it is
deep-copied before each replay so that every replay starts from the state the pipeline had. Cost: one replay per
history shorter than ``n`` tokens, i.e. about ``V ** (n - 1)`` replays of ``n - 1`` cycles at most: a tool for
tiny vocabularies.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import torch

from specdec.calls import StopCondition
from specdec.generate import SpeculativeGenerator
from specdec.interfaces import TargetStep, Verdict
from specdec.sampling import SamplingParams, warp
from specdec.testing.coverage import Coverage, node_events
from specdec.testing.exact import MAX_ENUMERATED_NODES, _effective_residual, stop_probabilities
from specdec.testing.wrapped import WrappedVerifier
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier

__all__ = ["NotEnumerableError", "PipelineLaw", "enumerable", "pipeline_law", "policy_copy"]


class NotEnumerableError(ValueError):
    """The pipeline makes random choices this module cannot enumerate (sampled trees, a verifier without a plan)."""


@dataclass
class PipelineLaw:
    """What :func:`pipeline_law` computed.

    Attributes:
        law: ``[V] * n_tokens`` float64, the probability of each continuation.
        coverage: the walk's events weighted by probability (expected counts per generated sequence).
        replays: how many histories were replayed through the loop.
    """

    law: torch.Tensor
    coverage: Coverage = field(default_factory=Coverage)
    replays: int = 0


class _Frontier(Exception):
    """Raised inside a replay at the first unscripted random choice, carrying its outcomes."""

    def __init__(self, outcomes: list[tuple[list[int], float, int]], coverage: Coverage) -> None:
        super().__init__("frontier")
        self.outcomes = outcomes  # (emitted tokens, probability, end node)
        self.coverage = coverage


class _ForcedFirstToken:
    """A target whose prefill logits are a point mass on ``token`` (``None``: report the law and stop)."""

    def __init__(self, target, token: int | None, sampling: SamplingParams) -> None:
        self._target, self._token, self._sampling = target, token, sampling

    def __getattr__(self, name: str):
        return getattr(self._target, name)

    def prefill(self, input_ids: torch.Tensor) -> TargetStep:
        step = self._target.prefill(input_ids)
        if self._token is None:
            p = warp(step.logits[0], self._sampling, torch.float64).cpu()
            raise _Frontier([([t], float(p[t]), 0) for t in torch.nonzero(p > 0).flatten().tolist()], Coverage())
        forced = torch.full_like(step.logits, -torch.inf)
        forced[..., self._token] = 0.0
        return dataclasses.replace(step, logits=forced)


class _ScriptedVerifier(WrappedVerifier):
    """Replays ``script`` (one ``(end node, bonus)`` per cycle), then raises the next cycle's outcome law."""

    def __init__(self, inner: PlanVerifier, script: tuple[tuple[int, int], ...]) -> None:
        super().__init__(inner)
        self.script, self.calls = script, 0

    def verify(
        self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
    ) -> Verdict:
        if self.calls < len(self.script):
            node, bonus = self.script[self.calls]
            self.calls += 1
            return Verdict(
                accepted=tree.paths[node],
                accept_length=tree.depth[node],
                bonus_token=torch.tensor(bonus, device=tree.device),
            )
        plan = self.inner.plan(tree, target_logits, sampling)
        stop = getattr(self.inner, "stop_law", stop_probabilities)(tree, plan)  # [N] float64
        rows = _effective_residual(plan).to("cpu", torch.float64)  # [N, V], as the sampler reads them
        tokens, paths = tree.tokens.cpu(), tree.paths.cpu()
        outcomes = []
        for node in torch.nonzero(stop > 0).flatten().tolist():
            path = [int(tokens[i]) for i in paths[node, 1:] if i >= 0]
            for bonus in torch.nonzero(rows[node] > 0).flatten().tolist():
                outcomes.append(([*path, bonus], float(stop[node] * rows[node, bonus]), node))
        coverage = Coverage()
        coverage.add(node_events(tree), stop, tree.depth)
        raise _Frontier(outcomes, coverage)


def enumerable(decoder: object, sampling: SamplingParams) -> str | None:
    """Why :func:`pipeline_law` cannot enumerate ``decoder`` at ``sampling``, or ``None`` if it can."""
    if not isinstance(decoder, SpeculativeGenerator):
        return f"{type(decoder).__name__} is not a SpeculativeGenerator"
    policy, verifier = decoder.parts_for(sampling)
    if policy.kind(sampling).sampled:
        return "its tree policy draws the candidates at this sampling (a sampled tree)"
    if not isinstance(verifier, PlanVerifier):
        return f"{type(verifier).__name__} is not a PlanVerifier (no plan to enumerate)"
    own_law = hasattr(verifier, "stop_law")
    if type(verifier).verify is not PlanVerifier.verify and not own_law:
        return f"{type(verifier).__name__} overrides verify() and gives no stop_law(tree, plan) for its walk"
    if policy.max_nodes - 1 > MAX_ENUMERATED_NODES and not own_law:
        return (
            f"its trees have up to {policy.max_nodes} nodes (the walk is enumerated up to {MAX_ENUMERATED_NODES + 1})"
        )
    return None


def policy_copy(decoder: SpeculativeGenerator):
    """A deep copy of ``decoder``'s tree policy (its learnt state included), sharing the target and the drafter."""
    return copy.deepcopy(decoder.policy, {id(decoder.target): decoder.target, id(decoder.drafter): decoder.drafter})


def _replay(
    decoder: SpeculativeGenerator,
    verifier: PlanVerifier,
    prompt: torch.Tensor,
    sampling: SamplingParams,
    first: int | None,
    script: tuple[tuple[int, int], ...],
    budget: int,
) -> _Frontier:
    """Run the loop along one history and return the outcomes of its next random choice."""
    policy = policy_copy(decoder)
    target = _ForcedFirstToken(decoder.target, first, sampling)
    loop = SpeculativeGenerator(target, decoder.drafter, policy, _ScriptedVerifier(verifier, script))
    g = torch.Generator(device=decoder.target.device).manual_seed(0)  # draws the forced first token only
    try:
        loop.generate(prompt, sampling, StopCondition(max_new_tokens=budget, eos_token_ids=()), g, speculate="always")
    except _Frontier as frontier:
        return frontier
    raise AssertionError("the loop ended before the scripted history did: a stop condition cut it short")


def pipeline_law(
    decoder: SpeculativeGenerator, prompt: torch.Tensor, sampling: SamplingParams, n_tokens: int = 3
) -> PipelineLaw:
    """The exact distribution of ``decoder``'s first ``n_tokens`` tokens after ``prompt`` at ``sampling``.

    Args:
        decoder: a speculative decoder with trees of deterministic candidates at ``sampling`` and a
            :class:`~specdec.verify.base.PlanVerifier` (pinned, or the one it picks). A verifier whose walk is not
            the shared one with independent coins gives its own ``stop_law(tree, plan) -> [N]``.
        prompt: ``[L]`` long.
        sampling, n_tokens: as for :func:`specdec.testing.e2e.exact_sequence_distribution`.

    Returns:
        :class:`PipelineLaw` (float64 law over ``V ** n_tokens`` continuations; its mass is 1 up to rounding
        unless a plan leaks mass).

    Raises:
        NotEnumerableError: the pipeline draws its trees, or its verifier has no plan (see :func:`enumerable`).
    """
    reason = enumerable(decoder, sampling)
    if reason is not None:
        raise NotEnumerableError(f"cannot enumerate this pipeline: {reason}; sample it instead")
    _, verifier = decoder.parts_for(sampling)
    vocab = int(decoder.target.vocab_size)
    law = torch.zeros((vocab,) * n_tokens, dtype=torch.float64)
    out = PipelineLaw(law)
    out.coverage.runs = 1.0
    first = _replay(decoder, verifier, prompt, sampling, None, (), n_tokens)
    # A history: (first token, scripted outcomes, tokens emitted so far, probability).
    stack = [(tokens[0], (), tokens, prob) for tokens, prob, _ in first.outcomes]
    while stack:
        token0, script, emitted, prob = stack.pop()
        if len(emitted) >= n_tokens:
            law[tuple(emitted[:n_tokens])] += prob
            continue
        frontier = _replay(decoder, verifier, prompt, sampling, token0, script, n_tokens)
        out.replays += 1
        for k, v in frontier.coverage.totals.items():
            out.coverage.totals[k] += prob * v
        for d, m in frontier.coverage.depths.items():
            out.coverage.depths[d] = out.coverage.depths.get(d, 0.0) + prob * m
        for tokens, p, node in frontier.outcomes:
            stack.append((token0, (*script, (node, tokens[-1])), [*emitted, *tokens], prob * p))
    return out

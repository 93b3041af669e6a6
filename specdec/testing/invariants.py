"""Cycle invariants: after every cycle, the decoder's state equals a fresh start fed the same tokens.

A speculative loop carries state from cycle to cycle: the target's KV cache (compacted to the accepted path) and
the drafter's own state (its cache, pending features, n-gram history). A bug there (compacting the wrong entries,
a drafter that forgets a committed token) is invisible at the first cycle and in greedy tests whose drafts are
always rejected. :func:`check_cycle_invariants` runs a decoder once and, at every target forward and every
drafter expansion, compares the live objects with *fresh* ones that were given every committed token from scratch:

* **target**: a fresh target prefilled with the committed tokens must return the same logits and hidden states
  for the same tree; for :class:`~specdec.target.HFTarget` the committed part of every layer's keys and values
  must equal the fresh prefill's too;
* **drafter**: a fresh drafter, prefilled with the committed tokens and the fresh target's hidden states at them,
  must return the same draft logits for every expansion of the same partial tree.

The decoder runs with its own generator and the checks consume no randomness, so the checked run emits exactly
the tokens an unchecked run with the same seed emits.

Typical use (tiny random models)::

    report = check_cycle_invariants(decoder, lambda: HFTarget(model, max_len=64), make_my_drafter,
                                    prompt, SamplingParams(temperature=1.0), StopCondition(24), seed=0)
    assert report.cycles_after_acceptance > 0   # state carried past accepted drafts was really checked
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specdec.errors import SpecdecError
from specdec.generate import GenerationResult, SpeculativeGenerator, StopCondition
from specdec.interfaces import Drafter, HiddenRequest, Target, TargetHidden, TargetStep
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree, PartialTree

__all__ = ["CycleInvariantError", "InvariantReport", "check_cycle_invariants"]


class CycleInvariantError(SpecdecError, AssertionError):
    """The live decoder's state differs from a fresh start fed the same tokens."""


@dataclass
class InvariantReport:
    """What :func:`check_cycle_invariants` compared.

    Attributes:
        result: the generation (identical to an unchecked run with the same seed).
        target_checks: target forwards compared (one per cycle).
        draft_checks: drafter expansions compared.
        cycles_after_acceptance: cycles that started after a cycle which accepted at least one draft token.
        max_error: the largest absolute difference seen (logits, hidden states, keys/values).
    """

    result: GenerationResult
    target_checks: int = 0
    draft_checks: int = 0
    cycles_after_acceptance: int = 0
    max_error: float = 0.0


class _Checker:
    def __init__(
        self, fresh_target: Callable[[], Target], fresh_drafter: Callable[[], Drafter], atol: float, rtol: float
    ) -> None:
        self.fresh_target, self.fresh_drafter, self.atol, self.rtol = fresh_target, fresh_drafter, atol, rtol
        self.committed = torch.zeros(0, dtype=torch.long)
        self.request = HiddenRequest()
        self.report_counts = [0, 0, 0]  # target checks, draft checks, cycles after acceptance
        self.max_error = 0.0
        self.last_accepted = 0
        self._fresh: tuple[Target, TargetHidden] | None = None

    def fresh(self) -> tuple[Target, TargetHidden]:
        """A fresh target prefilled with every committed token, and its hidden states there (cached per cycle)."""
        if self._fresh is None:
            target = self.fresh_target()
            target.request_hidden(self.request)
            target.reset()
            self._fresh = (target, target.prefill(self.committed).hidden)
        return self._fresh

    def compare(self, what: str, live: torch.Tensor | None, ref: torch.Tensor | None) -> None:
        if live is None and ref is None:
            return
        if live is None or ref is None or live.shape != ref.shape:
            raise CycleInvariantError(f"{what}: shapes differ (live {_shape(live)}, fresh {_shape(ref)})")
        a, b = live.detach().float().cpu(), ref.detach().float().cpu()
        finite = torch.isfinite(a) & torch.isfinite(b)
        if not torch.equal(torch.isfinite(a), torch.isfinite(b)) or not torch.equal(a[~finite], b[~finite]):
            raise CycleInvariantError(f"{what}: the non-finite entries differ after {self.committed.numel()} tokens")
        if not bool(finite.any()):
            return
        diff, scale = (a[finite] - b[finite]).abs(), b[finite].abs()
        self.max_error = max(self.max_error, float(diff.max()))
        worst = int((diff - self.rtol * scale).argmax())
        if float(diff[worst]) > self.atol + self.rtol * float(scale[worst]):
            raise CycleInvariantError(
                f"{what}: live and fresh differ by {float(diff[worst]):.3g} at a value of {float(scale[worst]):.3g} "
                f"(> atol={self.atol:g} + rtol={self.rtol:g} * |value|) after {self.committed.numel()} committed "
                "tokens (state carried between cycles is wrong)"
            )

    def compare_hidden(self, what: str, live: TargetHidden, ref: TargetHidden) -> None:
        self.compare(f"{what} final hidden state", live.final, ref.final)
        for i in live.layers:
            self.compare(f"{what} hidden state of layer {i}", live.layers[i], ref.layers.get(i))


def _shape(x: torch.Tensor | None) -> object:
    return None if x is None else tuple(x.shape)


class _CheckedTarget(Target):
    """Delegates to the live target; compares every tree forward (and HF caches) with a fresh prefill."""

    def __init__(self, live: Target, checker: _Checker) -> None:
        self.live, self.checker = live, checker
        self.vocab_size, self.max_len, self.eos_token_ids = live.vocab_size, live.max_len, live.eos_token_ids
        self._tree: DraftTree | None = None

    def __getattr__(self, name: str):  # device, dtype, model, ...
        return getattr(self.live, name)

    @property
    def length(self) -> int:
        return self.live.length

    def request_hidden(self, request: HiddenRequest) -> None:
        self.checker.request = self.checker.request | request
        self.live.request_hidden(request)

    def reset(self) -> None:
        self.live.reset()

    def prefill(self, input_ids: torch.Tensor) -> TargetStep:
        self.checker.committed = input_ids.detach().cpu().long()
        self.checker._fresh = None
        return self.live.prefill(input_ids)

    def forward_tree(self, tree: DraftTree) -> TargetStep:
        checker = self.checker
        fresh, _ = checker.fresh()
        _compare_caches(checker, self.live, fresh)
        step = self.live.forward_tree(tree)
        ref = fresh.forward_tree(tree)
        checker.compare("target logits of the tree", step.logits, ref.logits)
        checker.compare_hidden("target", step.hidden, ref.hidden)
        checker.report_counts[0] += 1
        checker.report_counts[2] += checker.last_accepted > 0
        self._tree = tree
        return step

    def commit(self, accepted: torch.Tensor, count: int) -> None:
        assert self._tree is not None
        tokens = self._tree.tokens[accepted[:count]].detach().cpu().long()
        self.live.commit(accepted, count)
        self.checker.committed = torch.cat([self.checker.committed, tokens])
        self.checker.last_accepted = count - 1
        self.checker._fresh = None


def _compare_caches(checker: _Checker, live: Target, fresh: Target) -> None:
    """Keys and values of the committed prefix, layer by layer, for targets with a position cache (HFTarget)."""
    if live.length != fresh.length:
        raise CycleInvariantError(f"target length {live.length} != {fresh.length} committed tokens")
    live_cache, fresh_cache = getattr(live, "cache", None), getattr(fresh, "cache", None)
    if live_cache is None or fresh_cache is None:
        return
    n = live.length
    for i, (a, b) in enumerate(zip(live_cache.layers, fresh_cache.layers, strict=True)):
        if getattr(a, "is_initialized", False) and getattr(b, "is_initialized", False):
            checker.compare(f"cached keys of layer {i}", a.keys[:, :, :n], b.keys[:, :, :n])
            checker.compare(f"cached values of layer {i}", a.values[:, :, :n], b.values[:, :, :n])


class _CheckedDrafter(Drafter):
    """Delegates to the live drafter; compares every expansion with a fresh drafter fed the committed tokens."""

    def __init__(self, live: Drafter, checker: _Checker) -> None:
        self.live, self.checker = live, checker
        self.vocab_size, self.hidden_request = live.vocab_size, live.hidden_request
        self._fresh: Drafter | None = None

    def reset(self) -> None:
        self.live.reset()

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        self.live.prefill(input_ids, hidden)

    def _fresh_for(self, frontier: torch.Tensor) -> Drafter:
        checker = self.checker
        if self._fresh is None or bool((frontier == 0).all()) and frontier.numel() == 1:  # a new tree
            _, hidden = checker.fresh()
            self._fresh = checker.fresh_drafter()
            self._fresh.reset()
            self._fresh.prefill(checker.committed.to(frontier.device), hidden)
        return self._fresh

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        fresh = self._fresh_for(frontier)
        logits = self.live.expand(tree, frontier)
        self.checker.compare("draft logits", logits, fresh.expand(tree, frontier))
        self.checker.report_counts[1] += 1
        return logits

    def expand_draft(self, tree: PartialTree, frontier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The live drafter's own draft-vocabulary path (what an unchecked sampled tree executes), placed at its target
        ids and checked against the fresh drafter's full row."""
        fresh = self._fresh_for(frontier)
        logits, ids = self.live.expand_draft(tree, frontier)
        reference = fresh.expand(tree, frontier)
        placed = (
            logits
            if ids is None
            else torch.full_like(reference, float("-inf")).index_copy(-1, ids, logits.to(reference.dtype))
        )
        self.checker.compare("draft logits", placed, reference)
        self.checker.report_counts[1] += 1
        return logits, ids

    def expand_topk(self, tree: PartialTree, frontier: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The live drafter's own top-k path (what an unchecked run executes), checked against the fresh drafter's
        full distribution: the live tokens carry the fresh log q the live drafter claims, and their values are the
        fresh row's top values (so near-tie swaps pass and a wrong token or a non-top token fails).
        """
        fresh = self._fresh_for(frontier)
        logq, tokens = self.live.expand_topk(tree, frontier, k)
        fresh_logq = torch.log_softmax(fresh.expand(tree, frontier).float(), dim=-1)  # [F, V]
        self.checker.compare("draft top-k log q", logq, fresh_logq.gather(-1, tokens))
        self.checker.compare("draft top-k values", logq, torch.topk(fresh_logq, tokens.shape[-1], dim=-1).values)
        self.checker.report_counts[1] += 1
        return logq, tokens

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        self.live.commit(tokens, hidden)
        self._fresh = None


def check_cycle_invariants(
    decoder: SpeculativeGenerator,
    fresh_target: Callable[[], Target],
    fresh_drafter: Callable[[], Drafter],
    prompt: torch.Tensor,
    sampling: SamplingParams,
    stop: StopCondition,
    seed: int = 0,
    atol: float = 1e-4,
    rtol: float = 1e-4,
) -> InvariantReport:
    """Run ``decoder`` once, comparing its state after every cycle with a fresh start (see the module docstring).

    Args:
        decoder: the speculative generator to check (its target, drafter, policy and verifier are used).
        fresh_target: builds a new target of the same model (each call gets a fresh cache).
        fresh_drafter: builds a new drafter equal to the decoder's before any token (same weights).
        prompt: ``[L]`` prompt ids.
        sampling, stop: the generation settings.
        seed: seed of the decoder's ``torch.Generator``.
        atol, rtol: allowed difference ``atol + rtol * |fresh value|`` (float rounding between a cached and an
            uncached forward, and between forwards over different numbers of rows).

    Raises:
        CycleInvariantError: naming the first state that differs and by how much.
    """
    checker = _Checker(fresh_target, fresh_drafter, atol, rtol)
    target = _CheckedTarget(decoder.target, checker)
    drafter = _CheckedDrafter(decoder.drafter, checker)
    checked = SpeculativeGenerator(target, drafter, decoder.policy, decoder.verifier)
    g = torch.Generator(device=decoder.target.device).manual_seed(seed)
    result = checked.generate(prompt, sampling, stop, g, speculate="always")  # the policy's own cycles
    t, d, after = checker.report_counts
    return InvariantReport(result, t, d, after, checker.max_error)

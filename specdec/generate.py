"""Decoding loops: speculative (drafter + tree policy + verifier) and vanilla, on the same target adapter.

One speculative cycle::

    tree    = policy.grow(drafter, root)        # draft
    step    = target.forward_tree(tree)         # target
    verdict = verifier.verify(tree, step.logits) # verify
    <one host sync: accept length, bonus, accepted tokens, logits finite>
    target.commit(...); drafter.commit(...)     # bookkeeping

The root is the token emitted last (not yet in the target's cache); a cycle emits the accepted draft tokens
and then the bonus token, which becomes the next root. τ counts the bonus token.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from specdec.interfaces import Drafter, Target, TreePolicy, Verifier, VocabMismatchError
from specdec.kvcache import CacheFullError
from specdec.sampling import NonFiniteLogitsError, SamplingParams, check_finite, logits_ok, sample, warp

__all__ = ["GenerationMetrics", "GenerationResult", "StopCondition", "SpeculativeGenerator", "VanillaGenerator"]


@dataclass
class GenerationMetrics:
    """Per-generation counters. Times are wall-clock seconds (on CUDA, a phase's time lands where it syncs).

    Attributes:
        new_tokens: tokens emitted (the first one comes from the prefill).
        accept_lengths: accepted draft tokens per cycle (τ of a cycle is this + 1).
        tree_depths: depth bound of each cycle's tree (for per-depth acceptance).
        tree_sizes: nodes (root included) of each cycle's tree.
    """

    new_tokens: int = 0
    accept_lengths: list[int] = field(default_factory=list)
    tree_depths: list[int] = field(default_factory=list)
    tree_sizes: list[int] = field(default_factory=list)
    time_prefill: float = 0.0
    time_draft: float = 0.0
    time_target: float = 0.0
    time_verify: float = 0.0
    time_bookkeeping: float = 0.0
    time_total: float = 0.0

    @property
    def cycles(self) -> int:
        """Target forwards after the prefill."""
        return len(self.accept_lengths)

    @property
    def tau(self) -> float:
        """Mean tokens per target forward, bonus token included."""
        return sum(a + 1 for a in self.accept_lengths) / max(1, self.cycles)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.time_total if self.time_total > 0 else 0.0

    def acceptance_per_depth(self) -> list[float]:
        """n-α: P(draft token at depth n accepted | depths < n accepted), for n = 1 .. max depth."""
        rates = []
        for n in range(1, max(self.tree_depths, default=0) + 1):
            reached = [a for a, d in zip(self.accept_lengths, self.tree_depths, strict=True) if a >= n - 1 and d >= n]
            if reached:
                rates.append(sum(a >= n for a in reached) / len(reached))
        return rates

    def time_split(self) -> dict[str, float]:
        """Fractions of the decode time (prefill excluded) spent in each phase."""
        phases = {
            "draft": self.time_draft,
            "target": self.time_target,
            "verify": self.time_verify,
            "bookkeeping": self.time_bookkeeping,
        }
        total = sum(phases.values()) or 1.0
        return {k: v / total for k, v in phases.items()}

    def summary(self) -> str:
        split = " ".join(f"{k}={v:.0%}" for k, v in self.time_split().items())
        return (
            f"{self.new_tokens} tokens in {self.time_total:.2f}s = {self.tokens_per_second:.1f} tok/s, "
            f"tau={self.tau:.2f} over {self.cycles} target forwards ({split})"
        )


@dataclass
class GenerationResult:
    """A finished generation.

    Attributes:
        tokens: the generated ids (EOS or the stop string's tokens included).
        finish_reason: ``"eos"``, ``"stop"`` (a stop string) or ``"length"`` (the budget).
        metrics: counters and timings.
        prompt: the prompt's ids, as the target saw them.
    """

    tokens: list[int]
    finish_reason: str
    metrics: GenerationMetrics
    prompt: list[int] = field(default_factory=list)

    @property
    def sequences(self) -> torch.Tensor:
        """``[1, L + n]`` prompt and generated ids, as ``model.generate`` returns them."""
        return torch.tensor([self.prompt + self.tokens], dtype=torch.long)


@dataclass
class StopCondition:
    """When to stop: EOS ids, stop strings (needs a ``decode`` function), a token budget.

    ``eos_token_ids=None`` (the default) means the target's own EOS ids (its generation config, as ``generate``
    uses them); ``()`` means none.
    """

    max_new_tokens: int = 128
    eos_token_ids: Sequence[int] | None = None
    stop_strings: Sequence[str] = ()
    decode: Callable[[list[int]], str] | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.stop_strings and self.decode is None:
            raise ValueError("stop_strings need a decode function (e.g. tokenizer.decode)")

    def for_target(self, target: Target) -> StopCondition:
        """This condition with the target's EOS ids filled in where it names none."""
        if self.eos_token_ids is not None:
            return self
        return dataclasses.replace(self, eos_token_ids=tuple(target.eos_token_ids))

    def check(self, tokens: list[int]) -> str | None:
        """Reason to stop after ``tokens`` (all generated so far), or None."""
        if tokens and tokens[-1] in (self.eos_token_ids or ()):
            return "eos"
        if self.stop_strings:
            tail = self.decode(tokens[-64:])  # type: ignore[misc]
            if any(s in tail for s in self.stop_strings):
                return "stop"
        if len(tokens) >= self.max_new_tokens:
            return "length"
        return None


def _generator(sampling: SamplingParams, device: torch.device, generator: torch.Generator | None) -> torch.Generator:
    if generator is not None:
        return generator
    g = torch.Generator(device=device)
    if sampling.seed is not None:
        g.manual_seed(sampling.seed)
    else:
        g.seed()
    return g


def _prepare(
    target: Target, input_ids: torch.Tensor | Sequence[int], stop: StopCondition, extra: int
) -> tuple[torch.Tensor, StopCondition]:
    """The prompt as ``[L]`` long on the target's device, and ``stop`` with the target's EOS ids if it names none.

    Accepts ``[L]`` or ``[1, L]`` (what a tokenizer returns with ``return_tensors="pt"``) tensors or a list of ids.
    """
    if not isinstance(input_ids, torch.Tensor):
        input_ids = torch.as_tensor(list(input_ids), dtype=torch.long)
    if input_ids.ndim == 2:
        if input_ids.shape[0] != 1:
            raise ValueError(
                f"prompt has batch size {input_ids.shape[0]}; specdec decodes one sequence at a time: pass a [L] or "
                "[1, L] prompt (one row) per call"
            )
        input_ids = input_ids[0]
    if input_ids.ndim != 1:
        raise ValueError(f"prompt must be [L] or [1, L] token ids, got shape {tuple(input_ids.shape)}")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"prompt must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.numel():  # an empty prompt is reported by the target's prefill (EmptyPromptError)
        lo, hi = (int(x) for x in torch.aminmax(input_ids))
        if lo < 0 or hi >= target.vocab_size:
            raise ValueError(
                f"prompt token ids must be in [0, {target.vocab_size}) (the target's vocabulary), got ids from "
                f"{lo} to {hi}; was it encoded with another tokenizer?"
            )
    need = input_ids.shape[-1] + stop.max_new_tokens + extra
    if need > target.max_len:
        raise CacheFullError(
            f"prompt ({input_ids.shape[-1]}) + max_new_tokens ({stop.max_new_tokens}) + one tree/step ({extra}) "
            f"= {need} tokens exceed the target cache of {target.max_len}; raise max_len"
        )
    return input_ids.to(target.device, torch.long), stop.for_target(target)


def _first_token(target: Target, input_ids: torch.Tensor, sampling: SamplingParams, g: torch.Generator):
    step = target.prefill(input_ids)
    check_finite(step.logits, "target logits at the end of the prompt")
    return step, sample(warp(step.logits[0], sampling), g)


class VanillaGenerator:
    """Plain autoregressive decoding on the same adapter and the same ``warp``: the fair baseline."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def stream(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
        generator: torch.Generator | None = None,
        metrics: GenerationMetrics | None = None,
    ) -> Iterator[int]:
        """Yield generated token ids one by one. ``input_ids``: ``[L]`` or ``[1, L]`` prompt."""
        metrics = metrics if metrics is not None else GenerationMetrics()
        input_ids, stop = _prepare(self.target, input_ids, stop, 1)
        g = _generator(sampling, self.target.device, generator)
        t0 = time.perf_counter()
        _, token = _first_token(self.target, input_ids, sampling, g)
        metrics.time_prefill = time.perf_counter() - t0
        out: list[int] = []
        token_id = int(token)  # the prefill's sync
        while True:
            out.append(token_id)
            metrics.new_tokens = len(out)
            metrics.time_total = time.perf_counter() - t0
            yield out[-1]
            if stop.check(out):
                return
            t1 = time.perf_counter()
            step = self.target.decode_one(token)
            logits = step.logits[0]
            next_token = logits.argmax() if sampling.greedy else sample(warp(logits, sampling), g)
            token_ok = torch.stack([next_token, logits_ok(step.logits).long()]).tolist()  # the step's one sync
            if not token_ok[1]:
                raise NonFiniteLogitsError("target logits contain NaN/+inf values")
            token, token_id = next_token, token_ok[0]
            metrics.accept_lengths.append(0)
            metrics.tree_depths.append(0)
            metrics.tree_sizes.append(1)
            metrics.time_target += time.perf_counter() - t1

    def generate(
        self, input_ids: torch.Tensor, sampling: SamplingParams, stop: StopCondition, generator=None
    ) -> GenerationResult:
        return _collect(self.stream, self.target, input_ids, sampling, stop, generator)


def _collect(stream_fn, target: Target, input_ids, sampling, stop, generator) -> GenerationResult:
    metrics = GenerationMetrics()
    tokens = list(stream_fn(input_ids, sampling, stop, generator, metrics))
    prompt, stop = _prepare(target, input_ids, stop, 0)
    return GenerationResult(tokens, stop.check(tokens) or "length", metrics, prompt.tolist())


class SpeculativeGenerator:
    """Speculative decoding composed from a drafter, a tree policy and a verifier.

    Args:
        target: the target adapter (its cache must hold prompt + max_new_tokens + one tree).
        drafter: proposes draft distributions; its vocabulary must equal the target's.
        policy: shapes the tree (static, dynamic, stochastic).
        verifier: must match the policy's candidate kind (deterministic or stochastic); the verifiers
            raise if given the wrong kind of tree.
    """

    def __init__(self, target: Target, drafter: Drafter, policy: TreePolicy, verifier: Verifier) -> None:
        if drafter.vocab_size != target.vocab_size:
            raise VocabMismatchError(
                f"drafter vocabulary ({drafter.vocab_size}) differs from the target's ({target.vocab_size}); "
                "a drafter must share the target's tokenizer"
            )
        if policy.max_nodes >= target.max_len:
            raise CacheFullError(
                f"the policy's trees ({policy.max_nodes} nodes) do not fit the target cache of {target.max_len}"
            )
        self.target, self.drafter, self.policy, self.verifier = target, drafter, policy, verifier
        target.request_hidden(drafter.hidden_request)

    def stream(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
        generator: torch.Generator | None = None,
        metrics: GenerationMetrics | None = None,
    ) -> Iterator[int]:
        """Yield generated token ids as cycles accept them. ``input_ids``: ``[L]`` or ``[1, L]`` prompt."""
        metrics = metrics if metrics is not None else GenerationMetrics()
        target, drafter = self.target, self.drafter
        input_ids, stop = _prepare(target, input_ids, stop, self.policy.max_nodes)
        g = _generator(sampling, target.device, generator)
        t0 = time.perf_counter()
        drafter.reset()
        step, root = _first_token(target, input_ids, sampling, g)
        drafter.prefill(input_ids, step.hidden)
        metrics.time_prefill = time.perf_counter() - t0
        out = [int(root)]
        metrics.new_tokens = 1
        metrics.time_total = time.perf_counter() - t0
        yield out[0]
        if stop.check(out):
            return
        while True:
            t1 = time.perf_counter()
            tree = self.policy.grow(drafter, root, sampling, g)
            t2 = time.perf_counter()
            step = target.forward_tree(tree)
            t3 = time.perf_counter()
            verdict = self.verifier.verify(tree, step.logits, sampling, g)
            accepted = verdict.accepted
            # The cycle's one host sync: accept length, bonus token, logits health, accepted tokens, and the
            # policy's payload (float64 holds every token id exactly).
            ints = torch.cat(
                [
                    verdict.accept_length.reshape(1),
                    verdict.bonus_token.reshape(1),
                    logits_ok(step.logits).reshape(1).long(),
                    tree.tokens[accepted.clamp(min=0)],
                ]
            )
            extra = self.policy.sync_payload()
            width = ints.shape[0]
            packed = (ints if extra is None else torch.cat([ints.double(), extra.double()])).tolist()
            t4 = time.perf_counter()
            n_acc, bonus, ok = int(packed[0]), int(packed[1]), packed[2]
            path = [int(t) for t in packed[3:width]]
            if not ok:
                raise NonFiniteLogitsError("target logits contain NaN/+inf values during a tree forward")
            count = n_acc + 1
            self.policy.observe(n_acc, None if extra is None else packed[width:])
            target.commit(accepted, count)
            drafter.commit(tree.tokens[accepted[:count]], step.hidden.select(accepted[:count]))
            root = verdict.bonus_token
            metrics.accept_lengths.append(n_acc)
            metrics.tree_depths.append(tree.max_depth)
            metrics.tree_sizes.append(tree.num_nodes)
            new = path[1:count] + [bonus]
            t5 = time.perf_counter()
            metrics.time_draft += t2 - t1
            metrics.time_target += t3 - t2
            metrics.time_verify += t4 - t3
            metrics.time_bookkeeping += t5 - t4
            for token in new:
                out.append(token)
                metrics.new_tokens = len(out)
                metrics.time_total = time.perf_counter() - t0
                yield token
                if stop.check(out):
                    return

    def generate(
        self, input_ids: torch.Tensor, sampling: SamplingParams, stop: StopCondition, generator=None
    ) -> GenerationResult:
        """Run to completion; see :meth:`stream`."""
        return _collect(self.stream, self.target, input_ids, sampling, stop, generator)

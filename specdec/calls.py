"""What a decoding call takes and returns: the prompt, the stop condition, the metrics and the result.

Shared by both loops of :mod:`specdec.generate`: :func:`prepare_call` validates a prompt against the target (ids in
its vocabulary, room in its cache) and fills a stop condition's defaults from the target (its EOS ids and token
budget), before any token is generated.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.errors import SpecdecError
from specdec.interfaces import Target
from specdec.kvcache import CacheFullError
from specdec.sampling import SamplingParams

__all__ = [
    "GenerationMetrics",
    "GenerationResult",
    "Prompt",
    "StopCondition",
    "TargetTakenError",
    "call_settings",
    "check_claim",
    "claim",
    "encode_prompt",
    "make_generator",
    "prepare_call",
]


class TargetTakenError(SpecdecError, RuntimeError):
    """A stream resumed after another generation (or a direct prefill or reset) used its target's cache."""


def claim(target: Target) -> object:
    """Mark ``target``'s cache as the new stream's (right after its prefill); returns the stream's claim.

    Contract: a target's cache holds one sequence, so it serves one stream at a time. The decoding loops call
    :func:`check_claim` before every forward after the prefill; a later prefill by another stream re-claims the
    target (and :class:`~specdec.target.HFTarget` drops the claim on any prefill or reset), so a stream that resumes
    after that raises instead of decoding from another sequence's cache.
    """
    token = object()
    target.stream_claim = token
    return token


def check_claim(target: Target, token: object) -> None:
    """Raise :class:`TargetTakenError` unless ``target``'s cache is still the stream's that holds ``token``."""
    if getattr(target, "stream_claim", None) is not token:
        raise TargetTakenError(
            "this stream's target was used by another generation (or prefilled or reset) since the stream began, so "
            "its cache no longer holds this stream's tokens; a target serves one stream at a time: finish a stream "
            "before starting another on the same target, or give each its own target (HFTarget.sibling(max_len))"
        )


@dataclass
class GenerationMetrics:
    """Per-generation counters. Times are wall-clock seconds (on CUDA, a phase's time lands where it syncs).

    Attributes:
        new_tokens: tokens emitted (the first one comes from the prefill).
        accept_lengths: accepted draft tokens per cycle (τ of a cycle is this + 1).
        tree_depths: depth bound of each cycle's tree (for per-depth acceptance).
        tree_sizes: nodes (root included) of each cycle's tree.
        time_*: wall-clock seconds per phase, summed over the generation (:meth:`cycle_ms`: per cycle).
        cycles: target forwards after the prefill (one per cycle; a vanilla step is a cycle of accept length 0).
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

    def phase_seconds(self) -> dict[str, float]:
        """Seconds of the decode (prefill excluded) in each phase: draft, target, verify, bookkeeping."""
        return {
            "draft": self.time_draft,
            "target": self.time_target,
            "verify": self.time_verify,
            "bookkeeping": self.time_bookkeeping,
        }

    def time_split(self) -> dict[str, float]:
        """Fractions of the decode time (prefill excluded) spent in each phase."""
        phases = self.phase_seconds()
        total = sum(phases.values()) or 1.0
        return {k: v / total for k, v in phases.items()}

    def cycle_ms(self) -> dict[str, float]:
        """Milliseconds per cycle spent in each phase (draft, target, verify, bookkeeping): the cost of a cycle, to
        compare tree policies by (zeros before the first cycle)."""
        n = max(1, self.cycles)
        return {k: 1e3 * v / n for k, v in self.phase_seconds().items()}

    def summary(self) -> str:
        split = " ".join(f"{k}={v:.0%}" for k, v in self.time_split().items())
        ms = self.cycle_ms()
        return (
            f"{self.new_tokens} tokens in {self.time_total:.2f}s = {self.tokens_per_second:.1f} tok/s, "
            f"tau={self.tau:.2f} over {self.cycles} target forwards ({split}); per cycle: draft "
            f"{ms['draft']:.1f} / target {ms['target']:.1f} / verify {ms['verify']:.1f} ms"
        )


@dataclass
class GenerationResult:
    """A finished generation.

    Attributes:
        tokens: the generated ids (EOS or the stop string's tokens included).
        finish_reason: ``"eos"``, ``"stop"`` (a stop string) or ``"length"`` (the budget); ``"error"`` for a row of a
            batched call that failed alone (:class:`~specdec.batched.BatchRowError`).
        metrics: counters and timings.
        prompt: the prompt's ids, as the target saw them.
        error: the exception that ended a failed row (None otherwise).
    """

    tokens: list[int]
    finish_reason: str
    metrics: GenerationMetrics
    prompt: list[int] = field(default_factory=list)
    error: BaseException | None = field(default=None, compare=False)

    @property
    def sequences(self) -> torch.Tensor:
        """``[1, L + n]`` prompt and generated ids, as ``model.generate`` returns them."""
        return torch.tensor([self.prompt + self.tokens], dtype=torch.long)


@dataclass
class StopCondition:
    """When to stop: EOS ids, stop strings (needs a ``decode`` function), a token budget.

    ``eos_token_ids=None`` (the default) means the target's own EOS ids (its generation config, as ``generate``
    uses them); ``()`` means none. ``max_new_tokens=None`` (the default) means the generation config's
    ``max_new_tokens`` where the model sets one, else as many tokens as the target's cache has room for.
    """

    max_new_tokens: int | None = None
    eos_token_ids: Sequence[int] | None = None
    stop_strings: Sequence[str] = ()
    decode: Callable[[list[int]], str] | None = None

    def __post_init__(self) -> None:
        budget = self.max_new_tokens
        if budget is not None and (not _is_int(budget) or budget < 1):
            raise ValueError(f"max_new_tokens must be an integer >= 1 (or None), got {budget!r}")
        # one id or one string is taken as a tuple of one (as transformers' generate takes them); an iterable of
        # characters would stop at any of them
        if _is_int(self.eos_token_ids):
            self.eos_token_ids = (int(self.eos_token_ids),)
        elif self.eos_token_ids is not None:
            self.eos_token_ids = tuple(self.eos_token_ids)
            bad = [t for t in self.eos_token_ids if not _is_int(t)]
            if bad:
                raise TypeError(f"eos_token_ids must be integer token ids, got {bad!r}")
        if isinstance(self.stop_strings, str):
            self.stop_strings = (self.stop_strings,)
        self.stop_strings = tuple(self.stop_strings)
        bad = [t for t in self.stop_strings if not isinstance(t, str) or not t]
        if bad:
            raise TypeError(f"stop_strings must be non-empty strings, got {bad!r}")
        if self.stop_strings and self.decode is None:
            raise ValueError("stop_strings need a decode function (e.g. tokenizer.decode)")

    def for_target(self, target: Target, prompt_len: int, extra: int) -> StopCondition:
        """This condition with the target's EOS ids and token budget filled in where it names none.

        The budget: the target's ``max_new_tokens`` (its generation config), else the room the cache has after a
        ``prompt_len``-token prompt and one ``extra``-token tree (at least 1; a prompt that fills the cache is
        reported by the caller).
        """
        eos = self.eos_token_ids if self.eos_token_ids is not None else tuple(target.eos_token_ids)
        budget = self.max_new_tokens
        if budget is None:
            budget = target.max_new_tokens or max(1, target.max_len - prompt_len - extra)
        return dataclasses.replace(self, eos_token_ids=eos, max_new_tokens=budget)

    def check(self, tokens: list[int]) -> str | None:
        """Reason to stop after ``tokens`` (all generated so far), or None."""
        if tokens and tokens[-1] in (self.eos_token_ids or ()):
            return "eos"
        if self.stop_strings:
            tail = self.decode(tokens[-64:])  # type: ignore[misc]
            if any(s in tail for s in self.stop_strings):
                return "stop"
        if self.max_new_tokens is not None and len(tokens) >= self.max_new_tokens:
            return "length"
        return None


def call_settings(sampling: object, stop: object) -> tuple[SamplingParams, StopCondition | None]:
    """``sampling`` (None: greedy) and ``stop`` checked for their types before anything runs.

    Raises:
        TypeError: ``sampling`` is not a :class:`SamplingParams` (a dict or a temperature passed in its place), or
            ``stop`` is not a :class:`StopCondition` (a token budget passed positionally).
    """
    if sampling is None:
        sampling = SamplingParams()
    if not isinstance(sampling, SamplingParams):
        raise TypeError(
            f"sampling must be a SamplingParams (or None for greedy), got {type(sampling).__name__} {sampling!r}: "
            "pass SamplingParams(temperature=..., top_p=..., seed=...)"
        )
    if stop is not None and not isinstance(stop, StopCondition):
        raise TypeError(
            f"stop must be a StopCondition (or None), got {type(stop).__name__} {stop!r}: pass "
            "StopCondition(max_new_tokens=...)"
        )
    return sampling, stop


def make_generator(
    sampling: SamplingParams, device: torch.device, generator: torch.Generator | None
) -> torch.Generator:
    """``generator`` if given, else a new one on ``device`` seeded with ``sampling.seed`` (fresh entropy if None)."""
    if generator is not None:
        return generator
    g = torch.Generator(device=device)
    if sampling.seed is not None:
        g.manual_seed(sampling.seed)
    else:
        g.seed()
    return g


def _is_int(x: object) -> bool:
    """An integer that is not a bool (Python, numpy or a 0-dim integer tensor)."""
    if isinstance(x, torch.Tensor):
        return x.ndim == 0 and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


#: What a generator takes as a prompt: ``[L]`` or ``[1, L]`` ids (a tensor or a list), or a tokenizer's output
#: (``BatchEncoding`` or any mapping with ``"input_ids"``).
Prompt = torch.Tensor | Sequence[int] | Mapping[str, Any]


def _ids_tensor(ids: object) -> torch.Tensor:
    """A list (or nested list, or array) of ids as a tensor of the values' own dtype, so that :func:`prepare_call`'s
    dtype check sees floats and bools instead of their truncation; ``[]`` (float32 to torch) as an empty long
    tensor, which the prefill reports as an empty prompt."""
    values = torch.as_tensor(ids if hasattr(ids, "__array__") else list(ids))  # type: ignore[call-overload]
    return values if values.numel() else values.long()


def prepare_call(
    target: Target, input_ids: Prompt, stop: StopCondition | None, extra: int
) -> tuple[torch.Tensor, StopCondition]:
    """The prompt as ``[L]`` long on the target's device, and ``stop`` with the target's EOS ids and token budget
    where it names none (``stop=None``: both from the target).

    Accepts ``[L]`` or ``[1, L]`` (what a tokenizer returns with ``return_tensors="pt"``) tensors, a list of ids, or
    a tokenizer's output (its ``input_ids``; a batch of one).
    """
    if isinstance(input_ids, str):
        raise TypeError(
            "the prompt is a string; generators take token ids: pass tokenizer(text, return_tensors='pt') (or "
            "specdec.chat_ids(tokenizer, text) for a chat model)"
        )
    if isinstance(input_ids, Mapping):
        if "input_ids" not in input_ids:
            raise TypeError(f"a mapping prompt needs an 'input_ids' entry, got keys {sorted(input_ids)}")
        mask = input_ids.get("attention_mask")
        if mask is not None and not bool(torch.as_tensor(mask).bool().all()):
            raise ValueError(
                "the prompt's attention_mask has zeros (padding): specdec decodes one unpadded sequence and would "
                "read the pad tokens as part of the prompt; encode it without padding (tokenizer(text) with no "
                "padding=...) or pass only the ids where the mask is 1"
            )
        input_ids = input_ids["input_ids"]
    if not isinstance(input_ids, torch.Tensor):
        input_ids = _ids_tensor(input_ids)
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
    stop = (stop or StopCondition()).for_target(target, input_ids.shape[-1], extra)
    need = input_ids.shape[-1] + stop.max_new_tokens + extra
    if need > target.max_len:
        raise CacheFullError(
            f"prompt ({input_ids.shape[-1]}) + max_new_tokens ({stop.max_new_tokens}) + one tree/step ({extra}) "
            f"= {need} tokens exceed the target cache of {target.max_len}; raise the target's max_len or lower "
            "max_new_tokens"
        )
    return input_ids.to(target.device, torch.long), stop


def encode_prompt(prompt: Prompt | str, tokenizer: Any) -> Prompt:
    """A text prompt as ``tokenizer(text)`` encodes it (raw text, no chat template); ids as given.

    Raises:
        TypeError: a text prompt without a tokenizer.
        EmptyPromptError: an empty text prompt.
    """
    from specdec.target import EmptyPromptError

    if not isinstance(prompt, str):
        return prompt
    if tokenizer is None:
        raise TypeError(
            "the prompt is a string but no tokenizer was given: pass tokenizer=... to encode it as raw text, or pass "
            "token ids (specdec.chat_ids(tokenizer, text) wraps a chat model's prompt in its chat template)"
        )
    if not prompt:
        raise EmptyPromptError("the prompt is an empty string; pass some text to start from")
    return tokenizer(prompt, return_tensors="pt")

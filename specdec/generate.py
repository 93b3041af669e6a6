"""Decoding loops: speculative (drafter + tree policy + verifier) and vanilla, on the same target adapter.

One speculative cycle::

    tree    = policy.grow(drafter, root)        # draft
    step    = target.forward_tree(tree)         # target
    verdict = verifier.verify(tree, step.logits) # verify
    <one host sync (pack_sync / unpack_sync): accept length, bonus, accepted tokens, logits finite>
    target.commit(...); drafter.commit(...)     # bookkeeping

The root is the token emitted last (not yet in the target's cache); a cycle emits the accepted draft tokens
and then the bonus token, which becomes the next root. τ counts the bonus token. What a call takes and returns
(prompt, :class:`StopCondition`, :class:`GenerationMetrics`, :class:`GenerationResult`) is in :mod:`specdec.calls`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specdec import tree_checks
from specdec.calls import (
    GenerationMetrics,
    GenerationResult,
    Prompt,
    StopCondition,
    call_settings,
    check_claim,
    claim,
    make_generator,
    prepare_call,
)
from specdec.interfaces import Drafter, Target, TreePolicy, Verdict, Verifier, VocabMismatchError
from specdec.kvcache import TreeTooLargeError
from specdec.sampling import NonFiniteLogitsError, SamplingParams, check_finite, logits_ok, sample, warp
from specdec.target import EmptyPromptError
from specdec.tree import DraftTree
from specdec.verify import check_verifier, verifier_for

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "GenerationMetrics",
    "GenerationResult",
    "Prompt",
    "StopCondition",
    "SpeculativeGenerator",
    "VanillaGenerator",
]


def _encode(prompt: Prompt | str, tokenizer: PreTrainedTokenizerBase | None) -> Prompt:
    """A text prompt as ``tokenizer(text)`` encodes it (raw text, no chat template); ids as given.

    Raises:
        TypeError: a text prompt without a tokenizer.
        EmptyPromptError: an empty text prompt.
    """
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


def _first_token(target: Target, input_ids: torch.Tensor, sampling: SamplingParams, g: torch.Generator):
    step = target.prefill(input_ids)
    check_finite(step.logits, "target logits at the end of the prompt")
    return step, sample(warp(step.logits[0], sampling), g)


class _Loop(ABC):
    """What both decoding loops share: a call's settings checked and its prompt prepared once, ``stream`` and
    ``generate`` over one token iterator (:meth:`_tokens`, each loop's own)."""

    target: Target

    @abstractmethod
    def _parts(self, sampling: SamplingParams) -> tuple[int, tuple]:
        """The cache room a cycle needs beyond the emitted tokens (tree nodes), and the parts serving this call."""

    @abstractmethod
    def _tokens(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
        parts: tuple,
        generator: torch.Generator | None,
        metrics: GenerationMetrics,
    ) -> Iterator[int]:
        """The generated token ids of one prepared call, as they are decided (``parts``: :meth:`_parts`')."""

    def _prepared(
        self, input_ids, sampling, stop, tokenizer
    ) -> tuple[torch.Tensor, SamplingParams, StopCondition, tuple]:
        sampling, stop = call_settings(sampling, stop)
        room, parts = self._parts(sampling)
        input_ids, stop = prepare_call(self.target, _encode(input_ids, tokenizer), stop, room)
        return input_ids, sampling, stop, parts

    def stream(
        self,
        input_ids: Prompt | str,
        sampling: SamplingParams | None = None,
        stop: StopCondition | None = None,
        generator: torch.Generator | None = None,
        metrics: GenerationMetrics | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> Iterator[int]:
        """Yield generated token ids as they are decided (a speculative cycle yields all it accepted).

        Args:
            input_ids: the prompt, one sequence: ``[L]`` or ``[1, L]`` integer ids (a tensor or a list), a
                tokenizer's output (a ``BatchEncoding`` or any mapping with ``input_ids``, batch of one), or a string
                together with ``tokenizer``.
            sampling: None: greedy.
            stop: None: the target's EOS ids and token budget.
            generator: the source of randomness (default: a new one seeded with ``sampling.seed``).
            metrics: filled in as tokens come.
            tokenizer: encodes a string prompt as raw text, ``tokenizer(text)`` (no chat template: for a chat model
                pass :func:`specdec.chat_ids` ``(tokenizer, text)`` instead).

        Bad input, and a pinned verifier that cannot serve the call, raise here, before the iterator is returned:
        ``TypeError`` for a string without a tokenizer or ids that are not integers, ``ValueError`` for a batch of
        more than one sequence, a padded one (an ``attention_mask`` with zeros), ids outside the target's
        vocabulary, or an empty string (:class:`~specdec.target.EmptyPromptError`; empty ids raise it at the
        prefill); :class:`~specdec.kvcache.CacheFullError` for a prompt that does not fit the target's cache.

        The target's cache holds this stream's sequence until another generation (or a prefill or reset) uses the
        target: a stream resumed after that raises :class:`~specdec.calls.TargetTakenError` at its next forward
        (one stream per target at a time; :meth:`~specdec.target.HFTarget.sibling` gives another cache).
        """
        input_ids, sampling, stop, parts = self._prepared(input_ids, sampling, stop, tokenizer)
        return self._tokens(input_ids, sampling, stop, parts, generator, metrics or GenerationMetrics())

    def generate(
        self,
        input_ids: Prompt | str,
        sampling: SamplingParams | None = None,
        stop: StopCondition | None = None,
        generator: torch.Generator | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> GenerationResult:
        """Run to completion; see :meth:`stream`."""
        input_ids, sampling, stop, parts = self._prepared(input_ids, sampling, stop, tokenizer)
        metrics = GenerationMetrics()
        tokens = list(self._tokens(input_ids, sampling, stop, parts, generator, metrics))
        return GenerationResult(tokens, stop.check(tokens) or "length", metrics, input_ids.tolist())


class VanillaGenerator(_Loop):
    """Plain autoregressive decoding on the same adapter and the same ``warp``: the fair baseline.

    One object serves any sampling setting per call; ``sampling=None`` is greedy, ``stop=None`` the target's EOS
    ids and token budget (:class:`StopCondition`). ``stream`` and ``generate`` take what
    :meth:`SpeculativeGenerator.stream` takes.
    """

    def __init__(self, target: Target) -> None:
        self.target = target

    def _parts(self, sampling: SamplingParams) -> tuple[int, tuple]:
        return 1, ()

    def _tokens(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
        parts: tuple,
        generator: torch.Generator | None,
        metrics: GenerationMetrics,
    ) -> Iterator[int]:
        g = make_generator(sampling, self.target.device, generator)
        t0 = time.perf_counter()
        _, token = _first_token(self.target, input_ids, sampling, g)
        mine = claim(self.target)
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
            check_claim(self.target, mine)
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


@dataclass
class Synced:
    """A cycle's values on the host, from its one sync (:func:`pack_sync` / :func:`unpack_sync`).

    Attributes:
        accept_length: accepted draft tokens ``n``; bonus: the bonus token's id.
        logits_ok: the tree forward's logits were finite.
        faults: the tree's contract faults (:mod:`specdec.tree_checks`).
        tokens: the accepted path's tokens, root first (``n + 1`` of them, then padding).
        path: the accepted path's node ids (``n + 1``, then ``-1``).
        payload: the policy's :meth:`~specdec.interfaces.TreePolicy.sync_payload` on the host (None if it gave none).
    """

    accept_length: int
    bonus: int
    logits_ok: bool
    faults: int
    tokens: list[int]
    path: list[int]
    payload: list[float] | None


def pack_sync(
    verdict: Verdict, logits: torch.Tensor, faults: torch.Tensor, tree: DraftTree, payload: torch.Tensor | None
) -> torch.Tensor:
    """Everything a cycle reads on the host in one tensor: ``[n, bonus, logits ok, faults, path tokens [S], path
    [S], payload...]`` (``S = len(verdict.accepted)``), in float64 when the policy adds a payload (float64 holds
    every token id exactly)."""
    accepted = verdict.accepted
    ints = torch.cat(
        [
            verdict.accept_length.reshape(1),
            verdict.bonus_token.reshape(1),
            logits_ok(logits).reshape(1).long(),
            faults.reshape(1),
            tree.tokens[accepted.clamp(min=0)],
            accepted,
        ]
    )
    return ints if payload is None else torch.cat([ints.double(), payload.double()])


def unpack_sync(values: list, slots: int, payload: bool) -> Synced:
    """:func:`pack_sync`'s tensor as host values (``values``: its ``tolist()``; ``slots``: ``len(accepted)``;
    ``payload``: the policy gave one)."""
    width = 4 + 2 * slots
    return Synced(
        accept_length=int(values[0]),
        bonus=int(values[1]),
        logits_ok=bool(values[2]),
        faults=int(values[3]),
        tokens=[int(t) for t in values[4 : 4 + slots]],
        path=[int(i) for i in values[4 + slots : width]],
        payload=values[width:] if payload else None,
    )


@dataclass
class Cycle:
    """One speculative cycle's outcome.

    Attributes:
        emitted: the tokens it emits: the accepted draft tokens, then the bonus token.
        root: the bonus token on the device (the next cycle's root).
    """

    emitted: list[int]
    root: torch.Tensor


class SpeculativeGenerator(_Loop):
    """Speculative decoding composed from a drafter, a tree policy and a verifier.

    One object serves any sampling setting, call after call (greedy, then T = 0.7, then greedy again): the policy
    grows the tree for each call's sampling (:meth:`~specdec.interfaces.TreePolicy.for_sampling`; e.g.
    :class:`~specdec.trees.ByTemperature`), and the verifier follows the kind of tree and the temperature
    (:func:`~specdec.verify.verifier_for`) unless one is pinned.

    Args:
        target: the target adapter (its cache must hold prompt + max_new_tokens + one tree).
        drafter: proposes draft distributions; its vocabulary must equal the target's.
        policy: shapes the tree (static, dynamic, stochastic, adaptive, or one per temperature).
        verifier: None (default): chosen per call. A pinned verifier is checked against each call's kind of tree
            and sampling before the first token (:class:`~specdec.interfaces.IncompatibleVerifierError` names the
            verifier that would serve it).

    Raises:
        VocabMismatchError: drafter and target vocabularies differ.
        TreeTooLargeError: the policy's trees do not fit the target's cache (a :class:`CacheFullError`).
    """

    def __init__(self, target: Target, drafter: Drafter, policy: TreePolicy, verifier: Verifier | None = None) -> None:
        if drafter.vocab_size != target.vocab_size:
            raise VocabMismatchError(
                f"drafter vocabulary ({drafter.vocab_size}) differs from the target's ({target.vocab_size}); "
                "a drafter must share the target's tokenizer"
            )
        if policy.max_nodes >= target.max_len:
            raise TreeTooLargeError(
                f"the policy's trees ({policy.max_nodes} nodes) do not fit the target cache of {target.max_len}; "
                f"give the target a max_len above {policy.max_nodes}"
            )
        self.target, self.drafter, self.policy, self.verifier = target, drafter, policy, verifier
        target.request_hidden(drafter.hidden_request)

    def parts_for(self, sampling: SamplingParams) -> tuple[TreePolicy, Verifier]:
        """The policy and verifier a call at ``sampling`` runs (the pinned verifier is checked here).

        Raises:
            IncompatibleVerifierError: the pinned verifier cannot serve this call's trees.
        """
        policy = self.policy.for_sampling(sampling)
        kind = policy.kind(sampling)
        if self.verifier is None:
            return policy, verifier_for(kind, sampling)
        check_verifier(self.verifier, kind, sampling)
        return policy, self.verifier

    def _parts(self, sampling: SamplingParams) -> tuple[int, tuple]:
        policy, verifier = self.parts_for(sampling)
        return policy.max_nodes, (policy, verifier)

    def _tokens(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
        parts: tuple,
        generator: torch.Generator | None,
        metrics: GenerationMetrics,
    ) -> Iterator[int]:
        policy, verifier = parts
        target, drafter = self.target, self.drafter
        g = make_generator(sampling, target.device, generator)
        t0 = time.perf_counter()
        drafter.reset()
        drafter.generation += 1  # the loop counts the generations it starts (Drafter.generation)
        step, root = _first_token(target, input_ids, sampling, g)
        drafter.prefill(input_ids, step.hidden)
        mine = claim(target)
        on_host = tree_checks.free_reads(target.device)
        metrics.time_prefill = time.perf_counter() - t0
        out = [int(root)]
        metrics.new_tokens = 1
        metrics.time_total = time.perf_counter() - t0
        yield out[0]
        if stop.check(out):
            return
        while True:
            check_claim(target, mine)  # the drafter's state belongs to the same stream as the target's cache
            cycle = self._cycle(policy, verifier, root, sampling, g, on_host, metrics)
            root = cycle.root
            for token in cycle.emitted:
                out.append(token)
                metrics.new_tokens = len(out)
                metrics.time_total = time.perf_counter() - t0
                yield token
                if stop.check(out):
                    return

    def _cycle(
        self,
        policy: TreePolicy,
        verifier: Verifier,
        root: torch.Tensor,
        sampling: SamplingParams,
        g: torch.Generator,
        on_host: bool,
        metrics: GenerationMetrics,
    ) -> Cycle:
        """One cycle (the module docstring's): draft, target, verify, one host sync, commit; times into ``metrics``."""
        target, drafter = self.target, self.drafter
        t1 = time.perf_counter()
        tree = policy.grow(drafter, root, sampling, g)
        faults = tree_checks.tree_faults(tree, root, target.vocab_size)  # the policy's tree keeps its contract
        if on_host:  # read now (host memory: no sync); elsewhere with the cycle's one sync below
            tree_checks.raise_tree_faults(int(faults), policy)
        t2 = time.perf_counter()
        step = target.forward_tree(tree)
        t3 = time.perf_counter()
        verdict = verifier.verify(tree, step.logits, sampling, g)
        accepted = verdict.accepted
        payload = policy.sync_payload()
        packed = pack_sync(verdict, step.logits, faults, tree, payload).tolist()  # the cycle's one host sync
        synced = unpack_sync(packed, len(accepted), payload is not None)
        t4 = time.perf_counter()
        tree_checks.raise_tree_faults(synced.faults, policy)
        if not synced.logits_ok:
            raise NonFiniteLogitsError("target logits contain NaN/+inf values during a tree forward")
        count = synced.accept_length + 1
        policy.observe(synced.accept_length, synced.payload)
        policy.observe_path(synced.path[:count])
        target.commit(accepted, count)
        drafter.commit(tree.tokens[accepted[:count]], step.hidden.select(accepted[:count]))
        metrics.accept_lengths.append(synced.accept_length)
        metrics.tree_depths.append(tree.max_depth)
        metrics.tree_sizes.append(tree.num_nodes)
        t5 = time.perf_counter()
        metrics.time_draft += t2 - t1
        metrics.time_target += t3 - t2
        metrics.time_verify += t4 - t3
        metrics.time_bookkeeping += t5 - t4
        return Cycle(synced.tokens[1:count] + [synced.bonus], verdict.bonus_token)

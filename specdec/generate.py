"""Decoding loops: speculative (drafter + tree policy + verifier) and vanilla, on the same target adapter.

One speculative cycle::

    tree    = policy.grow(drafter, root)        # draft
    step    = target.forward_tree(tree)         # target
    verdict = verifier.verify(tree, step.logits) # verify
    <one host sync: accept length, bonus, accepted tokens, logits finite>
    target.commit(...); drafter.commit(...)     # bookkeeping

The root is the token emitted last (not yet in the target's cache); a cycle emits the accepted draft tokens
and then the bonus token, which becomes the next root. τ counts the bonus token. What a call takes and returns
(prompt, :class:`StopCondition`, :class:`GenerationMetrics`, :class:`GenerationResult`) is in :mod:`specdec.calls`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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
from specdec.interfaces import Drafter, Target, TreePolicy, Verifier, VocabMismatchError
from specdec.kvcache import TreeTooLargeError
from specdec.sampling import NonFiniteLogitsError, SamplingParams, check_finite, logits_ok, sample, warp
from specdec.target import EmptyPromptError
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


class VanillaGenerator:
    """Plain autoregressive decoding on the same adapter and the same ``warp``: the fair baseline.

    One object serves any sampling setting per call; ``sampling=None`` is greedy, ``stop=None`` the target's EOS
    ids and token budget (:class:`StopCondition`).
    """

    def __init__(self, target: Target) -> None:
        self.target = target

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
        """Yield generated token ids one by one; the prompt as :meth:`SpeculativeGenerator.stream` takes it. Bad
        input raises here, before the iterator is returned."""
        sampling, stop = call_settings(sampling, stop)
        input_ids, stop = prepare_call(self.target, _encode(input_ids, tokenizer), stop, 1)
        return self._tokens(input_ids, sampling, stop, generator, metrics or GenerationMetrics())

    def _tokens(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
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
        return _collect(self.stream, self.target, _encode(input_ids, tokenizer), sampling, stop, generator)


def _collect(stream_fn, target: Target, input_ids, sampling, stop, generator) -> GenerationResult:
    if isinstance(input_ids, Iterator):  # read twice below: by the stream and for the result's prompt
        input_ids = list(input_ids)
    metrics = GenerationMetrics()
    tokens = list(stream_fn(input_ids, sampling, stop, generator, metrics))
    prompt, stop = prepare_call(target, input_ids, stop, 0)
    return GenerationResult(tokens, stop.check(tokens) or "length", metrics, prompt.tolist())


class SpeculativeGenerator:
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
        """Yield generated token ids as cycles accept them.

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
        sampling, stop = call_settings(sampling, stop)
        policy, verifier = self.parts_for(sampling)
        input_ids, stop = prepare_call(self.target, _encode(input_ids, tokenizer), stop, policy.max_nodes)
        return self._tokens(input_ids, sampling, stop, policy, verifier, generator, metrics or GenerationMetrics())

    def _tokens(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
        policy: TreePolicy,
        verifier: Verifier,
        generator: torch.Generator | None,
        metrics: GenerationMetrics,
    ) -> Iterator[int]:
        target, drafter = self.target, self.drafter
        g = make_generator(sampling, target.device, generator)
        t0 = time.perf_counter()
        drafter.reset()
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
            # The cycle's one host sync: accept length, bonus token, logits health, accepted tokens, and the
            # policy's payload (float64 holds every token id exactly).
            ints = torch.cat(
                [
                    verdict.accept_length.reshape(1),
                    verdict.bonus_token.reshape(1),
                    logits_ok(step.logits).reshape(1).long(),
                    faults.reshape(1),
                    tree.tokens[accepted.clamp(min=0)],
                    accepted,
                ]
            )
            extra = policy.sync_payload()
            width = ints.shape[0]
            packed = (ints if extra is None else torch.cat([ints.double(), extra.double()])).tolist()
            t4 = time.perf_counter()
            n_acc, bonus, ok = int(packed[0]), int(packed[1]), packed[2]
            tree_checks.raise_tree_faults(int(packed[3]), policy)
            slots = accepted.shape[0]
            path = [int(t) for t in packed[4 : 4 + slots]]
            ids = [int(i) for i in packed[4 + slots : width]]
            if not ok:
                raise NonFiniteLogitsError("target logits contain NaN/+inf values during a tree forward")
            count = n_acc + 1
            policy.observe(n_acc, None if extra is None else packed[width:])
            policy.observe_path(ids[:count])
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
        self,
        input_ids: Prompt | str,
        sampling: SamplingParams | None = None,
        stop: StopCondition | None = None,
        generator: torch.Generator | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> GenerationResult:
        """Run to completion; see :meth:`stream`."""
        return _collect(self.stream, self.target, _encode(input_ids, tokenizer), sampling, stop, generator)

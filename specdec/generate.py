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
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from specdec import tree_checks
from specdec.batched import ROW_FAILURES, BatchRowError, Prepared, RowEvent, collect, prepare_rows, run_rows
from specdec.budget import curves_in, policy_for_rows
from specdec.calls import (
    GenerationMetrics,
    GenerationResult,
    Prompt,
    StopCondition,
    call_settings,
    check_claim,
    claim,
    encode_prompt,
    make_generator,
    prepare_call,
)
from specdec.curve_watch import watch_of
from specdec.cycle import Cycle, Row, first_token, phases
from specdec.interfaces import Drafter, Target, TreePolicy, Verifier, VocabMismatchError
from specdec.kvcache import TreeTooLargeError
from specdec.pace import OWN, STEEP, STEP, Pace, auto_pace, call_pace, steep_curve
from specdec.sampling import NonFiniteLogitsError, SamplingParams, logits_ok, sample, warp
from specdec.verify import check_verifier, verifier_for

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "BatchRowError",
    "GenerationMetrics",
    "GenerationResult",
    "Prompt",
    "RowEvent",
    "StopCondition",
    "SpeculativeGenerator",
    "VanillaGenerator",
]


class _Loop(ABC):
    """What both decoding loops share: a call's settings checked and its prompt prepared once, ``stream`` and
    ``generate`` over one token iterator (:meth:`_tokens`, each loop's own)."""

    target: Target
    #: Batch rows run the speculative cycle (else the vanilla step).
    _speculative = False

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
        pace: Pace | None = None,
    ) -> Iterator[int]:
        """The generated token ids of one prepared call, as they are decided (``parts``: :meth:`_parts`'; ``pace``:
        a speculative loop's choice of cycle or step, :mod:`specdec.pace`, None: every cycle speculates)."""

    def _prepared(
        self, input_ids, sampling, stop, tokenizer
    ) -> tuple[torch.Tensor, SamplingParams, StopCondition, int, tuple]:
        """The call's prompt, settings, the cache room a cycle needs beyond the tokens, and its parts."""
        sampling, stop = call_settings(sampling, stop)
        room, parts = self._parts(sampling)
        input_ids, stop = prepare_call(self.target, encode_prompt(input_ids, tokenizer), stop, room)
        return input_ids, sampling, stop, room, parts

    def stream(
        self,
        input_ids: Prompt | str,
        sampling: SamplingParams | None = None,
        stop: StopCondition | None = None,
        generator: torch.Generator | None = None,
        metrics: GenerationMetrics | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        speculate: str | Pace | None = None,
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
            speculate: ``"always"``: every cycle speculates; ``"auto"``: each cycle speculates with the policy's own
                tree, or with a depth-1 tree of 2-4 nodes where the target's forwards are steep, or takes a plain
                step, whichever has emitted the most tokens per second in this call (:meth:`auto_pace`: exact, but
                sampled tokens then depend on timings); a :class:`~specdec.pace.Pace` kept across calls; None
                (default): ``"auto"`` where the forwards are steep (a measured cost curve the policy holds prices 8
                tokens at :data:`~specdec.pace.PACED` steps or more: trees are dear, as on an ahead-of-time package;
                its small trees from :data:`~specdec.pace.STEEP` steps), else ``"always"`` (measured,
                :func:`~specdec.pace.call_pace`); this default's pace is kept per sampling setting across calls.

        Bad input, and a pinned verifier that cannot serve the call, raise here, before the iterator is returned:
        ``TypeError`` for a string without a tokenizer or ids that are not integers, ``ValueError`` for a batch of
        more than one sequence, a padded one (an ``attention_mask`` with zeros), ids outside the target's
        vocabulary, or an empty string (:class:`~specdec.target.EmptyPromptError`; empty ids raise it at the
        prefill); :class:`~specdec.kvcache.CacheFullError` for a prompt that does not fit the target's cache.

        The target's cache holds this stream's sequence until another generation (or a prefill or reset) uses the
        target: a stream resumed after that raises :class:`~specdec.calls.TargetTakenError` at its next forward
        (one stream per target at a time; :meth:`~specdec.target.HFTarget.sibling` gives another cache).
        """
        input_ids, sampling, stop, _, parts = self._prepared(input_ids, sampling, stop, tokenizer)
        metrics = metrics or GenerationMetrics()
        return self._tokens(input_ids, sampling, stop, parts, generator, metrics, self._pace(speculate, 1, sampling))

    def generate(
        self,
        input_ids: Prompt | str,
        sampling: SamplingParams | None = None,
        stop: StopCondition | None = None,
        generator: torch.Generator | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        speculate: str | Pace | None = None,
    ) -> GenerationResult:
        """Run to completion; see :meth:`stream`."""
        input_ids, sampling, stop, _, parts = self._prepared(input_ids, sampling, stop, tokenizer)
        metrics = GenerationMetrics()
        pace = self._pace(speculate, 1, sampling)
        tokens = list(self._tokens(input_ids, sampling, stop, parts, generator, metrics, pace))
        return GenerationResult(tokens, stop.check(tokens) or "length", metrics, input_ids.tolist())

    def _row_parts(self, parts: tuple, rows: int) -> tuple | None:
        """A batch row's own ``(drafter, policy, verifier)`` from a call's ``parts``, its trees sized for ``rows``
        rows at once (None: a vanilla row)."""
        return None

    def _rows(self, prepared: list[Prepared], pace: Pace | None, max_batch: int, room: int) -> Iterator[RowEvent]:
        """A batched call's events: its rows together (:func:`~specdec.batched.run_rows`), or at ``max_batch=1``
        one after the other through the one-sequence loop (this generator's own parts, as ``generate`` runs them)."""
        if max_batch > 1:
            yield from run_rows(self.target, prepared, pace, max_batch, room)
            return
        for index, p in enumerate(prepared):
            if isinstance(p, BaseException):
                yield RowEvent(index, None, p)
                continue
            ids, row, _ = p
            try:
                parts = self._parts(row.sampling)[1]
                for token in self._tokens(ids, row.sampling, row.stop, parts, row.g, row.metrics, pace):
                    row.out.append(token)
                    yield RowEvent(index, token)
            except ROW_FAILURES as error:
                yield RowEvent(index, None, error)

    def auto_pace(self, rows: int = 1) -> Pace:
        """A new pace of ``speculate="auto"`` (:func:`~specdec.pace.auto_pace`), to keep across calls."""
        return auto_pace(rows, self._steep())

    def _steep(self, factor: float = STEEP) -> bool:  # whether a cost curve the policy holds is that steep
        return False  # (the speculative loop: its own)

    def _pace(self, speculate: str | Pace | None, rows: int = 1, sampling: SamplingParams | None = None) -> Pace | None:
        """The call's :class:`Pace` (:func:`~specdec.pace.call_pace`), None for a vanilla loop; one sequence's default
        (None) kept per sampling setting across calls (a fresh one would spend its warm-up, 15 cycles, every call)."""
        if not (self._speculative and speculate is None and sampling is not None):
            pace = call_pace(speculate, rows, self._steep)  # checks the value, vanilla loops included
            return pace if self._speculative else None
        key = (sampling.temperature, sampling.top_p, sampling.top_k)
        if key not in self._kept_paces:  # built once: a new pace and the policy's curves walked only here
            self._kept_paces[key] = call_pace(None, rows, self._steep)
        return self._kept_paces[key]

    def _batch_events(self, prompts, sampling, stop, tokenizer, max_batch, speculate) -> tuple:
        """A batched call's events (checked and prepared here, before any row runs), its prepared rows and ids."""
        prepared, ids, room = prepare_rows(self, prompts, sampling, stop, tokenizer, max_batch)
        rows = max_batch or len(prompts)  # the pace's sizes where more than one row runs at once
        pace = self._pace("auto" if speculate is None else speculate, min(rows, len(prompts)))
        return self._rows(prepared, pace, rows, room), prepared, ids

    def stream_batch(
        self,
        prompts: Sequence[Prompt | str],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        stop: StopCondition | Sequence[StopCondition] | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        max_batch: int | None = None,
        speculate: str | Pace = "auto",
    ) -> Iterator[RowEvent]:
        """Decode several prompts together (:mod:`specdec.batched`): each row's tokens as they are decided.

        Args:
            prompts: one prompt each, as :meth:`stream` takes them.
            sampling, stop: one for every row, or one per prompt (None: greedy; the target's EOS ids and budget).
                A shared sampling setting with a seed gives row ``r`` the seed ``seed + r``.
            tokenizer: encodes string prompts (as :meth:`stream`).
            max_batch: rows decoded at once (None: all prompts); a finished row's place goes to the next prompt.
                1: each prompt in turn through the one-sequence loop.
            speculate: ``"auto"``: each cycle the batch steps, speculates with its rows' own trees, or with trees
                of :data:`~specdec.pace.BATCH_SIZES` nodes, whichever has emitted most tokens per second in this call
                (:mod:`specdec.pace`); ``"always"``: its own trees every cycle; or a :class:`~specdec.pace.Pace` of
                one's own. Vanilla: ignored.

        Yields :class:`~specdec.batched.RowEvent` s: ``(row, token)`` in the order decided, and ``(row, None, error)``
        for a row that failed alone (its prompt and budget overflow the cache, non-finite logits, a broken tree).
        Bad input and settings raise here, before any row runs, as in :meth:`stream`.
        """
        return self._batch_events(prompts, sampling, stop, tokenizer, max_batch, speculate)[0]

    def generate_batch(
        self,
        prompts: Sequence[Prompt | str],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        stop: StopCondition | Sequence[StopCondition] | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        max_batch: int | None = None,
        speculate: str | Pace = "auto",
    ) -> list[GenerationResult]:
        """Decode several prompts together to completion; one result per prompt, in order (see :meth:`stream_batch`).

        Raises:
            BatchRowError: some rows failed alone; it holds every row's result (``error`` set on the failed ones).
        """
        return collect(*self._batch_events(prompts, sampling, stop, tokenizer, max_batch, speculate))


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
        pace: Pace | None = None,
    ) -> Iterator[int]:
        g = make_generator(sampling, self.target.device, generator)
        t0 = time.perf_counter()
        _, token = first_token(self.target, input_ids, sampling, g)
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
        self._kept_paces: dict[tuple, Pace] = {}  # speculate=None: one pace per sampling setting (_pace)
        target.request_hidden(drafter.hidden_request)

    def _steep(self, factor: float = STEEP) -> bool:
        return any("device" in c.meta and steep_curve(c.cost, factor) for c in curves_in(self.policy))  # measured

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

    _speculative = True

    def _row_parts(self, parts: tuple, rows: int) -> tuple | None:
        policy, verifier = parts
        return self.drafter.fork(), policy_for_rows(policy, rows), verifier

    def _row(self, sampling: SamplingParams, stop: StopCondition, parts: tuple, g: torch.Generator, metrics) -> Row:
        """A sequence's parts (``parts``: :meth:`_parts`'; ``drafter``: this generator's, or a batch row's fork)."""
        policy, verifier = parts
        on_host = tree_checks.free_reads(self.target.device)
        row = Row(sampling, stop, g, metrics, self.target.vocab_size, None, self.drafter, policy, verifier, on_host)
        row.watch = watch_of(curves_in(policy))
        return row

    def _tokens(
        self,
        input_ids: torch.Tensor,
        sampling: SamplingParams,
        stop: StopCondition,
        parts: tuple,
        generator: torch.Generator | None,
        metrics: GenerationMetrics,
        pace: Pace | None = None,
    ) -> Iterator[int]:
        target, drafter = self.target, self.drafter
        row = self._row(sampling, stop, parts, make_generator(sampling, target.device, generator), metrics)
        t0 = time.perf_counter()
        drafter.reset()
        drafter.generation += 1  # the loop counts the generations it starts (Drafter.generation)
        step, row.root = first_token(target, input_ids, sampling, row.g)
        drafter.prefill(input_ids, step.hidden)
        mine = claim(target)
        metrics.time_prefill = time.perf_counter() - t0
        out = [int(row.root)]
        metrics.new_tokens = 1
        metrics.time_total = time.perf_counter() - t0
        yield out[0]
        if stop.check(out):
            return
        while True:
            check_claim(target, mine)  # the drafter's state belongs to the same stream as the target's cache
            cycle = self._cycle(row, pace)
            row.root = cycle.root
            for token in cycle.emitted:
                out.append(token)
                metrics.new_tokens = len(out)
                metrics.time_total = time.perf_counter() - t0
                yield token
                if stop.check(out):
                    return

    def _cycle(self, row: Row, pace: Pace | None = None) -> Cycle:
        """One cycle (:mod:`specdec.cycle`): draft, target, verify, one host sync, commit; times into the row's
        metrics. A plain step instead where ``pace`` chooses one (the drafter still takes its token)."""
        arm = OWN if pace is None else pace.arm_for(lambda m: row.policy.resized(m) is not None)
        speculate = arm != STEP
        draft_, judge_, settle_ = phases(arm)
        t1 = time.perf_counter()
        drafted = draft_(row)
        t2 = time.perf_counter()
        step = self.target.forward_tree(drafted.tree)
        t3 = time.perf_counter()
        if row.watch is not None:  # a synchronous device: t3 - t2 is the forward's work
            row.watch.record(drafted.tree.num_nodes, t3 - t2, self.target.length)
        values = judge_(row, drafted, step).tolist()  # the cycle's one host sync
        t4 = time.perf_counter()
        cycle = settle_(row, drafted, step, values)
        accepted = drafted.accepted if speculate else drafted.tree.tokens.new_zeros(1)  # a step keeps its root
        assert accepted is not None
        self.target.commit(accepted, len(cycle.path))
        t5 = time.perf_counter()
        if pace is not None:
            pace.record(arm, len(cycle.emitted), t5 - t1)
        metrics = row.metrics
        metrics.time_draft += t2 - t1
        metrics.time_target += t3 - t2
        metrics.time_verify += t4 - t3
        metrics.time_bookkeeping += t5 - t4
        return cycle

"""Several prompts decoded together: every row's cycle in one target forward, one host sync per cycle for the batch.

A batched cycle runs each row's phases of :mod:`specdec.cycle` (its own drafter fork, policy fork, sampling settings
and generator), one forward of all rows' trees (:class:`~specdec.rows.BatchRows`), and one ``tolist`` of every row's
packed values::

    expand_roots(rows)                              # every row's root step in one head forward, where it can
    drafted = [draft(row) for row in rows]          # ragged trees: each row its own size
    steps   = rows.forward([d.tree for d in drafted])
    values  = torch.cat([judge(row, d, s) ...]).tolist()   # the batch's one host sync
    cycles  = [settle(row, d, s, v) ...]; rows.commit(r, cycle.path); rows.advance()

Each row emits its tokens and stops exactly where decoding it alone would (:class:`~specdec.calls.StopCondition`
checked token by token); a finished row leaves the batch, and a waiting prompt (beyond ``max_batch``) joins. Each
cycle the whole batch either speculates or steps (every row one plain token), whichever has emitted more tokens per
second in this call (:class:`~specdec.pace.Pace`, which says why that is exact); ``speculate="always"`` speculates
every cycle.

Contracts:

* A row's output law is its law alone: its tree, verification and draws use only its own parts and generator, and its
  logits are its sequence's alone (:mod:`specdec.rows`: masked slots contribute zero). A sampled row's generator is
  seeded with its settings' ``seed`` (one :class:`~specdec.sampling.SamplingParams` for all rows: row ``r`` gets
  ``seed + r``, so identical prompts give independent samples; None: fresh entropy per row).
* Greedy rows equal the same prompts decoded alone token for token where the numerics are row-invariant (the
  target's ``invariant`` numerics: a row's logits do not depend on which other rows or masked slots share its
  forward); elsewhere up to float rounding, as a tree forward against a 1-token step.
* A row that fails (its settings or prompt refused, non-finite logits) fails alone: the others finish, and
  :class:`BatchRowError` then reports every failed row with all rows' results.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from specdec.calls import GenerationMetrics, GenerationResult, StopCondition, call_settings, make_generator
from specdec.cycle import Drafted, Row, phases
from specdec.errors import SpecdecError
from specdec.kvcache import CacheFullError
from specdec.pace import STEP, Pace
from specdec.rows import BatchRows
from specdec.sampling import SamplingParams, check_finite, sample, warp

__all__ = [
    "ROW_FAILURES",
    "BatchRowError",
    "RowEvent",
    "collect",
    "new_row",
    "prepare_rows",
    "row_settings",
    "run_rows",
]


class BatchRowError(SpecdecError, RuntimeError):
    """Rows of a batched call failed; the others finished.

    Attributes:
        results: every row's :class:`~specdec.calls.GenerationResult`, in prompt order (a failed row's ``error``
            holds its exception and ``stop_reason`` is ``"error"``).
    """

    def __init__(self, message: str, results: list[GenerationResult]) -> None:
        super().__init__(message)
        self.results = results


@dataclass
class RowEvent:
    """A batched stream's item: row ``row`` emitted ``token`` (or failed, ``error`` set and ``token`` None)."""

    row: int
    token: int | None
    error: BaseException | None = None


#: What a batched call prepares per prompt: the prompt ``[L]`` on the device, its :class:`Row`, and what gives the row
#: its own ``(drafter, policy, verifier)`` when it joins the batch (None: a vanilla row); or the error that refused it.
Prepared = tuple[torch.Tensor, Row, Callable[[], tuple] | None] | BaseException

#: What fails one row alone (its refusals, bad values, torch's runtime errors); anything else (a bug) stops the call.
ROW_FAILURES = (SpecdecError, ValueError, RuntimeError)


def row_settings(prompts, sampling, stop, max_batch) -> tuple[list[SamplingParams], list[StopCondition | None]]:
    """Each prompt's sampling settings (checked; one shared setting with a seed gives row ``r`` the seed ``seed + r``,
    module docstring) and stop condition, from one for all or one per prompt.

    Raises:
        ValueError: no prompts, a bad ``max_batch``, or a number of settings that is neither one nor one per prompt.
    """
    if isinstance(prompts, (str, torch.Tensor)) or not prompts:
        raise ValueError("prompts must be a non-empty list of prompts (one string, tensor or id list each)")
    if max_batch is not None and (isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1):
        raise ValueError(f"max_batch must be an integer >= 1 (rows decoded at once), got {max_batch!r}")
    n = len(prompts)
    shared = not isinstance(sampling, (list, tuple))
    samplings = [sampling] * n if shared else list(sampling)
    stops = list(stop) if isinstance(stop, (list, tuple)) else [stop] * n
    for name, given in (("sampling", samplings), ("stop", stops)):
        if len(given) != n:
            raise ValueError(f"{len(given)} {name} settings for {n} prompts: give one for all, or one per prompt")
    samplings = [call_settings(s, None)[0] for s in samplings]
    if shared:
        samplings = [
            s if s.seed is None else s.model_copy(update={"seed": (s.seed + r) % 2**64})
            for r, s in enumerate(samplings)
        ]
    return samplings, stops


class _Batch:
    """The rows of one call in flight: their :class:`Row` s, the prompts waiting, the shared :class:`BatchRows`."""

    def __init__(self, target, prepared: list[Prepared], pace: Pace | None, max_batch: int, room: int) -> None:
        self.pace, self.max_batch = pace, max_batch
        # each row's prompt, budget and own tree fit max_len; the shared clock writes the largest tree of any row
        self.rows = BatchRows(target, target.max_len + room)
        self.max_batch = min(max_batch, self.rows.max_size)  # the package's batch limit: the rest wait their turn
        self.waiting = [i for i, p in enumerate(prepared) if not isinstance(p, BaseException)]
        self.prepared = prepared
        self.live: list[int] = []  # prompt index of each batch row, in the rows' order

    def _row(self, index: int) -> Row:
        p = self.prepared[index]
        assert not isinstance(p, BaseException)
        return p[1]

    def admit(self) -> Iterator[RowEvent]:
        """Prefill waiting prompts into free rows (the target's own prefill, :meth:`BatchRows.join`); each joining
        row's first token, or its failure. The joining rows' drafters then take their prompts together (their first root
        step, :meth:`_expand_roots`), counted as prefill: a speculative cycle's time holds no prompt, so the batch's
        choice of speculating or stepping (:mod:`specdec.pace`) compares cycles with steps."""
        joined = []
        while self.waiting and len(self.live) < self.max_batch:
            index = self.waiting.pop(0)
            ids, row, parts = self.prepared[index]  # type: ignore[misc]
            row.started = time.perf_counter()
            try:
                if parts is not None:  # forked as the row joins: memory grows with the batch, not the prompts
                    row.drafter, row.policy, row.verifier = parts()
                step = self.rows.join(ids)
                check_finite(step.logits, "target logits at the end of the prompt")
                row.root = sample(warp(step.logits[0], row.sampling), row.g)
                if row.drafter is not None:
                    row.drafter.reset()
                    row.drafter.generation += 1  # as the one-sequence loop counts them (Drafter.generation)
                    row.drafter.prefill(ids, step.hidden)
            except ROW_FAILURES as error:
                self.rows.leave(list(range(len(self.live))))  # a row that joined before failing goes again
                yield RowEvent(index, None, error)
                continue
            self.live.append(index)
            joined.append(index)
            row.metrics.time_prefill = time.perf_counter() - row.started
            yield from self._emit(index, row, [int(row.root)])
            if row.done:
                self._drop([r for r, i in enumerate(self.live) if i != index])
        self._expand_roots([i for i in joined if i in self.live], "time_prefill")

    def _emit(self, index: int, row: Row, tokens: list[int]) -> Iterator[RowEvent]:
        """The row's tokens, up to where its stop condition holds (as decoding it alone stops)."""
        for token in tokens:
            row.out.append(token)
            row.metrics.new_tokens = len(row.out)
            row.metrics.time_total = time.perf_counter() - row.started
            yield RowEvent(index, token)
            if row.stop.check(row.out):
                row.done = True
                return

    def _drop(self, keep: list[int]) -> None:
        for r, index in enumerate(self.live):
            if r not in keep:  # a row that leaves gives back its drafter's buffers
                row = self._row(index)
                row.drafter = row.policy = None
        self.rows.leave(keep)
        self.live = [self.live[r] for r in keep]

    def _expand_roots(self, indices: list[int], timer: str) -> None:
        """The rows' first expansions of their next trees, run together where their drafters can
        (:meth:`~specdec.interfaces.Drafter.expand_roots`, per drafter type), each row's metric ``timer`` holding its
        share of the time; a failure leaves each row to run its own at its draft, where it fails alone."""
        t = time.perf_counter()
        groups: dict[type, list[tuple]] = {}
        for index in indices:
            row = self._row(index)
            if row.drafter is not None and row.root is not None:
                part = row.drafter.batch_part()
                groups.setdefault(type(part), []).append((part, row.root.reshape(1)))
        for kind, members in groups.items():
            try:
                kind.expand_roots([d for d, _ in members], [r for _, r in members])
            except ROW_FAILURES as error:  # no state changed that matters: each row then runs (and fails) alone
                warnings.warn(f"{kind.__name__}.expand_roots failed, its rows draft alone: {error}", stacklevel=2)
        share = (time.perf_counter() - t) / max(1, len(indices))
        for index in indices:
            metrics = self._row(index).metrics
            setattr(metrics, timer, getattr(metrics, timer) + share)

    def cycle(self) -> Iterator[RowEvent]:
        """One cycle of every live row: their tokens and failures; finished and failed rows leave."""
        # a size no row's trees take is dropped: the batch speculates with its own
        fits = lambda m: any(self._row(i).policy.resized(m) for i in self.live)  # noqa: E731
        arm = STEP if self.pace is None else self.pace.arm_for(fits)
        speculate = arm != STEP
        # a plain step where not speculating (a speculative row's drafter still takes the token)
        draft_, judge_, settle_ = phases(arm, speculative=self.pace is not None)
        t0 = time.perf_counter()
        emitted = 0
        events: list[RowEvent] = []
        drafted: list[Drafted] = []
        keep: list[int] = []
        if speculate:  # the rows' root steps together
            self._expand_roots(self.live, "time_draft")
        for r, index in enumerate(self.live):
            row, t = self._row(index), time.perf_counter()
            try:
                drafted.append(draft_(row))
            except ROW_FAILURES as error:
                events.append(RowEvent(index, None, error))
                continue
            row.metrics.time_draft += time.perf_counter() - t
            keep.append(r)
        self._drop(keep)
        if not self.live:  # every row failed at its draft
            yield from events
            return
        rows = [self._row(i) for i in self.live]
        t2 = time.perf_counter()
        steps = self.rows.forward([d.tree for d in drafted])
        t3 = time.perf_counter()
        values = _one_sync([judge_(row, d, s) for row, d, s in zip(rows, drafted, steps, strict=True)])
        t4 = time.perf_counter()
        keep = []
        for r, (index, row) in enumerate(zip(self.live, rows, strict=True)):
            t = time.perf_counter()
            try:
                cycle = settle_(row, drafted[r], steps[r], values[r])
            except ROW_FAILURES as error:
                events.append(RowEvent(index, None, error))
                continue
            self.rows.commit(r, cycle.path)
            row.root = cycle.root
            m = row.metrics
            m.time_target += t3 - t2
            m.time_verify += t4 - t3
            m.time_bookkeeping += time.perf_counter() - t
            before = len(row.out)
            events.extend(self._emit(index, row, cycle.emitted))
            emitted += len(row.out) - before
            if not row.done:
                keep.append(r)
        self.rows.advance()
        if self.pace is not None:
            self.pace.record(arm, emitted, time.perf_counter() - t0)
        self._drop(keep)
        yield from events


def _one_sync(packed: list[torch.Tensor]) -> list[list]:
    """Every row's packed values on the host in one ``tolist`` (float64 when any row's are: token ids stay exact)."""
    widths = [p.numel() for p in packed]
    dtype = torch.float64 if any(p.is_floating_point() for p in packed) else torch.long
    flat = torch.cat([p.reshape(-1).to(dtype) for p in packed]).tolist()
    out, start = [], 0
    for w in widths:
        out.append(flat[start : start + w])
        start += w
    return out


def run_rows(target, prepared: list[Prepared], pace: Pace | None, max_batch: int, room: int) -> Iterator[RowEvent]:
    """The events of a batched call over ``prepared`` prompts (:class:`RowEvent`: tokens as decided, failures);
    ``pace``: speculative rows' choice of cycle or step (:mod:`specdec.pace`), None for vanilla rows; ``room``: the
    largest tree of any row (the rows' cache holds ``max_len + room`` slots)."""
    for index, p in enumerate(prepared):
        if isinstance(p, BaseException):
            yield RowEvent(index, None, p)
    batch = _Batch(target, prepared, pace, max_batch, room)
    yield from batch.admit()
    while batch.live:
        yield from batch.cycle()
        yield from batch.admit()


def prepare_rows(loop, prompts, sampling, stop, tokenizer, max_batch) -> tuple[list[Prepared], list[list[int]], int]:
    """Each prompt of a batched call of ``loop`` (a decoding loop of :mod:`specdec.generate`) prepared as its
    ``stream`` prepares one, with its row and the fork of its parts (or the :class:`CacheFullError` that keeps it out);
    its ids; the largest tree room of any row."""
    samplings, stops = row_settings(prompts, sampling, stop, max_batch)
    n = len(prompts)
    prepared: list[Prepared] = []
    ids: list[list[int]] = []
    room, rows = 1, min(n, max_batch or n)
    for prompt, s, st in zip(prompts, samplings, stops, strict=True):
        try:
            input_ids, s, st, row_room, parts = loop._prepared(prompt, s, st, tokenizer)
        except CacheFullError as error:  # this row alone cannot run (the others do)
            prepared.append(error)
            ids.append([])
            continue
        fork = functools.partial(loop._row_parts, parts, rows) if loop._speculative else None
        prepared.append((input_ids, new_row(s, st, loop.target), fork))
        ids.append(input_ids.tolist())
        room = max(room, row_room)
    return prepared, ids, room


def new_row(sampling: SamplingParams, stop: StopCondition, target) -> Row:
    """A row for a prepared prompt (its speculative parts come when it joins the batch)."""
    g = make_generator(sampling, target.device, None)
    return Row(sampling, stop, g, GenerationMetrics(), target.vocab_size)


def collect(events: Iterator[RowEvent], prepared: list[Prepared], prompts: list[list[int]]) -> list[GenerationResult]:
    """Every row's result from a batched call's events; raises :class:`BatchRowError` after all rows ran if any
    failed."""
    errors: dict[int, BaseException] = {}
    for event in events:
        if event.error is not None:
            errors[event.row] = event.error
    results = []
    for index, p in enumerate(prepared):
        if isinstance(p, BaseException):
            results.append(GenerationResult([], "error", GenerationMetrics(), prompts[index], error=p))
            continue
        row, error = p[1], errors.get(index)
        reason = "error" if error is not None else row.stop.check(row.out) or "length"
        results.append(GenerationResult(row.out, reason, row.metrics, prompts[index], error=error))
    if errors:
        named = "; ".join(f"row {i}: {type(e).__name__}: {e}" for i, e in sorted(errors.items()))
        raise BatchRowError(f"{len(errors)} of {len(prepared)} rows failed (the others finished): {named}", results)
    return results

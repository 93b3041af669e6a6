"""Continuous batching for data generation: a finished row takes the next prompt at once.

Generating self-distilled data is a throughput job: ``B`` responses decode together, one target forward per step.
Batches that run until their longest response ends leave most rows idle near the end (responses end at EOS, at a
repetition loop or at the budget: on SmolLM2's ShareGPT answers only 52 % of the row-steps of a batch of 32
produced a kept token). Here a row that finishes is refilled with the next prompt before the next step, so every
step works on ``B`` live responses until the prompts run out.

Layout. The model runs through a :class:`~specdec.runner.ModelRunner` (the target's and the drafters' runner; its
batched-rows forward). One :class:`~specdec.kvcache.PositionCache` ``[B, H_kv, C, D]`` per layer and a shared write
slot ``P``
(the clock). Row ``r``'s sequence occupies the slots marked in ``valid[r]`` (``[B, C]`` bool); the slots need not
be contiguous. A step writes every row's pending token at slot ``P`` with ``position_ids = pos[r]`` (the row's own
sequence length, so RoPE sees each sequence as if alone) and attends with the 2-D padding mask ``valid[:, :P+1]``.
Masked slots contribute exactly zero, so a row's logits are those of its sequence alone up to float rounding.

Admission. Prompts for the free rows are prefilled on their own (left-padded to their width ``w``, a separate
cache), their keys/values copied into slots ``[P − w, P)`` of those rows (``P`` first jumps to ``w`` if it is
smaller; the gap is masked for the other rows), and each row's first token is drawn from its prefill logits.

Compaction. Slots that no row uses (finished rows' leftovers, gaps) are dropped by moving the used ones to the
front of the cache once there are ``compact_at`` of them or the cache is full. When no prompts are left and a
quarter of the rows are idle, the idle rows are dropped from the batch (their cache rows go with them), so the last
responses do not carry idle rows.

Feature capture (``capture=FeatureSpec(...)``): the forwards also return the hidden states a draft head trains on
(:func:`~specdec.train.features.select_hidden`): the prompt's from its prefill, each response token's from the step
that feeds it. The last token of a response is never fed to draw a successor, so a finished row stays one more step
to feed it (``closing``) and is refilled after that: every token of ``prompt + response`` gets its features, as a
separate forward over the finished sequence would give them (up to float rounding of the batched forward).

Package (``package=``, an :class:`~specdec.backends.aot.AotForward`): the steps run on the model's batch package, the
rows' cache handed to it with a mask over every slot (prefills stay eager); the same float32 forward up to rounding,
1.53x as fast for SmolLM2 on the Xeon of family 6 model 207 (``docs/results/2026-12-02-batch-package-intel-f6m207``).

Scope: CPU models (the row bookkeeping is host-side) with full attention in every layer. A sliding window is
counted in cache slots, which are a row's positions only while its slots are contiguous; the clock jump and other
rows' admissions break that, so sliding-window models are refused.

Sampling contract (what the data card states): a row at temperature ``T > 0`` draws each token from
:func:`~specdec.sampling.warp` of the target's logits (temperature, then top-p) with its own
``torch.Generator`` seeded from the job's ``seed``, so a response depends on its prompt and seed, not on the rows it
shared a batch with (up to float rounding of the batched forward). ``T = 0`` is the argmax, first index on ties.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.attention import AttentionLayout
from specdec.backends.aot import MAX_BATCH
from specdec.backends.gqa import cache_dtype
from specdec.kvcache import CacheFullError, PositionCache
from specdec.runner import ModelRunner
from specdec.sampling import SamplingParams, check_finite, greedy_tokens, sample, warp
from specdec.train.features import FeatureSpec, select_hidden
from specdec.train.loops import ends_in_loop

__all__ = ["Job", "Finished", "generate_continuous"]

#: ``finished`` codes of a response (the shard format's ``finished`` tensor).
BUDGET, EOS_END, LOOP = 0, 1, 2


@dataclass(frozen=True)
class Job:
    """One prompt to answer.

    Attributes:
        key: the caller's handle, returned with the response.
        ids: the prompt's token ids (chat-templated, generation prompt included).
        temperature: 0 for greedy.
        seed: seeds the row's ``torch.Generator`` (sampled jobs only).
    """

    key: Any
    ids: list[int]
    temperature: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class Finished:
    """A finished response: ``finished`` is 1 at EOS (kept), 2 when cut in a loop, 0 at the budget.

    ``final [T, H]`` and ``fused [T, kH]`` (``T = len(job.ids) + len(response)``) are the captured features, when
    a capture was asked for (module docstring).
    """

    job: Job
    response: list[int]
    finished: int
    final: torch.Tensor | None = field(default=None, compare=False)
    fused: torch.Tensor | None = field(default=None, compare=False)


class _Rows:
    """Host-side state of the batch rows (one entry per cache row)."""

    def __init__(self, batch: int, max_new_tokens: int) -> None:
        self.jobs: list[Job | None] = [None] * batch
        self.generators: list[torch.Generator | None] = [None] * batch
        self.history = torch.zeros(batch, max_new_tokens, dtype=torch.long)  # [B, N] response tokens
        self.lengths = torch.zeros(batch, dtype=torch.long)  # [B] response tokens so far
        self.pos = torch.zeros(batch, dtype=torch.long)  # [B] sequence length (next RoPE position)
        self.closing: list[int | None] = [None] * batch  # finish code of a row feeding its last token (capture)
        self.features: list[list[tuple[torch.Tensor | None, torch.Tensor | None]]] = [[] for _ in range(batch)]

    def live(self) -> list[int]:
        return [r for r, job in enumerate(self.jobs) if job is not None]

    def keep(self, rows: list[int]) -> None:
        self.jobs = [self.jobs[r] for r in rows]
        self.generators = [self.generators[r] for r in rows]
        self.closing = [self.closing[r] for r in rows]
        self.features = [self.features[r] for r in rows]
        index = torch.tensor(rows, dtype=torch.long)
        self.history, self.lengths, self.pos = self.history[index], self.lengths[index], self.pos[index]


class _Batch:
    """The cache, its occupancy and the forward calls of :func:`generate_continuous` (see the module docstring)."""

    def __init__(self, model: Any, batch: int, capacity: int, capture: bool = False, package: Any = None) -> None:
        self.model = model
        self.capture = capture
        self.package = package
        self.layout = AttentionLayout.of(model, warn=False)
        if self.layout.sliding_window is not None:
            raise ValueError(
                f"{type(model).__name__} has sliding-window layers: continuous batching leaves gaps in a row's cache "
                "slots, so a window counted in slots would not be the row's window (full attention only)"
            )
        self.num_layers = int(model.config.get_text_config().num_hidden_layers)
        self.capacity = capacity
        # float64 under the invariant attention (it reads it unconverted)
        self.cache_dtype = cache_dtype(getattr(model.config, "_attn_implementation", None))
        if package is not None and (self.cache_dtype is not None or batch > MAX_BATCH or self.layout.hybrid):
            raise ValueError(
                f"the package serves at most {MAX_BATCH} rows of a float32 cache with one attention kind: batch "
                f"{batch}, cache dtype {self.cache_dtype or 'the model'}'s; run these steps without the package"
            )
        self.runner = ModelRunner(model, self.layout, capacity, cache_dtype=self.cache_dtype)
        self.cache = self.runner.cache
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool)  # [B, C] slots each row attends to
        self.clock = 0  # P: the slot the next step writes

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: PositionCache, at: int):
        """``(logits [n, V] of the last position, hidden_states or None)``."""
        logits, hidden = self.runner.forward_rows(ids, positions, at, mask, keep=1, hidden=self.capture, cache=cache)
        logits = logits[:, -1]  # [n, V]
        check_finite(logits)
        return logits, hidden

    def admit(self, rows: list[int], prompts: list[list[int]]):
        """Prefill ``prompts`` into ``rows``; returns their last logits ``[n, V]`` and the prefill's hidden states
        (``[n, w, H]`` each, prompts left-padded to width ``w``; None without capture)."""
        width = max(len(p) for p in prompts)
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        mask = torch.zeros(len(prompts), width, dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = True
        positions = (mask.long().cumsum(1) - 1).clamp(min=0)
        if self.clock >= self.capacity:
            self.compact()
        self.clock = max(self.clock, width)  # the prompts end just before the clock; the jump is a masked gap
        if self.clock >= self.capacity:
            raise CacheFullError(f"a prompt of {width} tokens leaves no room in a cache of {self.capacity} slots")
        fresh = PositionCache(self.num_layers, width, dtype=self.cache_dtype)
        logits, hidden = self._forward(ids, positions, mask, fresh, 0)
        index = torch.tensor(rows, dtype=torch.long)
        span = slice(self.clock - width, self.clock)
        for big, small in zip(self.cache.layers, fresh.layers, strict=True):
            if not big.is_initialized:  # zeros, not empty: the masked gap after a clock jump is read, never written
                shape = (self.valid.shape[0], *small.keys.shape[1:2], self.capacity, small.keys.shape[-1])
                big.keys = small.keys.new_zeros(shape)
                big.values = small.values.new_zeros(shape[:3] + small.values.shape[-1:])
                big.is_initialized = True
            big.keys[index, :, span] = small.keys
            big.values[index, :, span] = small.values
        self.valid[index] = False
        self.valid[index, span] = mask
        return logits, hidden

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, live: torch.Tensor):
        """One token per row at slot ``P``; ``live [B]`` bool marks rows whose token joins their sequence.

        Returns the logits ``[B, V]`` (rows that are not live hold garbage) and the hidden states (``[B, 1, H]``
        each; None without capture).
        """
        if self.clock >= self.capacity:
            self.compact()
        if self.clock >= self.capacity:
            raise CacheFullError(f"the live rows fill all {self.capacity} slots of the generation cache")
        p = self.clock
        mask = self.valid[:, : p + 1].clone()
        mask[:, p] = True  # every row sees its own token (a free row attends to itself only: no empty softmax row)
        if self.package is not None:
            logits, hidden = self._on_package(tokens[:, None], positions[:, None], mask, p)
        else:
            logits, hidden = self._forward(tokens[:, None], positions[:, None], mask, self.cache, p)
        self.valid[:, p] = live
        self.clock += 1
        return logits, hidden

    def _on_package(self, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor, p: int):
        """A step of ``ids [B, 1]`` on the batch package: ``visible [B, p + 1]`` as an additive mask over every slot
        (full attention: row ``r``'s one query is the mask's query ``r``)."""
        b = ids.shape[0]
        allowed = torch.zeros(b, self.capacity, dtype=torch.bool)
        allowed[:, : p + 1] = visible
        slots = torch.arange(self.capacity)
        mask = self.layout.mask(allowed, slots, positions[:, 0]).view(b, 1, 1, self.capacity)
        layers = self.cache.layers
        keys, values = [layer.keys for layer in layers], [layer.values for layer in layers]
        out = self.package.step(ids, positions, mask, torch.tensor(p), keys, values)
        logits = out.logits[:, -1].float()
        check_finite(logits)
        return logits, out.hidden_states if self.capture else None

    def dead_slots(self) -> int:
        return self.clock - int(self.valid[:, : self.clock].any(0).sum())

    def compact(self) -> None:
        """Move the slots some row uses to the front of the cache."""
        used = self.valid[:, : self.clock].any(0).nonzero().flatten()  # [U]
        n = used.shape[0]
        self.cache.compact(0, used)  # entry used[i] -> slot i, every layer and row
        self.valid[:, :n] = self.valid.index_select(1, used)
        self.valid[:, n:] = False
        self.clock = n

    def keep_rows(self, rows: list[int]) -> None:
        """Drop every other cache row (the batch shrinks)."""
        index = torch.tensor(rows, dtype=torch.long)
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.keys, layer.values = layer.keys[index], layer.values[index]
        self.valid = self.valid[index]


@torch.no_grad()
def generate_continuous(
    model: Any,
    jobs: Iterable[Job],
    *,
    batch_size: int,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int = 0,
    top_p: float = 1.0,
    loop_window: int = 0,
    capacity: int | None = None,
    compact_at: int = 128,
    capture: FeatureSpec | None = None,
    capture_dtype: torch.dtype = torch.bfloat16,
    package: Any = None,
) -> Iterator[Finished]:
    """Answer ``jobs`` with ``batch_size`` rows decoding together; yields each response as it finishes.

    A response ends at EOS (kept), after ``max_new_tokens``, or, with ``loop_window = W >= 2``, as soon as it ends
    in a repetition loop (:func:`ends_in_loop`). Jobs are admitted in order; responses come out in finishing order.

    Args:
        model: a Hugging Face causal LM (any backend of :func:`specdec.fastpath.apply_backend`).
        jobs: prompts with their temperature and seed.
        capacity: cache slots per row (default ``2 * 256 + max_new_tokens + compact_at``: room for the oldest live
            row, prompts admitted since, and unused slots before a compaction); a prompt longer than
            ``capacity - max_new_tokens`` is refused.
        compact_at: compact the cache once this many slots are unused.
        capture: also return these target features of every token (:attr:`Finished.final`, ``fused``), stored in
            ``capture_dtype``.
        package: the steps on this model's batch package (the module docstring; an
            :class:`~specdec.backends.aot.AotForward`, e.g. an ``"aot"`` target's ``runner._run``), None: eager.

    Raises:
        ValueError: bad settings or a prompt that does not fit.
        NonFiniteLogitsError: the target produced NaN/inf logits.
    """
    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size and max_new_tokens must be >= 1, got {batch_size}, {max_new_tokens}")
    if loop_window < 0 or 0 < loop_window < 2:
        raise ValueError(f"loop_window must be 0 (off) or >= 2, got {loop_window}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    device = model.get_input_embeddings().weight.device
    if device.type != "cpu":
        raise ValueError("generate_continuous runs on the CPU (its row bookkeeping is host-side)")
    size = capacity if capacity is not None else 2 * 256 + max_new_tokens + compact_at
    run = _Continuous(
        _Batch(model, batch_size, size, capture=capture is not None, package=package),
        _Rows(batch_size, max_new_tokens),
        (eos_token_id, max_new_tokens, loop_window),
        top_p,
        capture,
        capture_dtype,
        pad_token_id,
    )
    source = iter(jobs)
    while True:
        admitted = run.admit(source)
        if admitted:
            yield from run.first_tokens(admitted)
            continue  # rows freed at their first token are refilled before the step
        if not run.rows.live():
            return
        yield from run.step(compact_at)


class _Continuous:
    """One :func:`generate_continuous` call: its batch, rows and settings, and the phases of its loop (admit free
    rows and draw their first tokens; step the live rows and draw the next ones; finish rows)."""

    def __init__(
        self,
        batch: _Batch,
        rows: _Rows,
        ends: tuple[int, int, int],
        top_p: float,
        capture: FeatureSpec | None,
        capture_dtype: torch.dtype,
        pad_token_id: int,
    ) -> None:
        self.batch, self.rows = batch, rows
        # when a response ends: EOS (kept), the token budget, or a repetition loop of this window (0: off)
        self.eos_token_id, self.max_new_tokens, self.loop_window = ends
        self.top_p, self.capture, self.capture_dtype = top_p, capture, capture_dtype
        self.tokens = torch.full((len(rows.jobs),), pad_token_id, dtype=torch.long)  # [B] pending token of each row
        self.exhausted = False
        self.params: dict[float, SamplingParams] = {}

    def admit(self, source: Iterator[Job]) -> list[tuple[int, Job]]:
        """Take the next jobs into the free rows (none once the jobs ran out).

        Raises:
            ValueError: a prompt that does not fit the cache with its budget.
        """
        rows, admitted = self.rows, []
        for r in [r for r, job in enumerate(rows.jobs) if job is None] if not self.exhausted else []:
            job = next(source, None)
            if job is None:
                self.exhausted = True
                break
            if len(job.ids) + self.max_new_tokens > self.batch.capacity:
                raise ValueError(
                    f"prompt {job.key!r} has {len(job.ids)} tokens: with {self.max_new_tokens} new tokens it "
                    f"does not fit a generation cache of {self.batch.capacity} slots"
                )
            admitted.append((r, job))
        for r, job in admitted:
            rows.jobs[r] = job
            rows.generators[r] = torch.Generator().manual_seed(job.seed) if job.temperature > 0 else None
            rows.lengths[r] = 0
            rows.pos[r] = len(job.ids)
        return admitted

    def first_tokens(self, admitted: list[tuple[int, Job]]) -> Iterator[Finished]:
        """Prefill the admitted prompts into their rows and draw each row's first token."""
        which = [r for r, _ in admitted]
        logits, hidden = self.batch.admit(which, [job.ids for _, job in admitted])
        if hidden is not None:
            width = hidden[0].shape[1]
            spans = [slice(width - len(job.ids), width) for _, job in admitted]
            self.keep_features(which, hidden, list(range(len(which))), spans)
        yield from self.accept(which, self.draw(logits, which))

    def step(self, compact_at: int) -> Iterator[Finished]:
        """One token for every live row (after dropping idle rows and compacting the cache where due)."""
        rows, batch = self.rows, self.batch
        live = rows.live()
        if self.exhausted and len(live) <= 3 * len(rows.jobs) // 4:  # no more prompts: drop the idle rows
            rows.keep(live)
            batch.keep_rows(live)
            self.tokens = self.tokens[torch.tensor(live, dtype=torch.long)]
            live = list(range(len(live)))
        if batch.dead_slots() >= compact_at:
            batch.compact()
        alive = torch.zeros(len(rows.jobs), dtype=torch.bool)
        alive[live] = True
        logits, hidden = batch.step(self.tokens, rows.pos, alive)
        rows.pos[live] += 1
        if hidden is not None:
            self.keep_features(live, hidden, live, [slice(0, 1)] * len(live))
        going = []
        for r in live:
            code = rows.closing[r]
            if code is not None:
                yield self.finish(r, code)
            else:
                going.append(r)
        if going:
            yield from self.accept(going, self.draw(logits[torch.tensor(going, dtype=torch.long)], going))

    def draw(self, logits: torch.Tensor, which: list[int]) -> list[int]:
        """Each row's next token from its logits ``[n, V]`` (module docstring: sampling contract)."""
        out = greedy_tokens(logits).tolist()
        for i, r in enumerate(which):
            job = self.rows.jobs[r]
            assert job is not None
            if job.temperature > 0:
                p = self.params.setdefault(
                    job.temperature, SamplingParams(temperature=job.temperature, top_p=self.top_p)
                )
                out[i] = int(sample(warp(logits[i], p), self.rows.generators[r]))
        return out

    def keep_features(self, which: list[int], hidden: Any, at: list[int], spans: list[slice]) -> None:
        """Append the features of ``hidden``'s row ``at[j]``, positions ``spans[j]``, to cache row ``which[j]``
        (copies: a view would keep the whole batch's tensor alive)."""
        assert self.capture is not None
        final, fused = select_hidden(hidden, self.capture)
        for j, (i, r) in enumerate(zip(at, which, strict=True)):
            self.rows.features[r].append(
                tuple(None if x is None else x[i, spans[j]].to(self.capture_dtype, copy=True) for x in (final, fused))
            )

    def finish(self, r: int, code: int) -> Finished:
        """Free row ``r`` and give its response."""
        rows = self.rows
        job, n = rows.jobs[r], int(rows.lengths[r])
        assert job is not None
        final = fused = None
        if self.capture is not None:
            parts = rows.features[r]
            final = torch.cat([f for f, _ in parts]) if self.capture.final else None
            fused = torch.cat([f for _, f in parts]) if self.capture.layers else None
            rows.features[r], rows.closing[r] = [], None
        rows.jobs[r] = None
        self.batch.valid[r] = False
        return Finished(job, rows.history[r, :n].tolist(), code, final, fused)

    def accept(self, which: list[int], drawn: list[int]) -> Iterator[Finished]:
        """Append each row's new token; yield and free the rows that are done (with capture: mark them closing,
        their last token is fed at the next step)."""
        rows = self.rows
        idx = torch.tensor(which, dtype=torch.long)
        new = torch.tensor(drawn, dtype=torch.long)
        rows.history[idx, rows.lengths[idx]] = new
        rows.lengths[idx] += 1
        self.tokens[idx] = new
        looped = ends_in_loop(rows.history[idx], rows.lengths[idx], self.loop_window) if self.loop_window else None
        for i, r in enumerate(which):
            n = int(rows.lengths[r])
            code = None
            if drawn[i] == self.eos_token_id:
                code = EOS_END
            elif looped is not None and bool(looped[i]):
                code = LOOP
            elif n >= self.max_new_tokens:
                code = BUDGET
            if code is not None and self.capture is not None:
                rows.closing[r] = code
            elif code is not None:
                yield self.finish(r, code)

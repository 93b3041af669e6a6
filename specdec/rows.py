"""Several sequences in one target forward: the rows of a batched decoding call (:mod:`specdec.batched`).

Layout. One :class:`~specdec.kvcache.PositionCache` ``[B, H_kv, C, D]`` per layer and a shared clock ``P``: every
forward writes all ``B`` rows' new tokens at slots ``P .. P + n`` (``n``: the largest of the rows' trees; a smaller
tree is padded with nodes that see only their own slot). Row ``r``'s sequence occupies the slots ``valid[r]`` marks,
not necessarily contiguous: a cycle marks the slots of the nodes its verifier accepted (no copy; rejected nodes'
slots stay unmarked), and ``slot_pos[r, s]`` holds the sequence position a slot's entry was written at, which is
what a sliding-window layer's mask reads. Each node of row ``r`` is written at position ``length[r] + depth`` (RoPE
sees each sequence as if it ran alone) and sees ``valid[r, :P]`` plus its own ancestors: the mask of
:meth:`~specdec.target.HFTarget.forward_tree`, row by row, built by the model's
:class:`~specdec.attention.AttentionLayout`.

Contract (what makes a row's logits its sequence's alone): a masked slot contributes exactly zero, so it must hold
finite keys and values (an unwritten slot could hold NaN, and ``0 * NaN`` is NaN): every row's cache is allocated
zeroed, so the slots below ``P`` that a row never wrote (after a shorter prompt, or a jump of the clock for a longer
one) hold zeros.

Rows join with their prompt prefilled alone, by the target's own :meth:`~specdec.target.HFTarget.prefill` (the same
kernels as a call with one prompt), its keys and values copied into slots ``[0, L)`` of a new batch row; rows leave
as they finish. Unmarked slots accumulate as ``P`` advances by the tree size each cycle; :meth:`BatchRows.compact`
moves every row's marked slots to the front when the cache is full or mostly dead.

Scope: eager shapes, and a target served by its ahead-of-time package (:mod:`specdec.backends.aot`, whose batch
dimension is dynamic: the same forward, the rows' caches handed to it, the masks over every allocated slot); a target
compiled by ``torch.compile`` or captured in CUDA graphs is refused (:class:`BatchUnsupportedError`). On the package
each row's cache is allocated for what the batch holds and grown (at least doubled) as the clock needs, up to the
capacity, since the package's forward reads every slot it is given (a masked one contributes zero, as above). The
masks are built on the host row by row (on CUDA each row's tree is read back: a CPU loop until the GPU work captures
batches).
"""

from __future__ import annotations

import warnings

import torch

from specdec.backends import FastPathWarning
from specdec.backends.aot import MAX_BATCH, MAX_ROWS
from specdec.backends.compiled import PackageError
from specdec.errors import SpecdecError
from specdec.interfaces import TargetHidden, TargetStep
from specdec.kvcache import CacheFullError, PositionCache
from specdec.runner import ROOM
from specdec.tree import DraftTree

__all__ = ["BatchRows", "BatchUnsupportedError", "batch_shapes"]


class BatchUnsupportedError(SpecdecError, ValueError):
    """A target the batched loop cannot serve (the message says what to use instead)."""


def batch_shapes(static_shapes, device: str | torch.device):
    """What ``static_shapes`` a batched call's target takes for the option ``static_shapes``: as given, except that
    ``"auto"`` on a CUDA device (graphs captured in this process, which batches cannot use) becomes eager shapes; on a
    CPU ``"auto"`` stays: the model's package where this machine has one (batches run on it), else eager shapes."""
    return False if static_shapes == "auto" and torch.device(device).type == "cuda" else static_shapes


class BatchRows:
    """The rows of one batched call on ``target``'s model: their shared cache, slots, lengths and forwards.

    Args:
        target: an eager-shape :class:`~specdec.target.HFTarget`, or one served by its ahead-of-time package; its own
            cache serves each row's prefill.
        capacity: slots per row (default: the target's ``max_len``, which every row's prompt, new tokens and
            tree already fit, :func:`~specdec.calls.prepare_call`).

    Attributes:
        lengths: ``[B]`` tokens in each row's sequence (host ints).
        clock: the shared write slot ``P``.
    """

    def __init__(self, target, capacity: int | None = None) -> None:
        #: The package's forward (:class:`~specdec.backends.aot.AotForward`) where the target runs one, else None.
        self.package = None
        if getattr(target, "static", False):
            if not (target.execution.aot and target.runner.compiled):
                raise BatchUnsupportedError(
                    "batched decoding runs on eager shapes or an ahead-of-time package; this target runs static "
                    "shapes compiled in this process (torch.compile or CUDA graphs): build it with "
                    "static_shapes=False (or 'aot' on a CPU) for several prompts, or decode them one at a time"
                )
            self.package = target.runner._run
        self.target = target
        self.capacity = capacity or target.max_len
        #: Slots allocated per row: the capacity on eager shapes; on the package what the batch holds, grown.
        self.slots = 0 if self.package else self.capacity
        self.cache = PositionCache(target.num_layers, self.capacity, dtype=target.execution.cache_dtype)
        self.lengths: list[int] = []
        self.clock = 0
        self._written = 0  # slots the latest forward wrote at the clock
        self.valid = torch.zeros(0, self.capacity, dtype=torch.bool)
        self.slot_pos = torch.zeros(0, self.capacity, dtype=torch.long)

    @property
    def size(self) -> int:
        return len(self.lengths)

    @property
    def max_size(self) -> int:
        """The most rows at once: :data:`~specdec.backends.aot.MAX_BATCH` on the package, else unbounded."""
        return MAX_BATCH if self.package is not None else 1 << 30

    def _on_package(self, n: int) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """The rows' keys and values where the next forward (``n`` nodes a row) runs on the package: up to its rows,
        once it is loaded (a package that cannot be built or loaded warns once and leaves the batch on the same
        forward, eagerly); None: eagerly."""
        if self.package is None or n > MAX_ROWS:
            return None
        layers = self.cache.layers
        keys, values = [layer.keys for layer in layers], [layer.values for layer in layers]
        try:
            self.package.ensure(keys, values, self.size > 1)
        except PackageError as error:
            warnings.warn(f"{error}; the batch runs its forwards eagerly", FastPathWarning, stacklevel=3)
            self.package = None
            return None
        return keys, values

    @torch.no_grad()
    def join(self, input_ids: torch.Tensor) -> TargetStep:
        """Prefill ``input_ids [L]`` alone on the target and add it as the last row; its prefill step returned.

        Raises:
            CacheFullError: the prompt does not fit a row.
        """
        if self.package is not None and self.size >= MAX_BATCH:
            raise BatchUnsupportedError(f"a package serves at most {MAX_BATCH} sequences at once; lower max_batch")
        step = self.target.prefill(input_ids)
        n = input_ids.shape[0]
        if n >= self.capacity:
            raise CacheFullError(f"prompt of {n} tokens does not fit a batch row of {self.capacity} slots")
        self.clock = max(self.clock, n)  # slots [P, n) of the rows already here hold zeros (allocated so)
        self._reserve(self.clock)
        for layer, source in zip(self.cache.layers, self.target.cache.layers, strict=True):
            for name in ("keys", "values"):
                prefilled = getattr(source, name)  # [1, H, C, D]
                row = prefilled.new_zeros(1, prefilled.shape[1], self.slots, prefilled.shape[3])
                row[:, :, :n] = prefilled[:, :, :n]
                setattr(layer, name, torch.cat([getattr(layer, name), row]) if layer.is_initialized else row)
            layer.is_initialized = True
        valid = torch.zeros(1, self.capacity, dtype=torch.bool)
        valid[0, :n] = True
        self.valid = torch.cat([self.valid, valid])
        self.slot_pos = torch.cat([self.slot_pos, torch.arange(self.capacity)[None].clamp(max=n - 1)])
        self.lengths.append(n)
        return step

    def leave(self, keep: list[int]) -> None:
        """Keep only rows ``keep`` (in that order): the others' cache rows are dropped."""
        if keep == list(range(self.size)):
            return
        index = torch.tensor(keep, dtype=torch.long)
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.keys, layer.values = layer.keys[index], layer.values[index]
        self.valid, self.slot_pos = self.valid[index], self.slot_pos[index]
        self.lengths = [self.lengths[i] for i in keep]
        if not keep:
            self.clock = 0

    @torch.no_grad()
    def compact(self) -> None:
        """Move each row's marked slots to slots ``[0, length)`` (in order); the clock becomes the longest row."""
        longest = max(self.lengths)
        order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :longest]  # marked first
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                index = order.to(t.device)[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
                moved = t.gather(2, index)
                t[:, :, :longest] = moved
        lengths = torch.tensor(self.lengths)
        slots = torch.arange(self.capacity)
        self.valid = slots[None] < lengths[:, None]
        self.slot_pos = slots[None].expand(self.size, -1).clone()
        self.clock = longest
        # slots a shorter row now leaves below the clock hold another slot's (finite) entries: masked, never read

    def _room(self, n: int) -> None:
        """Make room for ``n`` slots at the clock: compact when full, or when over half the slots below it are dead."""
        longest = max(self.lengths)
        if self.clock + n > self.capacity or self.clock > 2 * longest + 64:
            self.compact()
        if self.clock + n > self.capacity:
            raise CacheFullError(f"{longest} tokens + a tree of {n} exceed the batch rows' {self.capacity} slots")
        self._reserve(self.clock + n)

    def _reserve(self, slots: int) -> None:
        """On the package: at least ``slots`` slots allocated per row (grown to the larger of twice the present size and
        ``slots`` + :data:`~specdec.runner.ROOM`, never past the capacity; the written slots copied once)."""
        if slots <= self.slots:
            return
        grown = min(self.capacity, max(2 * self.slots, slots + ROOM))
        for layer in self.cache.layers:
            if layer.is_initialized:
                for name in ("keys", "values"):
                    t = getattr(layer, name)
                    wider = t.new_zeros(t.shape[0], t.shape[1], grown, t.shape[3])
                    wider[:, :, : self.slots] = t
                    setattr(layer, name, wider)
        self.slots = grown

    @torch.no_grad()
    def forward(self, trees: list[DraftTree]) -> list[TargetStep]:
        """One forward of every row's tree (``trees[r]``, root first); each row's logits ``[n_r, V]`` and hidden
        states, as :meth:`~specdec.target.HFTarget.forward_tree` gives them for that row's sequence alone."""
        if len(trees) != self.size:
            raise ValueError(f"{len(trees)} trees for {self.size} rows")
        n = max(t.num_nodes for t in trees)
        self._room(n)
        p, device, layout = self.clock, self.target.device, self.target.layout
        package = self._on_package(n)
        width = p + n if package is None else self.slots  # the package reads (and is masked over) every slot
        ids = torch.zeros(self.size, n, dtype=torch.long, device=device)
        positions = torch.zeros(self.size, n, dtype=torch.long)
        masks = []
        for r, tree in enumerate(trees):
            k = tree.num_nodes
            ids[r, :k] = tree.tokens
            pos = tree.position_ids(self.lengths[r]).cpu()
            positions[r, :k], positions[r, k:] = pos, pos[-1]
            self.slot_pos[r, p : p + n] = positions[r]
            allowed = torch.zeros(n, width, dtype=torch.bool)
            allowed[:k, :p] = self.valid[r, :p]
            allowed[:k, p : p + k] = tree.attn_mask.cpu()
            allowed[k:, p + k : p + n] = torch.eye(n - k, dtype=torch.bool)  # padding nodes see themselves only
            masks.append(layout.mask(allowed.to(device), self.slot_pos[r, :width].to(device), positions[r].to(device)))
        mask = {key: torch.cat([m[key] for m in masks]) for key in masks[0]} if layout.hybrid else torch.cat(masks)
        hidden, positions = self.target.hidden, positions.to(device)
        if package is not None:
            out = self.package.step(ids, positions, mask, torch.tensor(p, device=device), *package)
        else:
            self.cache.set_write_pos(p)
            out = self.target.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                output_hidden_states=hidden.any,
                **{layout.cache_kwarg: self.cache},
            )
        self._written = n
        logits = out.logits.float()
        steps = []
        for r, tree in enumerate(trees):
            k = tree.num_nodes
            states = TargetHidden()
            if hidden.any:
                h = out.hidden_states
                states = TargetHidden(h[-1][r, :k] if hidden.final else None, {i: h[i][r, :k] for i in hidden.layers})
            steps.append(TargetStep(logits[r, :k], states))
        return steps

    def commit(self, row: int, accepted: list[int]) -> None:
        """Row ``row`` keeps the nodes ``accepted`` (root first) of the latest forward's tree."""
        p = self.clock
        self.valid[row, [p + a for a in accepted]] = True
        self.lengths[row] += len(accepted)

    def advance(self) -> None:
        """After every row committed the latest forward: the clock moves past its slots."""
        self.clock, self._written = self.clock + self._written, 0

"""One model runner: how every Hugging Face model specdec runs (the target, a small-LM drafter, the continuous batcher
of :mod:`specdec.train.continuous`) meets its cache.

A :class:`ModelRunner` owns a :class:`~specdec.kvcache.PositionCache` and one forward: ``n`` new tokens written at
cache slots ``start .. start + n``, at sequence positions ``positions``, each seeing the slots ``allowed`` marks. With
``allowed=None`` every new token sees all ``start`` slots before it and the new tokens before it (causal), through
the model's own causal mask logic (no ``O(L^2)`` float mask for a prompt); otherwise the mask is built by the model's
:class:`~specdec.attention.AttentionLayout` (full, sliding-window or hybrid layers) from ``allowed`` and the
sequence position (``keys``) of every slot.

Static shapes (:mod:`specdec.backends.compiled`): the cache holds transformers' ``StaticLayer`` s, every forward's
mask spans the whole capacity, and ``n`` rows are padded to ``bucket(n)`` rows, so the model's forward compiles once
per bucket. One padding convention for every model: padding rows sit after the real ones, at the last real position,
and see only their own slot. No real row sees them, and their slots, after the real ones, are overwritten by later
forwards before any real row can see them. A forward longer than the largest bucket, the first one (it allocates the
static cache, whose tensors must get fixed addresses outside any trace) and one the caller marks
(``may_compile=False``, the target's prefill) run the same static forward eagerly.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.attention import AttentionLayout
from specdec.backends.aot import MAX_ROWS, AotForward
from specdec.backends.compiled import BUCKETS, bucket, compile_forward, freezes, run_compiled
from specdec.interfaces import HiddenRequest, TargetHidden
from specdec.kvcache import CacheFullError, PositionCache

__all__ = ["ModelRunner"]


#: Slots past a prompt that the package's cache starts with (:meth:`ModelRunner._fit`).
ROOM = 256


class ModelRunner:
    """Runs a Hugging Face causal LM on a preallocated, position-indexed cache, eagerly or at static shapes.

    Args:
        model: the (already prepared, :mod:`specdec.backends`) model; its forward takes a 4-D mask, ``position_ids``
            and the cache keyword its layout names.
        layout: the model's attention layout (builds masks, names the cache keyword).
        capacity: positions real tokens may occupy.
        static: fixed-shape forwards compiled once per bucket (the module docstring).
        buckets: forward sizes of static shapes.
        cache_dtype: the cache's keys/values dtype (None: the model's; float64 for row-invariant numerics, whose
            attention reads float64 keys/values, :mod:`specdec.backends.gqa`); eager shapes only.
        aot: with ``static``, the compiled forward is the model's ahead-of-time package
            (:mod:`specdec.backends.aot`): any row count up to its limit without padding, nothing compiled here.

    Attributes:
        cache: the :class:`~specdec.kvcache.PositionCache` (static: ``max(buckets)`` slots of room for padding rows).
    """

    def __init__(
        self,
        model: nn.Module,
        layout: AttentionLayout,
        capacity: int,
        static: bool = False,
        buckets: tuple[int, ...] = BUCKETS,
        cache_dtype: torch.dtype | None = None,
        aot: bool = False,
    ) -> None:
        self.model, self.layout, self.capacity, self.static, self.aot = model, layout, capacity, static, aot and static
        self.buckets = tuple(sorted(buckets))
        layers = int(model.config.get_text_config().num_hidden_layers)
        self.cache = PositionCache(layers, capacity + max(self.buckets) * static, static, cache_dtype)
        self._run = model
        if static:
            self._run = AotForward(model, layout.cache_kwarg, layout.mask) if self.aot else compile_forward(model)
        self._rows = MAX_ROWS if self.aot else max(self.buckets)  # the most rows a compiled forward takes
        #: Package path: the cache is sized at each prompt to its length plus ``room`` slots and grown (at least
        #: doubled) when a forward needs more, up to ``capacity`` (:meth:`_fit`); 0 keeps the whole capacity.
        self.room = ROOM if self.aot else 0

    @property
    def compiled(self) -> bool:
        """Static forwards run compiled (False on eager shapes, or after torch.compile could not serve the model)."""
        return self._run is not self.model

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        start: int,
        allowed: torch.Tensor | None = None,
        keys: torch.Tensor | None = None,
        keep: int = 0,
        hidden: HiddenRequest | None = None,
        may_compile: bool = True,
    ) -> tuple[torch.Tensor, TargetHidden]:
        """Run ``n`` new tokens at cache slots ``start .. start + n``.

        Args:
            ids: ``[n]`` long token ids. positions: ``[n]`` long sequence positions (RoPE).
            start: the cache slot of the first new token.
            allowed: ``[n, start + n]`` bool, which slots each new token sees (its own among them), or None: all
                earlier slots and causal among the new tokens.
            keys: ``[start + n]`` long, the sequence position of every slot (with ``allowed``; sliding windows).
            keep: 0 for the logits of every row, else of the last ``keep`` rows.
            hidden: hidden states to return for all ``n`` rows (None: none).
            may_compile: with static shapes, run compiled where the module docstring allows (False: eagerly).

        Returns:
            ``(logits [n or keep, V] float32, hidden states at the n rows)``.

        Raises:
            CacheFullError: the new tokens do not fit the capacity.
        """
        n, hidden = ids.shape[0], hidden or HiddenRequest()
        if start + n > self.capacity:
            raise CacheFullError(f"{start} cached + {n} new tokens exceed the cache of {self.capacity}; raise max_len")
        if (allowed is None) != (keys is None):
            raise ValueError("allowed and keys go together (both, or neither for a causal forward)")
        run, rows = self.model, keep
        mask = None  # causal over the cache: the model's own mask logic
        if self.room:
            self._fit(start, n)
        if self.static:
            compiled = may_compile and n <= self._rows and bool(self.cache.layers[0].is_initialized)
            ids, positions, mask = self._static_inputs(ids, positions, start, allowed, keys, compiled)
            if compiled:
                run, rows = self._run, 0  # a compiled graph keeps every row
        elif allowed is not None:
            mask = self.layout.mask(allowed, keys, positions)
        self.cache.set_write_pos(start)
        inputs = dict(
            input_ids=ids[None],
            attention_mask=mask,
            position_ids=positions[None],
            **{self.layout.cache_kwarg: self.cache},
            use_cache=True,
            # static: the compiled graph always returns them, so a drafter's request never adds a graph
            output_hidden_states=hidden.any or self.static,
            logits_to_keep=rows,
        )
        out, fell_back = run_compiled(run, self.model, lambda: self.cache.set_write_pos(start), inputs)
        if self.static and run is self.model and freezes(ids.device):  # the allocating (or any eager) forward
            self.cache.release_static_addresses()
        if fell_back:
            self._run = self.model
        logits = out.logits[0, :n]  # drops a bucket's padding rows (a kept tail of `keep` rows is shorter than n)
        if keep:
            logits = logits[-keep:]
        states = TargetHidden()
        if hidden.any:
            h = out.hidden_states
            states = TargetHidden(h[-1][0, :n] if hidden.final else None, {i: h[i][0, :n] for i in hidden.layers})
        if self.static and logits.device.type == "cuda":  # CUDA-graph outputs are overwritten by the next replay
            logits = logits.clone()
            states = states.select(torch.arange(n, device=logits.device)) if hidden.any else states
        return logits.float(), states

    def _fit(self, start: int, n: int) -> None:
        """Size the package's cache to what this generation holds: at a prompt (``start == 0``), its ``n`` tokens plus
        :attr:`room`; later, grown to the larger of twice its size and ``start + n + room`` where ``n`` more rows
        (and a padding of up to the largest bucket) would not fit; never past the whole capacity.

        The package reads every slot of the capacity it is given, and a step's cost follows it: after 256 tokens one
        row took 25.4-26.0 ms at 2,048 slots against 20.6-21.6 ms at 321 on the AMD Zen 4
        (``docs/results/2026-11-30-package-amd-f25m17/capacity_rows.txt``). Growing copies the kept slots once.
        """
        pad, size = max(self.buckets), self.cache.max_len
        if start == 0:
            want = n + self.room + pad
        elif start + n + pad > size:
            want = max(2 * size, start + n + self.room + pad)
        else:
            return
        want = min(want, self.capacity + pad)
        if want != size:  # a package is never torch.compiled: its cache's static-address marks do not matter
            self.cache.resize(want, keep=start)

    def _static_inputs(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        start: int,
        allowed: torch.Tensor | None,
        keys: torch.Tensor | None,
        compiled: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | dict[str, torch.Tensor]]:
        """Fixed-shape inputs: ``n`` rows padded to ``b = bucket(n)`` (``n`` when not ``compiled``) and the mask
        ``[1, 1, b, capacity]`` over the whole cache, padding rows as the module docstring says."""
        n, device = ids.shape[0], ids.device
        if allowed is None:
            causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
            allowed = torch.cat([torch.ones(n, start, dtype=torch.bool, device=device), causal], dim=1)
            keys = torch.cat([torch.arange(start, device=device), positions])
        b = bucket(n, self.buckets) if compiled and not self.aot else n  # a package takes any row count
        capacity = self.cache.max_len
        full = torch.zeros(b, capacity, dtype=torch.bool, device=device)
        full[:n, : start + n] = allowed
        full[n:, start + n : start + b] = torch.eye(b - n, dtype=torch.bool, device=device)
        pad = positions[-1:].expand(b - n)
        positions = torch.cat([positions, pad])
        all_keys = torch.arange(capacity, device=device)
        all_keys[: start + n] = keys
        all_keys[start + n : start + b] = pad
        return torch.cat([ids, ids.new_zeros(b - n)]), positions, self.layout.mask(full, all_keys, positions)

    @torch.no_grad()
    def forward_rows(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        start: int,
        visible: torch.Tensor,
        keep: int = 1,
        hidden: bool = False,
        cache: PositionCache | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """A batch of ``B`` independent rows (continuous batching, :mod:`specdec.train.continuous`), eager shapes.

        Each row has its own positions and sees the slots ``visible`` marks; among the ``n`` new tokens the model's
        own mask logic adds causality (a 2-D padding mask, so full attention only: a row's slots may have gaps).

        Args:
            ids, positions: ``[B, n]`` long. start: the slot of the first new token, shared by the rows.
            visible: ``[B, start + n]`` bool, the slots each row attends to (its new tokens' own slots included).
            keep: logits of the last ``keep`` positions. hidden: also return every layer's hidden states.
            cache: the cache to write (default: :attr:`cache`; a prefill may fill a cache of its own first).

        Returns:
            ``(logits [B, keep, V] float32, hidden_states or None)``.
        """
        if self.static:
            raise ValueError("batched rows run on eager shapes only")
        cache = self.cache if cache is None else cache
        cache.set_write_pos(start)
        out = self.model(
            input_ids=ids,
            attention_mask=visible.long(),
            position_ids=positions,
            use_cache=True,
            logits_to_keep=keep,
            output_hidden_states=hidden,
            **{self.layout.cache_kwarg: cache},
        )
        return out.logits.float(), out.hidden_states if hidden else None

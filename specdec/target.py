"""Target adapter for Hugging Face causal LMs: prefill, tree forward through an explicit 4-D mask, commit.

The adapter owns a :class:`~specdec.kvcache.PositionCache`. A tree of ``N`` nodes is written at positions
``length .. length + N - 1`` with ``position_ids = length + depth`` and a mask in which node i sees the
committed prefix plus its own ancestors. :meth:`HFTarget.commit` moves the accepted path's entries to
``length ..`` and advances ``length``; the other entries are overwritten by the next forward.

With ``static_shapes`` the same forward runs with fixed shapes (:mod:`specdec.backends.compiled`): a static cache, a
mask over the whole capacity, and trees padded to a bucket of sizes.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel

from specdec.attention import AttentionLayout, UnsupportedModelError
from specdec.backends import StaticShapes, prepare_model
from specdec.backends.compiled import BUCKETS, bucket, compile_forward, run_compiled
from specdec.errors import SpecdecError
from specdec.interfaces import HiddenRequest, Target, TargetHidden, TargetStep
from specdec.kvcache import CacheFullError, PositionCache
from specdec.tree import DraftTree

__all__ = ["HFTarget", "CacheFullError", "EmptyPromptError", "UnsupportedModelError"]


class EmptyPromptError(SpecdecError, ValueError):
    """A generation was asked for with no prompt tokens."""


def _eos_ids(model: PreTrainedModel) -> tuple[int, ...]:
    """The EOS ids ``generate`` would stop at: the generation config's, else the model config's."""
    for config in (getattr(model, "generation_config", None), model.config.get_text_config(), model.config):
        eos = getattr(config, "eos_token_id", None)
        if eos is not None:
            return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
    return ()


class HFTarget(Target):
    """A Hugging Face causal LM behind the :class:`~specdec.interfaces.Target` interface (batch size 1).

    Args:
        model: a Hugging Face decoder-only causal LM with full and/or sliding-window attention run by ``sdpa`` or
            ``eager`` (:mod:`specdec.attention`; tested families in ``docs/models.md``). Anything else is refused.
        max_len: cache capacity in tokens (prompt + generated + one tree).
        hidden: hidden states every forward should return (drafters add theirs via :meth:`request_hidden`).
        weights: how the weights run (:mod:`specdec.backends`): ``"auto"`` (default) packs the linears for oneDNN
            where that pays on this CPU (float32), ``"packed"`` packs every linear, ``"stock"`` runs them as loaded.
        static_shapes: fixed-shape forwards compiled once per bucket (:mod:`specdec.backends.compiled`); ``"auto"``
            (default): on for CUDA, off on a CPU.
        buckets: forward sizes of static shapes (a tree is padded to the next one).
        in_place: transform ``model`` itself instead of a copy that shares its tensors (saves the packed weights'
            memory; the model then runs this way for every holder of it). Default: ``model`` is left as it was.

    Attributes:
        model: the model this adapter runs (``model`` itself, or its transformed copy).
        execution: what the two backend choices resolved to (:class:`~specdec.backends.Execution`).

    Raises:
        UnsupportedModelError: a model this adapter cannot serve exactly (the message says what to do).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        max_len: int = 2048,
        hidden: HiddenRequest | None = None,
        weights: str = "auto",
        static_shapes: StaticShapes = "auto",
        buckets: tuple[int, ...] = BUCKETS,
        in_place: bool = False,
    ) -> None:
        AttentionLayout.of(model)  # refuse a model we cannot serve before copying it
        model, self.execution = prepare_model(model, weights, static_shapes, in_place=in_place)
        self.model: PreTrainedModel = model
        self.layout = AttentionLayout.of(model, warn=False)
        config = model.config.get_text_config()
        self.config = config
        head = model.get_output_embeddings()
        self.vocab_size = int(getattr(head, "out_features", 0) or config.vocab_size)
        self.num_layers = int(config.num_hidden_layers)
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and max_len > limit:
            raise ValueError(f"max_len={max_len} exceeds the model's max_position_embeddings={limit}")
        self.max_len = max_len
        self.eos_token_ids = _eos_ids(model)
        self.max_new_tokens = getattr(getattr(model, "generation_config", None), "max_new_tokens", None)
        self.hidden = hidden or HiddenRequest()
        self.static: bool = self.execution.static
        self.buckets = tuple(sorted(buckets))
        # static: room after max_len for a tree padded to its bucket
        self.cache = PositionCache(self.num_layers, max_len + max(self.buckets) * self.static, self.static)
        self._run = compile_forward(model) if self.static else model
        self.length = 0

    @property
    def weights_choice(self) -> str:
        """The ``weights`` choice that reproduces this adapter's weights on modules of :attr:`model` (idempotent)."""
        return "auto" if self.execution.weights == "packed-vocab" else self.execution.weights

    def sibling(self, max_len: int) -> HFTarget:
        """Another adapter, with a cache of its own of ``max_len``, over this one's (already prepared) model."""
        return HFTarget(self.model, max_len, None, self.weights_choice, self.static, self.buckets, in_place=True)

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    def request_hidden(self, request: HiddenRequest) -> None:
        bad = [i for i in request.layers if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"hidden layers {bad} out of range for a target with {self.num_layers} layers")
        self.hidden = self.hidden | request

    def reset(self) -> None:
        self.length = 0

    def _forward(
        self, ids: torch.Tensor, positions: torch.Tensor, block_mask: torch.Tensor | None, logits_to_keep: int
    ) -> TargetStep:
        """Run ``n`` new tokens at cache slots ``length .. length + n``.

        Args:
            ids: ``[n]`` long. positions: ``[n]`` long. block_mask: ``[n, n]`` bool among the new tokens, or None
                for a single token that sees the whole prefix.
            logits_to_keep: 0 for all rows, else the last k rows.
        """
        n = ids.shape[0]
        if self.length + n > self.max_len:
            raise CacheFullError(
                f"{self.length} cached + {n} new tokens exceed the cache of {self.max_len}; raise max_len"
            )
        run = self.model
        mask = None  # causal over the cache: the model's own mask logic (no O(L^2) float mask)
        if self.static:
            ids, positions, mask = self._static_inputs(ids, positions, block_mask, compiled=logits_to_keep == 0)
            run = self._run if logits_to_keep == 0 else self.model  # the prefill (last row only) runs eagerly
        elif block_mask is not None:
            allowed = torch.cat([torch.ones(n, self.length, dtype=torch.bool, device=ids.device), block_mask], dim=1)
            keys = torch.cat([torch.arange(self.length, device=ids.device), positions])
            mask = self.layout.mask(allowed, keys, positions)
        self.cache.set_write_pos(self.length)
        want = self.hidden
        inputs = dict(
            input_ids=ids[None],
            attention_mask=mask,
            position_ids=positions[None],
            **{self.layout.cache_kwarg: self.cache},
            use_cache=True,
            # static: the compiled graph always returns them, so a drafter's request never adds a graph
            output_hidden_states=want.any or self.static,
            logits_to_keep=logits_to_keep,
        )
        out, fell_back = run_compiled(run, self.model, lambda: self.cache.set_write_pos(self.length), inputs)
        if fell_back:
            self._run = self.model
        hidden = TargetHidden()
        rows = slice(0, n if logits_to_keep == 0 else None)  # drop a bucket's dummy rows
        if want.any:
            states = out.hidden_states
            hidden = TargetHidden(
                final=states[-1][0, rows] if want.final else None,
                layers={i: states[i][0, rows] for i in want.layers},
            )
        logits = out.logits[0, rows].float()
        if self.static and logits.device.type == "cuda":  # CUDA-graph outputs are overwritten by the next replay
            logits = logits.clone()
            hidden = hidden.select(torch.arange(n, device=logits.device)) if want.any else hidden
        return TargetStep(logits, hidden)

    def _static_inputs(
        self, ids: torch.Tensor, positions: torch.Tensor, block_mask: torch.Tensor | None, compiled: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | dict[str, torch.Tensor]]:
        """Fixed-shape inputs for the static cache: ``ids``/``positions`` padded to the bucket ``b`` (``n`` for the
        eager prefill) and the mask ``[1, 1, b, capacity]`` over the whole cache.

        Dummy rows (``n .. b``) see the prefix and themselves; no real row sees them, so they change no real logit
        and their cache entries, written after the real ones, are overwritten before anyone attends to them.
        """
        n, device = ids.shape[0], ids.device
        b = bucket(n, self.buckets) if compiled else n
        if b > n:
            ids = torch.cat([ids, ids.new_zeros(b - n)])
            positions = torch.cat([positions, positions.new_full((b - n,), self.length)])
        block = torch.eye(b, dtype=torch.bool, device=device)
        block[:n, :n] = torch.ones(n, n, dtype=torch.bool, device=device).tril() if block_mask is None else block_mask
        capacity, start = self.cache.max_len, self.length
        allowed = torch.zeros(b, capacity, dtype=torch.bool, device=device)
        allowed[:, :start] = True
        allowed[:, start : start + b] = block
        keys = torch.arange(capacity, device=device)
        keys[start : start + b] = positions
        return ids, positions, self.layout.mask(allowed, keys, positions)

    @torch.no_grad()
    def warm_up(self) -> dict[int, float]:
        """Compile every bucket now instead of at its first use (static shapes; a no-op otherwise).

        Runs a 1-token prompt and then one chain of each bucket's size (wall seconds per bucket returned: the
        compile time, or an inductor cache hit). Leaves the adapter empty (:meth:`reset`). The graphs do not depend
        on which hidden states drafters request, so this may run before or after a generator is built.
        """
        seconds: dict[int, float] = {}
        if not self.static:
            return seconds
        device = self.device
        for size in self.buckets:
            if size >= self.max_len:
                continue
            self.prefill(torch.zeros(1, dtype=torch.long, device=device))
            chain = torch.arange(size, device=device) - 1
            start = time.perf_counter()
            self.forward_tree(DraftTree.from_parents(torch.zeros(size, dtype=torch.long, device=device), chain, size))
            seconds[size] = time.perf_counter() - start
        self.reset()
        return seconds

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor) -> TargetStep:
        """Run the prompt ``[L]``: logits ``[1, V]`` for the last position, hidden states for all ``L``."""
        if input_ids.ndim != 1 or input_ids.shape[0] == 0:
            raise EmptyPromptError(f"prompt must be a non-empty 1-D tensor of token ids, got {tuple(input_ids.shape)}")
        if input_ids.shape[0] >= self.max_len:
            raise CacheFullError(
                f"prompt of {input_ids.shape[0]} tokens does not fit the cache of {self.max_len} tokens "
                "(it needs room for at least one more); raise max_len or shorten the prompt"
            )
        self.length = 0
        n = input_ids.shape[0]
        positions = torch.arange(n, device=input_ids.device)
        step = self._forward(input_ids, positions, None, logits_to_keep=1)
        self.length = n
        return step

    @torch.no_grad()
    def forward_tree(self, tree: DraftTree) -> TargetStep:
        """One forward over root + tree; logits ``[N, V]`` and hidden states for all nodes."""
        return self._forward(tree.tokens, tree.position_ids(self.length), tree.attn_mask, logits_to_keep=0)

    @torch.no_grad()
    def decode_one(self, token: torch.Tensor) -> TargetStep:
        """Run and commit one token (vanilla decoding); logits ``[1, V]``."""
        ids = token.reshape(1)
        positions = torch.full((1,), self.length, dtype=torch.long, device=ids.device)
        step = self._forward(ids, positions, None, 0)
        self.length += 1
        return step

    def commit(self, accepted: torch.Tensor, count: int) -> None:
        """Keep nodes ``accepted[:count]`` (root first, so ``accepted[0] == 0``) after the committed prefix."""
        # static: the whole fixed-size path (entries after ``count`` land past the prefix, see PositionCache.compact).
        # Eager, root alone (no draft token accepted): the root's entries already sit at ``length``, nothing moves.
        if self.static:
            self.cache.compact(self.length, accepted.clamp(min=0))
        elif count > 1:
            self.cache.compact(self.length, accepted[:count])
        self.length += count

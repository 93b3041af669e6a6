"""Target adapter for Hugging Face causal LMs: prefill, tree forward through an explicit 4-D mask, commit.

The adapter runs its model through a :class:`~specdec.runner.ModelRunner` (the one runner the small-LM drafter
uses too), which owns a :class:`~specdec.kvcache.PositionCache`. A tree of ``N`` nodes is written at positions
``length .. length + N - 1`` with ``position_ids = length + depth`` and a mask in which node i sees the
committed prefix plus its own ancestors. :meth:`HFTarget.commit` moves the accepted path's entries to
``length ..`` and advances ``length``; the other entries are overwritten by the next forward.

With ``static_shapes`` the same forward runs with fixed shapes (:mod:`specdec.backends.compiled`): a static cache, a
mask over the whole capacity, and trees padded to a bucket of sizes (:class:`~specdec.runner.ModelRunner`).
"""

from __future__ import annotations

import numbers
import time

import torch
from transformers import PreTrainedModel

from specdec.attention import AttentionLayout, UnsupportedModelError
from specdec.backends import Invariant, StaticShapes, execution_label, prepare_model
from specdec.backends.compiled import BUCKETS
from specdec.backends.skinny_choice import skinny_measures
from specdec.errors import SpecdecError
from specdec.interfaces import HiddenRequest, Target, TargetStep
from specdec.kvcache import CacheFullError
from specdec.package_timing import settle
from specdec.runner import ModelRunner
from specdec.tree import DraftTree

__all__ = ["HFTarget", "CacheFullError", "EmptyPromptError", "UnsupportedModelError"]


class EmptyPromptError(SpecdecError, ValueError):
    """A generation was asked for with no prompt tokens."""

    command_lines = {"generate": "the prompt encodes to no tokens; pass a PROMPT with some text"}


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
        static_shapes: fixed-shape forwards compiled once per bucket (:mod:`specdec.backends.compiled`); ``"aot"``:
            the same forward from the model's ahead-of-time package, built once per machine (CPU,
            :mod:`specdec.backends.aot`); ``"auto"`` (default): on for CUDA; on a CPU, from the package where this
            machine has one, else off.
        buckets: forward sizes of static shapes (a tree is padded to the next one).
        in_place: transform ``model`` itself instead of a copy that shares its tensors (saves the packed weights'
            memory; the model then runs this way for every holder of it). Default: ``model`` is left as it was.
        invariant: row-invariant numerics (:func:`specdec.backends.apply`): a row's logits bitwise the same in a
            1-token step and in a tree forward, so greedy speculative output equals vanilla's token for token.
            ``"auto"`` (default): on for a bfloat16 model with packed linears.

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
        invariant: Invariant = "auto",
    ) -> None:
        if isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral) or max_len < 2:
            raise ValueError(f"max_len must be an integer >= 2 (the cache's capacity in tokens), got {max_len!r}")
        AttentionLayout.of(model)  # refuse a model we cannot serve before copying it
        if any(p.is_meta for p in model.parameters()):
            raise UnsupportedModelError(
                "the model's weights are on the meta device (not loaded): load them (from_pretrained without "
                "device='meta', or load_state_dict(..., assign=True)) before building a target"
            )
        limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        if limit is not None and max_len > limit:
            raise ValueError(f"max_len={max_len} exceeds the model's max_position_embeddings={limit}")
        settles = static_shapes == "aot" and weights == "auto" and invariant is not True and skinny_measures()
        if settles and execution_label(model) == "stock":
            settle(model)  # the package's kernels decided by timing whole packages, once per machine and model
        model, self.execution = prepare_model(model, weights, static_shapes, in_place=in_place, invariant=invariant)
        self.model: PreTrainedModel = model
        self.layout = AttentionLayout.of(model, warn=False)
        config = model.config.get_text_config()
        self.config = config
        head = model.get_output_embeddings()
        self.vocab_size = int(getattr(head, "out_features", 0) or config.vocab_size)
        self.num_layers = int(config.num_hidden_layers)
        self.max_len = max_len
        self.eos_token_ids = _eos_ids(model)
        self.max_new_tokens = getattr(getattr(model, "generation_config", None), "max_new_tokens", None)
        self.hidden = hidden or HiddenRequest()
        self.static: bool = self.execution.static
        execution = self.execution
        self.runner = ModelRunner(
            model, self.layout, max_len, self.static, buckets, execution.cache_dtype, execution.aot
        )
        self.buckets, self.cache = self.runner.buckets, self.runner.cache
        self.length = 0

    @property
    def weights_choice(self) -> str:
        """The ``weights`` choice that reproduces this adapter's weights on modules of :attr:`model` (idempotent):
        ``"auto"`` where it packed a subset (``"packed-vocab"`` by the rule, ``"packed-some"`` as measured: the same
        rule or the cached measurement chooses the same subset again), and where single rows run stock or on the skinny
        kernel, or linears run on it, or few rows pad (only ``"auto"`` chooses those)."""
        subset = self.execution.weights in ("packed-vocab", "packed-some")
        chosen = self.execution.single_stock or self.execution.single_skinny or self.execution.skinny
        chosen = chosen or self.execution.pad_rows > 1
        return "auto" if subset or chosen else self.execution.weights

    def sibling(self, max_len: int) -> HFTarget:
        """Another adapter, with a cache of its own of ``max_len``, over this one's (already prepared) model."""
        return HFTarget(
            self.model,
            max_len,
            None,
            self.weights_choice,
            self.execution.static_shapes,
            self.buckets,
            in_place=True,
            invariant=self.execution.invariant,
        )

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
        self.stream_claim = None

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
        self.stream_claim = None  # whichever stream held the cache no longer does (specdec.calls.claim)
        n = input_ids.shape[0]
        positions = torch.arange(n, device=input_ids.device)
        # the prefill runs eagerly on a static cache too (its length varies), as transformers recommends
        logits, hidden = self.runner.forward(input_ids, positions, 0, keep=1, hidden=self.hidden, may_compile=False)
        self.length = n
        return TargetStep(logits, hidden)

    @torch.no_grad()
    def forward_tree(self, tree: DraftTree) -> TargetStep:
        """One forward over root + tree; logits ``[N, V]`` and hidden states for all nodes.

        Node ``i`` sees the committed prefix and its own ancestors (``tree.attn_mask``), at position
        ``length + depth[i]``.
        """
        n, device = tree.num_nodes, tree.device
        positions = tree.position_ids(self.length)
        allowed = torch.cat([torch.ones(n, self.length, dtype=torch.bool, device=device), tree.attn_mask], dim=1)
        keys = torch.cat([torch.arange(self.length, device=device), positions])
        logits, hidden = self.runner.forward(tree.tokens, positions, self.length, allowed, keys, hidden=self.hidden)
        return TargetStep(logits, hidden)

    @torch.no_grad()
    def decode_one(self, token: torch.Tensor) -> TargetStep:
        """Run and commit one token (vanilla decoding); logits ``[1, V]``."""
        ids = token.reshape(1)
        positions = torch.full((1,), self.length, dtype=torch.long, device=ids.device)
        logits, hidden = self.runner.forward(ids, positions, self.length, hidden=self.hidden)
        self.length += 1
        return TargetStep(logits, hidden)

    def commit(self, accepted: torch.Tensor, count: int) -> None:
        """Keep nodes ``accepted[:count]`` (root first, so ``accepted[0] == 0``) after the committed prefix.

        The root alone (``count == 1``, no draft token accepted) already sits at ``length``: nothing moves, on either
        path. The entries after it are stale tree nodes, which no later forward attends to before overwriting them
        (its mask opens past the prefix only its own nodes' slots, each written in the same forward). ``count`` is
        on the host already, so deciding reads nothing from the device.
        """
        # static: the whole fixed-size path (entries after ``count`` land past the prefix, see PositionCache.compact)
        if count > 1:
            self.cache.compact(self.length, accepted.clamp(min=0) if self.static else accepted[:count])
        self.length += count

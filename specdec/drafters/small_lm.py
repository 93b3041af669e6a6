"""A small causal LM as the drafter (classic two-model speculative decoding, as a tree drafter).

Any Hugging Face causal LM that shares the target's tokenizer works. The drafter runs it through its own
:class:`~specdec.runner.ModelRunner` (the target's runner, with a cache of its own) in two kinds of forward:

* **Catch-up** (first ``expand`` of a tree, ``frontier == [0]``): the pending tokens (the prompt, or the tokens
  committed since the last tree) and the root, causally, in one forward. The pending tokens become committed
  cache entries; the root's entry is tree scratch.
* **Tree step** (later ``expand`` calls): the ``F`` frontier nodes in one forward at positions
  ``committed_len + depth``, written to the next free tree slots after the committed prefix. The 4-D mask lets
  each node see the whole committed prefix plus the slots of its ancestors (and itself), found with
  :meth:`PartialTree.ancestor_mask`.

Tree slots are scratch: the next tree overwrites them. The tokens a cycle commits are ``[root, accepted...]``;
they are recomputed by the next catch-up forward, which starts exactly where the root's scratch entry was, so
nothing is counted twice. Recomputing costs ``accepted + 1`` extra tokens in a forward that runs anyway.

Static steps (``static_shapes=True``, for ``torch.compile(fullgraph=True)`` and CUDA graphs): the runner's
(:class:`~specdec.runner.ModelRunner`: bucketed rows, one padding convention, the first and overlong forwards eager).
Slots, positions and masks are built from host ints the drafter already holds (no device read).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import PreTrainedModel

from specdec.attention import AttentionLayout
from specdec.backends import Invariant, StaticShapes, prepare_model
from specdec.backends.compiled import BUCKETS
from specdec.interfaces import Drafter, TargetHidden, VocabMismatchError
from specdec.runner import ModelRunner
from specdec.tree import PartialTree

if TYPE_CHECKING:
    from specdec.target import HFTarget

__all__ = ["SmallLMDrafter"]


class SmallLMDrafter(Drafter):
    """Drafts with a small causal LM that has its own KV cache.

    Args:
        model: a Hugging Face causal LM (``model(input_ids, attention_mask=4-D, position_ids, cache)``; the cache
            keyword is read from the signature).
        max_len: cache capacity in positions: committed context plus one tree's expanded nodes.
        target_vocab_size: if given, the drafter's output vocabulary must have exactly this size.
        weights: how the model's weights run (:mod:`specdec.backends`; ``"auto"``: packed where that pays on a CPU).
            The drafter runs a copy that shares ``model``'s tensors unless ``in_place``; a drafter cut from the target's
            layers (:meth:`from_target`) shares the target's (already prepared) modules.
        static_shapes: fixed-shape forwards compiled once per bucket (the module docstring's "Static steps").
        in_place: transform ``model`` itself instead of a copy.
        buckets: forward sizes of static shapes (rows are padded to the next one).

    Attributes:
        vocab_size: rows of the model's output embedding (lm_head).
        committed_len: positions of the cache holding committed context.
        cache: the drafter's :class:`PositionCache`.

    Raises:
        VocabMismatchError: the model's vocabulary differs from ``target_vocab_size``.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        max_len: int,
        target_vocab_size: int | None = None,
        weights: str = "auto",
        static_shapes: StaticShapes = False,
        buckets: tuple[int, ...] = BUCKETS,
        in_place: bool = False,
        invariant: Invariant = False,
    ) -> None:
        head = model.get_output_embeddings()
        vocab = getattr(head, "out_features", None) or model.config.get_text_config().vocab_size
        if target_vocab_size is not None and vocab != target_vocab_size:
            raise VocabMismatchError(f"draft model vocabulary {vocab} != target vocabulary {target_vocab_size}")
        if max_len < 2:
            raise ValueError(f"max_len must be at least 2, got {max_len}")
        model, self.execution = prepare_model(model, weights, static_shapes, in_place=in_place, invariant=invariant)
        self.model = model
        self.static = self.execution.static
        self.layout = AttentionLayout.of(model, warn=False)
        self.vocab_size = vocab
        self.max_len = max_len
        execution = self.execution
        self.runner = ModelRunner(
            model, self.layout, max_len, self.static, buckets, execution.cache_dtype, execution.aot
        )
        self.buckets, self.cache = self.runner.buckets, self.runner.cache
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.reset()

    @classmethod
    def from_target_layers(
        cls,
        target_model: PreTrainedModel,
        num_layers: int,
        max_len: int,
        weights: str = "auto",
        static_shapes: StaticShapes = False,
        buckets: tuple[int, ...] = BUCKETS,
        in_place: bool = False,
        invariant: Invariant = False,
    ) -> SmallLMDrafter:
        """A drafter made of the target's first ``num_layers`` decoder layers, final norm and lm_head.

        The new model has the target's class and config with ``num_hidden_layers = num_layers``; its modules are
        the target's own (shared, not copied), so it costs no extra memory. Works for HF decoder-only models laid
        out like Llama (``model.{embed_tokens, layers, norm, rotary_emb}`` + ``lm_head``). ``in_place``: apply the
        backend to those shared modules themselves (:meth:`from_target`, whose modules are the target's prepared
        copy); default: the drafter runs a copy, and ``target_model`` is left as it was. ``invariant``: the
        row-invariant numerics of :func:`specdec.backends.apply` (a draft gains nothing from them, but modules
        shared with a target must keep the target's setting).
        """
        config = copy.deepcopy(target_model.config)
        total = config.num_hidden_layers
        if not 1 <= num_layers <= total:
            raise ValueError(f"num_layers must be in [1, {total}], got {num_layers}")
        config.num_hidden_layers = num_layers
        if getattr(config, "layer_types", None) is not None:
            config.layer_types = list(config.layer_types[:num_layers])
        with torch.device("meta"):
            small = type(target_model)(config)
        prefix = target_model.base_model_prefix
        body, small_body = getattr(target_model, prefix), getattr(small, prefix)
        for name, child in body.named_children():
            setattr(small_body, name, nn.ModuleList(list(child)[:num_layers]) if name == "layers" else child)
        for name, child in target_model.named_children():
            if name != prefix:
                setattr(small, name, child)
        left = [n for n, t in [*small.named_parameters(), *small.named_buffers()] if t.is_meta]
        if left:
            raise ValueError(f"{type(target_model).__name__} has a layout this constructor does not know: {left}")
        head = target_model.get_output_embeddings()
        vocab = None if head is None else getattr(head, "out_features", None)
        return cls(
            small.eval(), max_len, vocab, weights, static_shapes, buckets, in_place=in_place, invariant=invariant
        )

    @classmethod
    def from_target(cls, target: HFTarget, num_layers: int | None = None) -> SmallLMDrafter:
        """A drafter made of ``target``'s first ``num_layers`` decoder layers (default: a fifth of them, at least one;
        6 of SmolLM2's 30), on the target's device, dtype, cache size and backend (:meth:`from_target_layers`)."""
        layers = num_layers or max(1, target.num_layers // 5)
        return cls.from_target_layers(
            target.model,
            layers,
            target.max_len,
            target.weights_choice,
            "auto" if target.execution.aot else target.static,  # its own package where this machine has one
            target.buckets,
            in_place=True,
            invariant=target.execution.invariant,  # the modules are the target's own
        )

    def fork(self) -> SmallLMDrafter:
        """The same model (shared) with a cache of its own for another sequence."""
        twin = copy.copy(self)
        twin.runner = ModelRunner(
            self.model,
            self.layout,
            self.max_len,
            self.static,
            self.buckets,
            self.execution.cache_dtype,
            self.execution.aot,
        )
        twin.cache = twin.runner.cache
        twin.reset()
        return twin

    def reset(self) -> None:
        """Forget all context; the cache buffers are kept and overwritten."""
        self.committed_len = 0
        self.pending = torch.zeros(0, dtype=torch.long, device=self.device)
        self._tree: PartialTree | None = None
        self._slot_nodes = torch.zeros(0, dtype=torch.long, device=self.device)

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        """Start a generation with prompt ``input_ids [L]``; it runs with the first tree's root."""
        self.reset()
        self.pending = input_ids.reshape(-1).to(self.device, torch.long)

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        """Queue ``tokens [k]`` (root + accepted); they run with the next tree's root."""
        self.pending = torch.cat([self.pending, tokens.reshape(-1).to(self.device, torch.long)])
        self._tree = None

    def _forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor, keys: torch.Tensor, keep: int
    ) -> torch.Tensor:
        """Run ``tokens [n]`` (at sequence ``positions [n]``) written at slot ``allowed.shape[1] - n``; ``keys [kv]``
        are the sequence positions of the slots. Returns float32 logits of the last ``keep`` (0: all ``n``)."""
        start = allowed.shape[1] - tokens.shape[0]
        return self.runner.forward(tokens, positions, start, allowed, keys, keep)[0]

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """Draft logits for the children of ``frontier [F]``; returns ``[F, V]`` float32.

        The first call of a tree must be ``frontier == [0]``; later frontiers' ancestors must all have been
        expanded earlier in the same tree (the :class:`~specdec.interfaces.Drafter` contract).
        """
        if tree is not self._tree:
            if frontier.shape[0] != 1:
                raise ValueError("the first expand of a tree must be the root alone (frontier == [0])")
            return self._catch_up(tree)
        base, f = self.committed_len, frontier.shape[0]
        self._slot_nodes = torch.cat([self._slot_nodes, frontier.to(self.device)])
        tree_mask = tree.ancestor_mask(frontier)[:, self._slot_nodes]  # [F, slots]: ancestors-or-self
        prefix = torch.ones(f, base, dtype=torch.bool, device=tree_mask.device)
        allowed = torch.cat([prefix, tree_mask], dim=1)  # [F, base + slots]; the new slots are the last F
        keys = torch.cat([torch.arange(base, device=self.device), base + tree.depth[self._slot_nodes]])
        return self._forward(tree.tokens[frontier], base + tree.depth[frontier], allowed, keys, keep=0)

    def _catch_up(self, tree: PartialTree) -> torch.Tensor:
        """Run the pending tokens and the root causally; commit the pending ones; return the root's ``[1, V]``."""
        tokens = torch.cat([self.pending, tree.tokens[:1].to(self.device)])
        n, start = tokens.shape[0], self.committed_len
        positions = torch.arange(start, start + n, device=self.device)
        causal = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
        allowed = torch.cat([torch.ones(n, start, dtype=torch.bool, device=self.device), causal], dim=1)
        logits = self._forward(tokens, positions, allowed, torch.arange(start + n, device=self.device), keep=1)
        self.committed_len = start + n - 1
        self.pending = self.pending[:0]
        self._tree = tree
        self._slot_nodes = torch.zeros(1, dtype=torch.long, device=self.device)  # slot 0 = the root
        return logits

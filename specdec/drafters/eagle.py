"""The EAGLE drafters' base: a feature-level draft head on top of the target's features, its cache and tree
steps (the EAGLE-1 / EAGLE-2 / HASS drafter: :mod:`specdec.drafters.eagle1`; EAGLE-3's: :mod:`specdec.drafters.eagle3`).

Alignment (all EAGLE versions): the draft at position ``t`` receives (feature of token ``t``, token ``t+1``) and
predicts token ``t+2``. With ``c`` tokens in the target's cache and the tree root (the token the target emitted
last, not yet in its cache) at target position ``c``:

* committed pairs ``(f_t, x_{t+1})`` for ``t < c-1`` use the **target's** features and sit at positions ``t``;
* the root pair ``(f_{c-1}, root)`` sits at position ``c-1`` (its output scores the root's children);
* a tree node ``n`` at depth ``k`` feeds (its parent's predicted feature, ``token_n``) at position ``c-1+k`` and
  attends to every committed pair, the root pair and its own ancestors.

Positions follow the reference implementation (pair index = position), which is also what training uses
(``arange`` over pairs), so a head trained here or there sees the same relative positions.

State kept between calls (gpt-fast style, preallocated, indexed by position, rollback = overwrite):

* ``tokens [max_len]`` and ``features [max_len, Hf]``: committed tokens and the target features at them;
* draft keys/values ``[1, h_kv, max_len + tree_capacity, d]``: committed pairs at index = position, the root pair
  at ``c-1`` and tree node ``n >= 1`` at ``c-1+n`` (scratch, overwritten by the next tree);
* ``node_out [tree_capacity, H]``: each expanded node's output, the input feature of its children.

Committed pairs are not run at :meth:`commit`; they run lazily in the next tree's first :meth:`expand`, batched
with the root pair in one forward (the root step; a batch runs its rows' root steps in one forward before they grow
their trees, :meth:`EagleDrafterBase.expand_roots`).

Static steps (``static_shapes=True``, for ``torch.compile(fullgraph=True)`` and CUDA graphs): the head keeps plain
linears and its forward, with the scorer that turns its outputs into draft logits (the draft lm_head), is compiled as
one graph (:class:`~specdec.drafters.eagle_steps.ScoredStep`, :func:`specdec.backends.compiled.compile_forward`);
every step it runs has a fixed shape, so it compiles once per shape and never per cycle:

* the root step's ``n`` rows (pending pairs + root pair, at most the last tree's depth + 1) are padded to
  ``bucket(n)``; padding rows write scratch slots after the tree's and see only themselves. A first step longer
  than the largest bucket (the prompt's pairs) runs the same forward eagerly, like a prefill;
* a node step attends over the whole key/value buffer (``[F, capacity]`` mask: the prefix, then the ancestors'
  slots); ``F`` is the policy's frontier width at that level, fixed per level;
* positions, slots and masks are built outside the graph, from host ints the loop already holds (no device read);
* where graphs replay weights in place (CUDA), the key/value buffers the steps write are marked as static addresses
  (CUDA graph trees capture a step only if every tensor it writes is one: the head of the first GPU run wrote
  unmarked buffers and ran without graphs, ``docs/results/2026-11-27-gpu-h200``); where graphs freeze (a CPU) they
  stay unmarked, since a marked tensor becomes an unguarded graph constant there (:mod:`specdec.backends.compiled`);
* the root step scores the root pair's row only (the others feed the cache); a node step scores all ``F`` rows.

On a static-shape target the head gets compiled steps where graphs replay weights in place (CUDA) or when asked for
(``weights="stock"``); on a CPU under ``"auto"`` it runs eagerly on int8 weights
(:func:`~specdec.drafters.eagle_steps.draft_backend` says why).
"""

from __future__ import annotations

import copy
import itertools
from abc import abstractmethod
from collections.abc import Sequence

import torch
from torch import nn

from specdec.attention import additive_mask
from specdec.backends import Execution, StaticShapes, packed_copy, resolve
from specdec.backends.compiled import BUCKETS, bucket, compile_forward, freezes, run_compiled
from specdec.backends.draft_int8 import draft_int8_linear
from specdec.drafters.eagle_steps import ScoredStep
from specdec.eagle.checks import check_head_device, check_head_target
from specdec.eagle.fusion import fuse_for_inference
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.eagle.layers import KVSlots
from specdec.interfaces import Drafter, TargetHidden, top_children
from specdec.tree import PartialTree

__all__ = ["EagleDrafterBase"]


def _target_config(target: nn.Module):
    config = target.config
    return getattr(config, "text_config", None) or config


class EagleDrafterBase(Drafter):
    """Cache management and tree expansion shared by the EAGLE-1 and EAGLE-3 drafters.

    Subclasses define :meth:`_features` (target hidden -> stored per-token feature), :meth:`_input_hidden`
    (stored features -> head input for committed pairs) and :meth:`_scorer` (head output -> ``[F, V_d]`` logits over
    the tokens they can propose); drafters with a smaller vocabulary also define :meth:`_to_target_ids` and
    :meth:`_to_target_logits` (``[F, V_d]`` -> ``[F, V]``).
    """

    head: Eagle1Head | Eagle3Head

    def __init__(
        self,
        head: Eagle1Head | Eagle3Head,
        target: nn.Module,
        max_len: int,
        feature_size: int,
        weights: str = "auto",
        static_shapes: StaticShapes = False,
    ) -> None:
        if max_len <= 0:
            raise ValueError(f"max_len must be positive, got {max_len}")
        check_head_target(head, target)
        check_head_device(head, target)
        if head.embed_tokens is None:
            head.attach_target_embedding(target.get_input_embeddings().weight)
        tcfg = _target_config(target)
        # The fast path runs a packed (fp32 or int8) copy that shares every other tensor: the caller's head (perhaps
        # still training) is left as it is; the copy is a snapshot of its weights. Static shapes run the head's plain
        # linears in fixed-shape steps compiled once per shape (the module docstring's "Static steps").
        kind, self.static, reason = resolve(head, weights, static_shapes, draft=True)
        self.execution = Execution(kind, self.static, reason=reason)
        plain = kind == "stock"
        int8 = kind == "int8"  # the copy fuses q/k/v, gate/up and the norms (same values, fewer ops)
        self.head = (
            head if plain else packed_copy(head, int8=int8, transform=fuse_for_inference, int8_linear=draft_int8_linear)
        )
        self._score = self._scorer()
        self._scored = ScoredStep(self.head, self._score)
        self._head_step = compile_forward(self._scored) if self.static else None
        self.vocab_size = tcfg.vocab_size
        self.max_len = max_len
        p = head.fc.weight
        self._device, self._dtype = p.device, p.dtype
        self._owns_head = not plain  # a private copy: its RoPE may keep a lookup table
        attn = self.head.layers[0].self_attn if isinstance(head, Eagle1Head) else self.head.midlayer.self_attn
        self._attention = attn
        self._kv_shape = (1, attn.num_kv_heads, attn.head_dim)
        self._tokens = torch.zeros(max_len, dtype=torch.long, device=self._device)
        self._features_buf = torch.zeros(max_len, feature_size, dtype=self._dtype, device=self._device)
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self._node_out: torch.Tensor | None = None
        self._tree_capacity = 0
        self._draft_ids: torch.Tensor | None = None  # target id of each draft-vocabulary column (expand_draft)
        self._identity = False  # the draft vocabulary is the target's, in order
        self.reset()

    # ----------------------------------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _features(self, hidden: TargetHidden) -> torch.Tensor:
        """``[n, Hf]`` per-token features to store from the target hidden states."""

    def _input_hidden(self, features: torch.Tensor) -> torch.Tensor:
        """Stored features ``[P, Hf]`` -> head ``hidden``/``features`` input ``[P, H]``."""
        return features

    @abstractmethod
    def _scorer(self) -> nn.Module:
        """The module that maps head outputs ``[F, H]`` to logits ``[F, V_d]`` over the tokens this drafter can
        propose (``V_d = V`` where it drafts over the whole vocabulary). On the static path it runs inside each
        compiled step (:class:`ScoredStep`)."""

    def _to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Indices into the ``V_d`` axis of :meth:`_scorer`'s logits (any shape) -> target token ids (default: same)."""
        return draft_ids

    def _to_target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """``[F, V_d]`` -> ``[F, V]`` float32 logits over the target vocabulary, ``-inf`` off ``V_d`` (default: the
        draft vocabulary is the target's)."""
        return draft_logits

    def _draft_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Head outputs ``[F, H]`` -> ``[F, V_d]`` float32 logits (:meth:`_scorer`, run eagerly)."""
        return self._score(out).float()

    # ------------------------------------------------------------------------------------------- Drafter API
    def reset(self) -> None:
        self._length = 0  # tokens in the target's cache (c)
        self._pairs_done = 0  # committed pairs whose keys/values are in the buffer (positions [0, _pairs_done))
        self._root_ready = False  # the current tree's root pair sits at position c-1
        self._tree: PartialTree | None = None
        self._primed: torch.Tensor | None = None  # [1, V_d]: the next tree's root logits, run by expand_roots

    def fork(self) -> EagleDrafterBase:
        """The same head (shared, not copied) with buffers of its own for another sequence."""
        twin = copy.copy(self)
        twin._tokens = torch.zeros_like(self._tokens)
        twin._features_buf = torch.zeros_like(self._features_buf)
        twin._k = twin._v = twin._node_out = None
        twin._tree_capacity = 0
        twin.reset()
        return twin

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        """Take the prompt ``[L]`` and the target hidden states at it; nothing runs until the first expand."""
        self.reset()
        self._append(input_ids, hidden)

    @torch.no_grad()
    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        """Record ``[k]`` tokens (root first) now in the target's cache and the target hidden states at them.

        Contract: ``tokens[0]`` is the root of the tree last expanded (if any was), so its root pair — already run
        with the target feature of the previous token — becomes a committed pair without recomputation.
        """
        if tokens.shape[0] == 0:
            raise ValueError("commit() needs at least the root token")
        c = self._length
        self._append(tokens, hidden)
        if self._root_ready:
            self._pairs_done = c  # the root pair at position c-1 was run with the target feature f_{c-1}
        self._root_ready = False
        self._tree = None
        self._primed = None

    @torch.no_grad()
    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """``[F, V]`` float32 draft logits for the children of ``frontier`` nodes (see the module docstring)."""
        return self._to_target_logits(self._run(tree, frontier))

    @torch.no_grad()
    def expand_topk(self, tree: PartialTree, frontier: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`Drafter.expand_topk` over the draft vocabulary ``V_d`` only (top-k and normaliser over ``V_d``).

        Contract: q is exactly 0 off ``V_d`` (:meth:`_to_target_logits` puts ``-inf`` there), so the top-k's
        ``log q`` and tokens equal those of the ``[F, V]`` row; the work drops from ``V`` to ``V_d`` columns (49k ->
        16k for the shipped EAGLE-3 head) and the ``[F, V]`` scatter is skipped.
        """
        logq, idx = top_children(self._run(tree, frontier), k)
        return logq, self._to_target_ids(idx)

    @torch.no_grad()
    def expand_draft(self, tree: PartialTree, frontier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`Drafter.expand_draft`: the ``[F, V_d]`` logits before the scatter to ``V``, and their target ids."""
        logits = self._run(tree, frontier)
        if self._draft_ids is None or self._draft_ids.shape[0] != logits.shape[-1]:
            columns = torch.arange(logits.shape[-1], device=logits.device)
            ids = self._to_target_ids(columns)
            self._identity = logits.shape[-1] == self.vocab_size and bool(torch.equal(ids, columns))
            self._draft_ids = ids
        return logits, None if self._identity else self._draft_ids

    def _run(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """Draft logits ``[F, V_d]`` (float32) for the children of ``frontier`` (the state change of one expand
        step)."""
        if self._length == 0:
            raise RuntimeError("expand() before prefill()")
        self._ensure_tree_capacity(tree.capacity)
        if tree is not self._tree or tree.size == 1:  # a new tree (also a fresh one reusing an old object)
            if frontier.shape[0] != 1:
                raise ValueError("the first expand of a tree must have frontier == [0] (the root)")
            self._tree = tree
            if self._primed is None:  # not run with other rows' roots (expand_roots): alone
                self._root_step([self], [tree.tokens[:1]])
            logits, self._primed = self._primed, None
            return logits
        return self._expand_nodes(tree, frontier)

    @classmethod
    @torch.no_grad()
    def expand_roots(cls, drafters: Sequence[Drafter], roots: Sequence[torch.Tensor]) -> None:
        """:meth:`Drafter.expand_roots`: the root steps of drafters that share one head, one head forward per head.

        Each drafter's pending pairs and root pair (:meth:`_root_rows`) go into one forward: every projection
        and the draft lm_head run once over all rows, each drafter's rows attend within its own key/value buffer
        (:meth:`EagleAttention.forward <specdec.eagle.layers.EagleAttention.forward>` with several caches). A drafter
        that cannot join runs its root step alone at its first expand: static steps (compiled per shape), one without
        a prompt or with its root step run already, a head with dynamic-NTK RoPE (its base follows the largest
        position in a call: one row's length would rotate another's keys). Drafters are grouped by head and scorer
        (the forks of one drafter share both). A first root step runs the prompt's pairs (a batch's rows joining
        together take their prompts in one forward).

        Contract: ``roots[i]`` (``[1]``) is the root of drafter ``i``'s next tree. A row's draft logits depend only
        on its own pairs up to the linears' rounding (a linear on fbgemm's int8 kernel, where the draft's measured
        choice or the rule puts it, quantizes each forward's inputs with one scale: a row's q may move with its
        neighbours' rows, and verification reads the q it was drafted from either way).
        """
        groups: dict[tuple[int, int], list[tuple[EagleDrafterBase, torch.Tensor]]] = {}
        for d, root in zip(drafters, roots, strict=True):
            if not isinstance(d, EagleDrafterBase) or d.static or not d._length or d._primed is not None:
                continue
            if d._attention.rotary.kind == "dynamic":
                continue
            d._ensure_tree_capacity(1)  # a first tree larger than the root grows the buffers, keeping it
            groups.setdefault((id(d.head), id(d._score)), []).append((d, root))
        for group in groups.values():
            cls._root_step([d for d, _ in group], [r for _, r in group])

    # --------------------------------------------------------------------------------------------- internals
    def _append(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        k = tokens.shape[0]
        start = self._length
        if start + k > self.max_len:
            raise ValueError(f"drafter holds at most max_len={self.max_len} tokens, got {start + k}")
        feats = self._features(hidden)
        if feats.shape[0] != k:
            raise ValueError(f"{k} tokens but target hidden states for {feats.shape[0]} positions")
        self._tokens[start : start + k] = tokens.to(self._device)
        self._features_buf[start : start + k] = feats.to(device=self._device, dtype=self._dtype)
        self._length = start + k

    def _ensure_tree_capacity(self, capacity: int) -> None:
        if capacity <= self._tree_capacity:
            return
        b, h, d = self._kv_shape
        # static: scratch slots after the tree's for the padding rows of a bucketed root step
        size = self.max_len + capacity + max(BUCKETS) * self.static
        k = torch.zeros(b, h, size, d, dtype=self._dtype, device=self._device)
        v = torch.zeros_like(k)
        if self._k is not None:  # keep the committed pairs' keys/values, and a root pair already run
            n = self._pairs_done + self._root_ready
            k[:, :, :n], v[:, :, :n] = self._k[:, :, :n], self._v[:, :, :n]
        if self.static and not freezes(k.device):  # CUDA graphs write into them in place: static addresses
            torch._dynamo.mark_static_address(k)
            torch._dynamo.mark_static_address(v)
        self._k, self._v = k, v
        node_out = torch.zeros(capacity, self.head.config.hidden_size, dtype=self._dtype, device=self._device)
        if self._node_out is not None:  # the root's output, where expand_roots ran it
            node_out[: self._node_out.shape[0]] = self._node_out
        self._node_out = node_out
        self._tree_capacity = capacity
        if self._owns_head:  # RoPE looked up for every position the buffer holds
            self._attention.rotary.cache(size, self._device, self._dtype)

    def _root_rows(self, root: torch.Tensor) -> tuple:
        """This drafter's root step: every pending committed pair plus the root pair (``root [1]``), as ``(tokens
        [T], features [n, Hf], positions [T], mask [T, span], cache, compiled, n)``: ``n`` real rows, then ``T - n``
        padding rows where compiled (their head inputs zero).

        Static steps pad the ``n`` rows to ``bucket(n)``: padding rows sit in scratch slots after the tree's and see
        only themselves; a first step longer than the largest bucket (the prompt) runs eagerly, like a prefill.
        """
        c, start = self._length, self._pairs_done
        n = c - start  # pending pairs + the root pair
        tokens = torch.cat((self._tokens[start + 1 : c], root.reshape(1).to(self._device)))
        features = self._features_buf[start:c]
        compiled = self.static and n <= max(BUCKETS)
        rows = bucket(n) if compiled else n
        positions = torch.arange(start, start + rows, device=self._device)
        slots, span = positions, c
        if compiled:  # pad to the bucket; attend over the whole buffer
            span = self._k.shape[2]
            pad = rows - n
            scratch = torch.arange(span - max(BUCKETS), span - max(BUCKETS) + rows, device=self._device)
            slots = torch.where(positions < c, positions, scratch)
            tokens = torch.cat((tokens, tokens.new_zeros(pad)))
        cols = torch.arange(span, device=self._device)[None, :]
        mask = cols <= positions[:, None]  # causal over the committed pairs
        if compiled:  # padding rows see only their own scratch slot
            mask = mask & (positions[:, None] < c) | (cols == slots[:, None])
        return tokens, features, positions, mask, KVSlots(self._k, self._v, slots, span), compiled, n

    @staticmethod
    def _root_step(drafters: Sequence[EagleDrafterBase], roots: Sequence[torch.Tensor]) -> None:
        """Run the drafters' root steps (:meth:`_root_rows`) in one head forward (one drafter: its own step, compiled
        where static); each keeps its root pair's draft logits ``[1, V_d]`` for its next tree's first expand."""
        parts = [d._root_rows(r) for d, r in zip(drafters, roots, strict=True)]
        lead = drafters[0]
        tokens, features, positions, masks, caches, compiled, counts = zip(*parts, strict=True)
        one = len(parts) == 1
        joined = (lambda xs: xs[0]) if one else torch.cat  # one drafter (the one-sequence loop): no copies
        # each drafter's root pair's row, the only one scored (filled on the device from host ints: no copy, no sync)
        starts = itertools.accumulate((len(t) for t in tokens[:-1]), initial=0)
        at = [a + n - 1 for a, n in zip(starts, counts, strict=True)]
        roots_at = joined([torch.full((1,), i, device=lead._device) for i in at])
        hidden = lead._input_hidden(joined(features))
        if one and compiled[0]:  # a compiled step's padding rows: zero inputs
            hidden = torch.cat((hidden, hidden.new_zeros(len(tokens[0]) - len(hidden), hidden.shape[1])))
        out, logits = lead._step(
            one and compiled[0],
            joined(tokens),
            hidden,
            joined(positions),
            masks[0] if one else masks,
            caches[0] if one else caches,
            roots_at,
        )
        for i, d in enumerate(drafters):
            d._pairs_done = d._length - 1
            d._root_ready = True
            d._node_out[0] = out[i]
            d._primed = logits[i : i + 1]

    def _expand_nodes(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """One forward over the ``F`` frontier nodes (inputs: parent's output, own token; mask: prefix + ancestors);
        returns their draft logits ``[F, V_d]``.

        Node ``n`` lives in slot ``base + n`` (``base`` = the root pair's position); its row attends to the committed
        prefix and to the slots of its ancestors and itself (its own keys are written before attending).
        """
        idx = frontier.to(self._device)
        f = idx.shape[0]
        base, size = self._length - 1, tree.size
        hidden = self._node_out[tree.parents[frontier].to(self._device)]
        tokens = tree.tokens[frontier].to(self._device)
        positions = (base + tree.depth[frontier]).to(self._device)
        if self.static:  # columns: the whole buffer (prefix, then the tree's slots at their node ids)
            span = self._k.shape[2]
            rel = torch.arange(span, device=self._device) - base
            anc = tree.ancestors[frontier].to(self._device)[:, rel.clamp(0, tree.capacity - 1)]  # [F, span]
            mask = (rel < 0)[None] | anc & (rel < tree.capacity)[None]
        else:
            span = base + size
            anc = tree.ancestor_mask(frontier).to(self._device)  # [F, size]: ancestors-or-self
            mask = torch.cat((torch.ones(f, base, dtype=torch.bool, device=self._device), anc), dim=1)
        cache = KVSlots(self._k, self._v, base + idx, span)
        out, logits = self._step(self.static, tokens, hidden, positions, mask, cache, None)
        self._node_out[idx] = out
        return logits

    def _step(
        self,
        compiled: bool,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | Sequence[torch.Tensor],
        cache: KVSlots | Sequence[KVSlots],
        rows: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One head forward over ``T`` rows (``tokens [T]``, ``hidden [T, H]``, ``positions [T]``, ``mask [T, span]``
        bool) -> ``(out [R, H], draft logits [R, V_d] float32)`` at ``rows [R]`` (None: all ``T``).

        ``compiled``: the head and its scorer as one compiled graph (:class:`ScoredStep`); on CUDA its outputs are
        copied, since the next CUDA-graph replay overwrites the graph's own (a stochastic tree keeps the logits)."""
        bias = (
            additive_mask(mask, self._dtype)
            if isinstance(mask, torch.Tensor)
            else [additive_mask(m, self._dtype) for m in mask]
        )
        args = (self.head.embed(tokens)[None], hidden[None], positions[None], bias)
        if compiled:
            names = ("input_embeds", "hidden", "position_ids", "attn_bias")
            inputs = dict(zip(names, args, strict=True), rows=rows, cache=cache)
            # where torch.compile cannot serve the step (an error, dynamo's recompile limit), one warning and the same
            # step eagerly from then on, as the target's forward does (nothing was written before a compile fails)
            (out, logits), fell_back = run_compiled(self._head_step, self._scored, lambda: None, inputs)
            if fell_back:
                self._head_step = self._scored
            if out.device.type == "cuda":
                out, logits = out.clone(), logits.clone()
            return out, logits
        out, _ = self.head(*args, cache=cache)
        out = out[0] if rows is None else out[0, rows]
        return out, self._draft_logits(out)

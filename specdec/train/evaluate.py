"""Held-out evaluation of a draft head from cached target features.

Greedy-chain acceptance (offline, exact where it is defined):
    From every slot ``t`` whose token ``t+1`` is an assistant token (the root), draft greedily along a chain with the
    training-time-test unroll (:func:`specdec.train.recipes.unroll_chain`): draft step ``k`` proposes
    ``argmax q`` (mapped to target ids for EAGLE-3) and is accepted iff it equals the target argmax after token
    ``t+1+k``, ``argmax lm_head(final_{t+1+k})``. Step ``k ≥ 1`` is *tried* only when steps ``0…k−1`` were accepted
    **and** the data token ``t+1+k`` equals the accepted draft token (i.e. the target's argmax), so the cached
    target features are exactly those greedy decoding would see; it also needs token ``t+1+k`` to exist and be an
    assistant token. Then ``α_k = accepted_k / tried_k`` is the depth-``k+1`` acceptance rate (paper's
    ``(k)-α``), and ``chain_tau = 1 + Σ_d Π_{k≤d} α_k`` the expected tokens per cycle of greedy chain decoding.
    On self-distilled greedy data every accepted chain is continued; on fixed ShareGPT data fewer are.

τ with the dynamic tree needs the real decoding loop: pass ``tau_fn`` to :func:`evaluate_heldout` (a callable
``(head, heldout_store) -> float``); the trainer records its value when given one, by default
:func:`specdec.train.tau.make_tau_fn` (EAGLE-2 dynamic-tree greedy generation on held-out prompts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.train.features import collate
from specdec.train.recipes import draft_logits, shift_left, unroll_chain

__all__ = ["ChainAcceptance", "chain_acceptance", "evaluate_heldout"]


@dataclass
class ChainAcceptance:
    """Per-depth greedy-chain acceptance.

    Attributes:
        tried: ``[depth]`` chains that reached depth ``k+1`` with a valid context.
        accepted: ``[depth]`` of those, the draft token equalled the target argmax.
        alpha: ``[depth]`` ``accepted / tried`` (0 when nothing was tried).
        chain_tau: ``1 + Σ_d Π_{k≤d} alpha_k``.
        tau: dynamic-tree τ from a ``tau_fn`` hook, or None.
    """

    tried: list[int]
    accepted: list[int]
    alpha: list[float] = field(default_factory=list)
    chain_tau: float = 1.0
    tau: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@torch.no_grad()
def _target_argmax(final: torch.Tensor, lm_head_weight: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """``[B, T, H]`` → ``[B, T]`` target argmax token ids, in row chunks to bound the ``[*, V]`` logits."""
    flat = final.reshape(-1, final.shape[-1])
    out = torch.cat([F.linear(flat[i : i + chunk], lm_head_weight).argmax(-1) for i in range(0, flat.shape[0], chunk)])
    return out.view(final.shape[:-1])


@torch.no_grad()
def chain_acceptance(
    head: Eagle1Head | Eagle3Head,
    store: Sequence[dict[str, torch.Tensor]],
    lm_head_weight: torch.Tensor,
    depth: int = 5,
    batch_size: int = 1,
    max_sequences: int | None = None,
) -> ChainAcceptance:
    """Greedy-chain acceptance of ``head`` over a :class:`~specdec.train.features.FeatureStore` (module doc).

    Args:
        head: EAGLE-1 (needs ``final`` features) or EAGLE-3 (needs ``fused`` and ``final``) head, embedding attached.
        store: feature items (``store[i]`` dicts).
        lm_head_weight: ``[V, H]`` target lm_head (target argmax; EAGLE-1 draft logits).
        depth: chain length (draft steps).
    """
    was_training = head.training
    head.eval()
    device = head.fc.weight.device
    lm_head_weight = lm_head_weight.to(device)
    tried = torch.zeros(depth, dtype=torch.long)
    accepted = torch.zeros(depth, dtype=torch.long)
    n = len(store) if max_sequences is None else min(len(store), max_sequences)
    for start in range(0, n, batch_size):
        batch = collate([store[i] for i in range(start, min(start + batch_size, n))])
        batch = {k: v.to(device) for k, v in batch.items()}
        ids, mask = batch["input_ids"], batch["loss_mask"]
        t_len = ids.shape[1] - 1
        target_next = _target_argmax(batch["final"], lm_head_weight)  # [B, T]: target's token after position i
        state: dict[str, torch.Tensor] = {"alive": mask[:, 1:].clone()}  # roots: token t+1 is an assistant token

        def on_step(k: int, out: torch.Tensor, state=state, ids=ids, mask=mask, t_len=t_len, nxt=target_next) -> None:
            logits = draft_logits(head, out, lm_head_weight)
            proposal = logits.argmax(-1)
            if isinstance(head, Eagle3Head):
                proposal = head.to_target_ids(proposal)
            alive = state["alive"]
            if k > 0:
                token_in = shift_left(ids, 1 + k, t_len, fill=-1)  # token fed at step k
                prev_target = shift_left(nxt, k, t_len, fill=-2)  # what the target emitted after token t+k
                alive = alive & (token_in == prev_target) & shift_left(mask, 1 + k, t_len, fill=False)
            ok = alive & (proposal == shift_left(nxt, 1 + k, t_len, fill=-3))
            tried[k] += int(alive.sum())
            accepted[k] += int(ok.sum())
            state["alive"] = ok

        unroll_chain(head, batch, depth, on_step)
    head.train(was_training)
    alpha = [a / t if t else 0.0 for a, t in zip(accepted.tolist(), tried.tolist(), strict=True)]
    tau, prod = 1.0, 1.0
    for a in alpha:
        prod *= a
        tau += prod
    return ChainAcceptance(tried.tolist(), accepted.tolist(), alpha, tau)


def evaluate_heldout(
    head: Eagle1Head | Eagle3Head,
    store: Sequence[dict[str, torch.Tensor]],
    lm_head_weight: torch.Tensor,
    depth: int = 5,
    max_sequences: int | None = None,
    tau_fn: Callable[[Eagle1Head | Eagle3Head, Any], float] | None = None,
) -> ChainAcceptance:
    """:func:`chain_acceptance` plus, when ``tau_fn`` is given, the dynamic-tree τ it measures."""
    result = chain_acceptance(head, store, lm_head_weight, depth=depth, max_sequences=max_sequences)
    if tau_fn is not None:
        result.tau = float(tau_fn(head, store))
    return result

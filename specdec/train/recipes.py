"""One training step's loss for each recipe: EAGLE-1, HASS and EAGLE-3 (training-time test).

Alignment (every recipe): a sequence of ``T`` tokens gives ``T' = T − 1`` draft slots; slot ``t`` holds
``(feature of token t, token t+1)`` at RoPE position ``t`` and predicts the target's distribution after token
``t+1``, ``p_t = softmax(lm_head(final_{t+1}))``. Slot ``t`` is trained iff token ``t+1`` is an assistant token
(``loss_mask[t+1]``): drafting happens after a token the assistant produced.

Batches are dicts from :func:`specdec.train.features.collate`: ``input_ids [B, T]``, ``loss_mask [B, T]``,
``final [B, T, H]`` (post-norm target features) and, for EAGLE-3, ``fused [B, T, kH]``. The target's frozen
``lm_head`` weight ``[V, H]`` is passed in; target probabilities are recomputed from ``final`` under no_grad and only
at trained positions.

- EAGLE-1: ``SmoothL1(pred, final_{t+1}) + 0.1 · CE(p_t, q_t)``, ``q_t = softmax(lm_head(pred_t))``, with uniform
  noise ``U(−a, a)`` added to the input features.
- HASS: EAGLE-1 + ``1.0 · Top-K(p_t, q_t)`` (K = 10), over ``n = 3`` context-alignment passes: pass ``j``'s input
  feature at position ``t`` is pass ``j−1``'s prediction at ``t − 1`` (detached; position 0 keeps the target
  feature), keys/values are those of every earlier pass (kept in the graph, as if recomputed), bias
  :func:`~specdec.train.masks.hass_attention_bias`. Total ``Σ_j β^j loss_j`` (β = 1).
- EAGLE-3: ``steps`` training-time-test steps (3 by default; the paper's 7 lost here, see
  :class:`~specdec.train.config.TTTConfig`); step ``k`` at slot ``t`` feeds token ``t+1+k`` with the step ``k−1``
  pre-norm output (step 0: ``fc(fused_t)``), RoPE position ``t + k``, bias
  :func:`~specdec.train.masks.ttt_attention_bias`,
  and is scored against ``p_{t+k}`` restricted to the draft vocab (softmax over the draft-vocab target logits),
  skipped where the target argmax is outside the draft vocab. Total ``Σ_k 0.8^k loss_k``; no feature loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.train.losses import feature_regression_loss, soft_cross_entropy, top1_agreement, topk_distillation_loss
from specdec.train.masks import as_batch_bias, causal_attention_bias, hass_attention_bias, ttt_attention_bias

__all__ = [
    "eagle1_loss",
    "hass_loss",
    "hass_passes",
    "eagle3_loss",
    "shift_left",
    "unroll_chain",
    "first_hidden",
    "draft_logits",
    "target_logits",
    "RECIPES",
]

Metrics = dict[str, torch.Tensor]


def shift_left(x: torch.Tensor, k: int, length: int, fill: float | int = 0) -> torch.Tensor:
    """``x[:, k : k + length]`` padded with ``fill`` on the right to ``length`` rows (dim 1)."""
    out = x[:, k : k + length]
    missing = length - out.shape[1]
    if missing > 0:
        pad_shape = (x.shape[0], missing, *x.shape[2:])
        out = torch.cat((out, x.new_full(pad_shape, fill)), dim=1)
    return out


def _positions(batch_size: int, length: int, offset: int, device: torch.device) -> torch.Tensor:
    return (torch.arange(length, device=device) + offset)[None].expand(batch_size, length)


def first_hidden(head: Eagle1Head | Eagle3Head, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Step-0 hidden input ``[B, T', H]``: target features (EAGLE-1) or ``fc(fused)`` (EAGLE-3) of tokens ``0…T−2``."""
    if isinstance(head, Eagle3Head):
        return head.project(batch["fused"][:, :-1])
    return batch["final"][:, :-1]


def draft_logits(head: Eagle1Head | Eagle3Head, out: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
    """Logits of head outputs ``[..., H]``: target lm_head (EAGLE-1: ``[..., V]``), own (EAGLE-3: ``[..., V_d]``)."""
    if isinstance(head, Eagle3Head):
        return head.logits(out)
    return F.linear(out, lm_head_weight.to(out.dtype))


@torch.no_grad()
def target_logits(final: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
    """``[N, H]`` post-norm target features → ``[N, V]`` float32 target logits, exact under mixed precision.

    Contract: ``p`` is the label every recipe distils, so it is the target's own fp32 distribution whatever the
    step's autocast does to the head. A bf16 autocast would otherwise round these logits to bf16 (up to 2^-8
    relative error each: about 0.08 on a logit of 20, which scales ``p`` by up to about 8 % and can flip a near-tied
    argmax).
    """
    with torch.autocast(final.device.type, enabled=False):
        return F.linear(final.float(), lm_head_weight.float())


def _target_probs(final: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
    """``[N, H]`` post-norm target features → ``[N, V]`` float32 target probabilities (see :func:`target_logits`)."""
    return torch.softmax(target_logits(final, lm_head_weight), dim=-1)


# ------------------------------------------------------------------------------------------------ EAGLE-1 and HASS


def hass_passes(
    head: Eagle1Head,
    embeds: torch.Tensor,
    features: torch.Tensor,
    positions: torch.Tensor,
    passes: int,
    on_pass: Callable[[int, torch.Tensor], None],
) -> None:
    """Run the HASS context-alignment passes; ``on_pass(j, pred [B, T', H])`` after each.

    Pass 0 is EAGLE-1's causal pass over ``features`` (``[B, T', H]``, target features of tokens ``0…T'−1``).
    Pass ``j ≥ 1`` feeds, at position ``t``, pass ``j−1``'s prediction made at ``t − 1`` (detached; position 0
    keeps ``features[:, 0]``), attends to the keys/values of every earlier pass plus its own through
    :func:`~specdec.train.masks.hass_attention_bias`, and keeps positions ``t``.
    """
    bsz, t_len = embeds.shape[:2]
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    inputs = features
    for j in range(passes):
        if j == 0:
            bias, past = causal_attention_bias(t_len, device=embeds.device), None
        else:
            bias = hass_attention_bias(t_len, j, device=embeds.device)
            past = (torch.cat(keys, dim=2), torch.cat(values, dim=2))
        pred, (k_new, v_new) = head(embeds, inputs, positions, as_batch_bias(bias, bsz), past)
        keys.append(k_new)
        values.append(v_new)
        on_pass(j, pred)
        # next pass: at position t the draft's own estimate of f_t (its prediction made at t − 1)
        inputs = torch.cat((features[:, :1], pred[:, :-1]), dim=1).detach()


def hass_loss(
    head: Eagle1Head,
    batch: dict[str, torch.Tensor],
    lm_head_weight: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    passes: int = 3,
    noise: float = 0.1,
    feature_weight: float = 1.0,
    ce_weight: float = 0.1,
    topk: int = 10,
    topk_weight: float = 1.0,
    pass_decay: float = 1.0,
) -> tuple[torch.Tensor, Metrics]:
    """HASS loss (EAGLE-1 losses + Top-K distillation over ``passes`` context-alignment passes).

    Args:
        head: an :class:`Eagle1Head` with an embedding (own or attached target's).
        batch: see the module docstring.
        lm_head_weight: ``[V, H]`` frozen target lm_head.
        generator: RNG for the input-feature noise ``U(−noise, noise)`` (same device as the batch).

    Returns:
        ``(loss, metrics)``; metrics hold per-pass ``loss_j``, ``acc_j`` (top-1 agreement) and ``tokens``.
    """
    ids, mask, final = batch["input_ids"], batch["loss_mask"], batch["final"]
    bsz, length = ids.shape
    t_len = length - 1
    device = final.device
    feats = final[:, :-1]
    if noise > 0:
        u = torch.rand(feats.shape, generator=generator, device=device, dtype=feats.dtype)
        feats = feats + (2 * u - 1) * noise
    embeds = head.embed(ids[:, 1:])
    positions = _positions(bsz, t_len, 0, device)
    sel = mask[:, 1:]  # [B, T'] slot t trained iff token t+1 is an assistant token
    target_feat = final[:, 1:][sel]  # [N, H]
    p = _target_probs(target_feat, lm_head_weight)  # [N, V]

    total = final.new_zeros(())
    metrics: Metrics = {"tokens": sel.sum().float()}

    def on_pass(j: int, pred: torch.Tensor) -> None:
        nonlocal total
        pred_sel = pred[sel]
        q_logits = F.linear(pred_sel, lm_head_weight.to(pred_sel.dtype))
        loss_j = feature_weight * feature_regression_loss(pred_sel.float(), target_feat.float())
        loss_j = loss_j + ce_weight * soft_cross_entropy(p, q_logits)
        if topk_weight:
            loss_j = loss_j + topk_weight * topk_distillation_loss(p, q_logits, topk)
        total = total + (pass_decay**j) * loss_j
        metrics[f"loss_{j}"] = loss_j.detach()
        metrics[f"acc_{j}"] = top1_agreement(p, q_logits)

    hass_passes(head, embeds, feats, positions, passes, on_pass)
    return total, metrics


def eagle1_loss(
    head: Eagle1Head,
    batch: dict[str, torch.Tensor],
    lm_head_weight: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    noise: float = 0.1,
    feature_weight: float = 1.0,
    ce_weight: float = 0.1,
) -> tuple[torch.Tensor, Metrics]:
    """EAGLE-1 loss: ``SmoothL1 + 0.1 · soft CE`` through the frozen lm_head, one causal pass (see module doc)."""
    return hass_loss(
        head,
        batch,
        lm_head_weight,
        generator,
        passes=1,
        noise=noise,
        feature_weight=feature_weight,
        ce_weight=ce_weight,
        topk_weight=0.0,
    )


# ------------------------------------------------------------------------------------------------ EAGLE-3 / chains


def unroll_chain(
    head: Eagle1Head | Eagle3Head,
    batch: dict[str, torch.Tensor],
    steps: int,
    on_step: Callable[[int, torch.Tensor], None],
    hidden0: torch.Tensor | None = None,
    detach_hidden: bool = False,
) -> None:
    """Run ``steps`` training-time-test steps over all slots at once (chain of greedy-draft contexts).

    Step ``k`` at slot ``t``: token ``input_ids[t+1+k]`` (0 past the end), hidden = step ``k−1`` output at slot ``t``
    (step 0: ``hidden0`` or :func:`first_hidden`), position ``t + k``, bias
    :func:`~specdec.train.masks.ttt_attention_bias`. Calls ``on_step(k, out [B, T', H])`` after each step.
    """
    ids = batch["input_ids"]
    bsz, length = ids.shape
    t_len = length - 1
    device = ids.device
    embeds_all = head.embed(ids)  # [B, T, H]
    hidden = first_hidden(head, batch) if hidden0 is None else hidden0
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    for k in range(steps):
        embeds = shift_left(embeds_all, 1 + k, t_len)
        bias = as_batch_bias(ttt_attention_bias(t_len, k, device=device), bsz)
        past = (torch.cat(keys, dim=2), torch.cat(values, dim=2)) if keys else None
        out, (k_new, v_new) = head(embeds, hidden, _positions(bsz, t_len, k, device), bias, past)
        keys.append(k_new)
        values.append(v_new)
        on_step(k, out)
        hidden = out.detach() if detach_hidden else out


def eagle3_loss(
    head: Eagle3Head,
    batch: dict[str, torch.Tensor],
    lm_head_weight: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    steps: int = 3,
    decay: float = 0.8,
    detach_hidden: bool = False,
) -> tuple[torch.Tensor, Metrics]:
    """EAGLE-3 training-time-test loss ``Σ_k decay^k · CE(p_draft-vocab, q)`` (see module docstring).

    Args:
        head: an :class:`Eagle3Head` whose ``d2t``/``t2d`` are set (see :mod:`specdec.train.draft_vocab`).
        batch: needs ``fused`` and ``final``.
        lm_head_weight: ``[V, H]`` frozen target lm_head (target distribution recomputed from ``final``).
        generator: unused (no noise in EAGLE-3); kept for a uniform recipe signature.

    Returns:
        ``(loss, metrics)`` with per-step ``loss_k``, ``acc_k`` and ``tokens``.
    """
    del generator
    ids, mask, final = batch["input_ids"], batch["loss_mask"], batch["final"]
    t_len = ids.shape[1] - 1
    vocab_d = head.config.draft_vocab_size
    draft_ids = head.to_target_ids(torch.arange(vocab_d, device=head.d2t.device))  # [V_d] target id of draft id i
    # target information at every token position i >= 1 that is an assistant token (the only ones ever scored)
    flat_rows = torch.full(mask.shape, -1, dtype=torch.long, device=mask.device)
    scored = mask.clone()
    scored[:, 0] = False
    flat_rows[scored] = torch.arange(int(scored.sum()), device=mask.device)
    full_logits = target_logits(final[scored], lm_head_weight)  # [M, V] float32, no grad
    in_draft = head.t2d[full_logits.argmax(-1)]  # [M]
    p_draft = torch.softmax(full_logits[:, draft_ids], dim=-1)  # [M, V_d]
    total = final.new_zeros(())
    metrics: Metrics = {}
    counts = []

    def on_step(k: int, out: torch.Tensor) -> None:
        nonlocal total
        rows = shift_left(flat_rows, 1 + k, t_len, fill=-1)  # [B, T'] row of p for slot t at step k
        has_row = rows >= 0
        valid = torch.zeros_like(has_row)
        valid[has_row] = in_draft[rows[has_row]]
        q_logits = head.logits(out[valid])
        p = p_draft[rows[valid]]
        loss_k = soft_cross_entropy(p, q_logits)
        total = total + (decay**k) * loss_k
        metrics[f"loss_{k}"] = loss_k.detach()
        metrics[f"acc_{k}"] = top1_agreement(p, q_logits)
        counts.append(valid.sum())

    unroll_chain(head, batch, steps, on_step, detach_hidden=detach_hidden)
    metrics["tokens"] = counts[0].float()
    return total, metrics


#: Each recipe's loss; its keyword arguments are the recipe's options of :class:`~specdec.train.config.LossConfig`
#: and :class:`~specdec.train.config.TTTConfig`, with the same defaults (tested).
RECIPES: dict[str, Callable[..., tuple[torch.Tensor, Metrics]]] = {
    "eagle1": eagle1_loss,
    "hass": hass_loss,
    "eagle3": eagle3_loss,
}

"""Loss terms, draft vocabulary, and each recipe's loss falling on a small synthetic set (tiny target)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.models import tiny_llama
from specdec.train.draft_vocab import select_draft_vocab, token_frequencies, vocab_maps
from specdec.train.features import FeatureSpec, eagle3_layers, target_hidden
from specdec.train.heads import build_head
from specdec.train.losses import feature_regression_loss, soft_cross_entropy, topk_distillation_loss
from specdec.train.recipes import eagle1_loss, eagle3_loss, hass_loss, target_logits

# ------------------------------------------------------------------------------------------------ loss terms


def test_soft_ce_and_topk_against_hand_computation() -> None:
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    q_logits = torch.log(torch.tensor([[0.25, 0.25, 0.4, 0.1]]))
    log_q = torch.log(torch.tensor([0.25, 0.25, 0.4, 0.1]))
    assert torch.isclose(soft_cross_entropy(p, q_logits), -(p[0] * log_q).sum())
    # top-2 of p = tokens 0, 1, weights NOT renormalised
    assert torch.isclose(topk_distillation_loss(p, q_logits, k=2), -(0.5 * log_q[0] + 0.3 * log_q[1]))
    assert torch.isclose(topk_distillation_loss(p, q_logits, k=4), soft_cross_entropy(p, q_logits))
    # one-hot p: soft CE is the ordinary cross-entropy
    onehot = F.one_hot(torch.tensor([2]), 4).float()
    assert torch.isclose(soft_cross_entropy(onehot, q_logits), F.cross_entropy(q_logits, torch.tensor([2])))
    pred, tgt = torch.tensor([[0.0, 3.0]]), torch.tensor([[0.5, 0.0]])
    assert torch.isclose(feature_regression_loss(pred, tgt), torch.tensor((0.125 + 2.5) / 2))
    empty = soft_cross_entropy(torch.zeros(0, 4), torch.zeros(0, 4))
    assert float(empty) == 0.0


def test_draft_vocab_from_frequencies() -> None:
    ids = torch.tensor([5, 5, 5, 1, 1, 7, 7, 9, 2, 2])
    mask = torch.tensor([1, 1, 1, 1, 1, 1, 1, 1, 0, 0]).bool()  # token 2 only at non-assistant positions
    counts = token_frequencies([(ids, mask)], vocab_size=10)
    assert counts.tolist() == [0, 2, 0, 0, 0, 3, 0, 2, 0, 1]
    chosen = select_draft_vocab(counts, 3)
    assert chosen.tolist() == [1, 5, 7]  # ties (1 and 7, both 2) resolved toward smaller ids, then sorted
    assert select_draft_vocab(counts, 5).tolist() == [0, 1, 5, 7, 9]  # unseen fill in id order
    d2t, t2d = vocab_maps(chosen, 10)
    assert d2t.dtype == torch.int64 and d2t.tolist() == [1, 4, 5]  # target id of draft id i = i + d2t[i]
    assert (torch.arange(3) + d2t).tolist() == [1, 5, 7]
    assert t2d.dtype == torch.bool and torch.nonzero(t2d).flatten().tolist() == [1, 5, 7]
    with pytest.raises(ValueError):
        vocab_maps(torch.tensor([5, 1]), 10)


# ------------------------------------------------------------------------------------------------ recipes


def synthetic_batch(target, batch_size: int = 4, length: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random token sequences (assistant mask on all but the first 3 tokens) with the target's features."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.config.vocab_size, (batch_size, length), generator=g)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, :3] = False
    layers = eagle3_layers(target.config.num_hidden_layers)
    with torch.no_grad():
        final, fused = target_hidden(target, ids, FeatureSpec(True, layers))
    return {"input_ids": ids, "loss_mask": mask, "final": final, "fused": fused}


def fit(head, loss_fn, batch, lm_head, iters: int = 40, lr: float = 3e-3, **kwargs) -> tuple[float, float]:
    """Evaluate the loss (fixed noise), train ``iters`` AdamW steps, evaluate again."""
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95))

    def value() -> float:
        with torch.no_grad():
            return float(loss_fn(head, batch, lm_head, torch.Generator().manual_seed(123), **kwargs)[0])

    before = value()
    for i in range(iters):
        loss, _ = loss_fn(head, batch, lm_head, torch.Generator().manual_seed(i), **kwargs)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(head.parameters(), 0.5)
        opt.step()
    return before, value()


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, logit_scale=3.0)


def _head(recipe: str, target, draft_vocab: int = 32):
    torch.manual_seed(0)
    head = build_head(recipe, target.config, eagle3_layers(4), draft_vocab)
    head.attach_target_embedding(target.get_input_embeddings().weight)
    return head


def test_eagle1_loss_falls(target) -> None:
    batch = synthetic_batch(target)
    head = _head("eagle1", target)
    assert isinstance(head, Eagle1Head)
    before, after = fit(head, eagle1_loss, batch, target.lm_head.weight.detach())
    assert after < 0.6 * before, (before, after)


def test_hass_loss_falls_on_every_pass(target) -> None:
    batch = synthetic_batch(target)
    head = _head("hass", target)
    lm_head = target.lm_head.weight.detach()
    with torch.no_grad():
        _, m0 = hass_loss(head, batch, lm_head, torch.Generator().manual_seed(0), noise=0.0)
    before, after = fit(head, hass_loss, batch, lm_head)
    with torch.no_grad():
        _, m1 = hass_loss(head, batch, lm_head, torch.Generator().manual_seed(0), noise=0.0)
    assert after < 0.8 * before, (before, after)
    for j in range(3):
        assert float(m1[f"loss_{j}"]) < float(m0[f"loss_{j}"]) - 0.1, (j, m0, m1)


def test_eagle3_loss_falls_and_masks_out_of_vocab_targets(target) -> None:
    batch = synthetic_batch(target)
    lm_head = target.lm_head.weight.detach()
    head = _head("eagle3", target, draft_vocab=20)
    assert isinstance(head, Eagle3Head)
    counts = token_frequencies(zip(batch["input_ids"], batch["loss_mask"], strict=True), 32)
    head.set_vocab_map(select_draft_vocab(counts, 20))
    _, metrics = eagle3_loss(head, batch, lm_head, steps=3)
    # step 0 scores slot t iff token t+1 is an assistant token and the target argmax after it is in the draft vocab
    argmax = F.linear(batch["final"], lm_head).argmax(-1)  # [B, T]
    expected = (batch["loss_mask"][:, 1:] & head.t2d[argmax[:, 1:]]).sum()
    assert 0 < int(expected) < int(batch["loss_mask"][:, 1:].sum())
    assert int(metrics["tokens"]) == int(expected)
    before, after = fit(head, eagle3_loss, batch, lm_head, iters=40, steps=3)
    assert after < 0.8 * before, (before, after)


def test_eagle3_step_zero_equals_soft_ce_on_full_vocab(target) -> None:
    """With the full vocab as draft vocab, step 0's loss is the soft CE between p and the head's logits."""
    batch = synthetic_batch(target, batch_size=2, length=10)
    lm_head = target.lm_head.weight.detach()
    head = _head("eagle3", target, draft_vocab=32)
    head.set_vocab_map(torch.arange(32))
    with torch.no_grad():
        _, metrics = eagle3_loss(head, batch, lm_head, steps=1)
        out, _ = head(
            head.embed(batch["input_ids"][:, 1:]),
            head.project(batch["fused"][:, :-1]),
            torch.arange(9)[None].expand(2, 9),
            torch.triu(torch.full((9, 9), float("-inf")), 1)[None, None].expand(2, 1, 9, 9),
        )
        sel = batch["loss_mask"][:, 1:]
        p = torch.softmax(F.linear(batch["final"][:, 1:][sel], lm_head), -1)
        expected = -(p * torch.log_softmax(head.logits(out[sel]), -1)).sum(-1).mean()
    torch.testing.assert_close(metrics["loss_0"], expected, atol=1e-5, rtol=1e-5)


def test_target_distribution_stays_fp32_under_bf16_autocast(target) -> None:
    """The label ``p`` is the target's fp32 distribution even inside a bf16 autocast step (mixed precision)."""
    batch = synthetic_batch(target, batch_size=2, length=10)
    lm_head = target.lm_head.weight.detach()
    final = batch["final"].reshape(-1, batch["final"].shape[-1]) * 7.0  # large logits: bf16 rounding would show
    exact = F.linear(final, lm_head)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = F.linear(final, lm_head)
        logits = target_logits(final, lm_head)
    assert rounded.dtype == torch.bfloat16 and not torch.equal(rounded.float(), exact)  # the control: autocast rounds
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, exact, atol=0, rtol=0)

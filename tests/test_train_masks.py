"""HASS and training-time-test attention biases: equal to independent reference constructions, and the passes they
drive reproduce step-by-step decoding with a KV cache."""

from __future__ import annotations

import pytest
import torch

from specdec.eagle.config import EagleConfig
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.eagle.layers import causal_bias
from specdec.train.masks import causal_attention_bias, hass_attention_bias, ttt_attention_bias
from specdec.train.recipes import hass_passes, unroll_chain


def hass_reference(length: int, j: int) -> torch.Tensor:
    """The HASS paper's construction (appendix A.1): start from the causal mask over the *target* keys and, for
    ``i = 0 … j−1``, replace the score of query ``q`` and key ``q − i`` by the key of the ``i``-th most recent draft
    pass (pass ``j − i``). Returned as a 0/1 matrix over ``[pass 0 keys | pass 1 keys | … | pass j keys]``."""
    visible = torch.zeros(length, (j + 1) * length)
    for q in range(length):
        for k in range(q + 1):  # causal
            distance = q - k
            source = j - distance if distance < j else 0  # which pass's key sits at position k for this query
            visible[q, source * length + k] = 1
    return visible


def ttt_reference(length: int, step: int) -> torch.Tensor:
    """Training-time test: slot ``t`` at step ``k`` sees step-0 slots ``≤ t`` and slot ``t`` of steps ``1 … k``."""
    visible = torch.zeros(length, (step + 1) * length)
    for t in range(length):
        for s in range(t + 1):
            visible[t, s] = 1
        for m in range(1, step + 1):
            visible[t, m * length + t] = 1
    return visible


def as01(bias: torch.Tensor) -> torch.Tensor:
    assert bool(((bias == 0) | (bias == float("-inf"))).all()), "bias must be 0 / -inf"
    return (bias == 0).float()


@pytest.mark.parametrize("length", [1, 2, 5, 9])
@pytest.mark.parametrize("j", [0, 1, 2, 3, 4])
def test_hass_bias_matches_reference(length: int, j: int) -> None:
    bias = hass_attention_bias(length, j)
    assert bias.shape == (length, (j + 1) * length)
    assert torch.equal(as01(bias), hass_reference(length, j))


@pytest.mark.parametrize("length", [1, 2, 5, 9])
@pytest.mark.parametrize("step", [0, 1, 2, 6])
def test_ttt_bias_matches_reference(length: int, step: int) -> None:
    bias = ttt_attention_bias(length, step)
    assert bias.shape == (length, (step + 1) * length)
    assert torch.equal(as01(bias), ttt_reference(length, step))


def test_pass_zero_is_causal_and_rows_never_empty() -> None:
    assert torch.equal(hass_attention_bias(6, 0), causal_attention_bias(6))
    assert torch.equal(ttt_attention_bias(6, 0), causal_attention_bias(6))
    for j in range(5):
        assert bool((as01(hass_attention_bias(7, j)).sum(-1) >= 1).all())


def _config(draft_vocab: int = 32) -> EagleConfig:
    return EagleConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=32,
        draft_vocab_size=draft_vocab,
        target_hidden_size=16,
    )


def _step(head, embeds, hidden, position: int, cache: list[tuple[torch.Tensor, torch.Tensor]]):
    """One decoding step of one new position attending to everything cached so far plus itself."""
    past = (torch.cat([k for k, _ in cache], 2), torch.cat([v for _, v in cache], 2)) if cache else None
    n_past = 0 if past is None else past[0].shape[2]
    out, kv = head(embeds, hidden, torch.tensor([[position]]), causal_bias(1, n_past), past)
    cache.append(kv)
    return out


@torch.no_grad()
def test_hass_passes_reproduce_decoding_after_j_draft_steps() -> None:
    """Pass j at position t == decode: target features up to t − j (prefill), then j draft steps feeding the
    draft's own outputs, with the data tokens."""
    torch.manual_seed(0)
    head = Eagle1Head(_config(), with_embedding=True)
    length, passes = 9, 4
    ids = torch.randint(0, 32, (1, length + 1))
    feats = torch.randn(1, length, 16)
    embeds = head.embed(ids[:, 1:])
    preds: list[torch.Tensor] = []
    hass_passes(head, embeds, feats, torch.arange(length)[None], passes, lambda j, pred: preds.append(pred))
    for j in range(passes):
        for t in range(j, length):
            start = t - j  # last position with a real target feature
            cache: list = []
            out = None
            for s in range(start + 1):  # prefill with target features (one position at a time)
                out = _step(head, embeds[:, s : s + 1], feats[:, s : s + 1], s, cache)
            for s in range(start + 1, t + 1):  # j draft steps on the draft's own features
                out = _step(head, embeds[:, s : s + 1], out, s, cache)
            torch.testing.assert_close(preds[j][:, t], out[:, 0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_ttt_unroll_reproduces_chain_decoding() -> None:
    """TTT step k at slot t == decode a chain: causal prefill of slots 0…t with fc(fused), then k steps feeding
    the pre-norm output back, tokens t+1+k, positions t+k."""
    torch.manual_seed(1)
    head = Eagle3Head(_config(), with_embedding=True)
    length, steps = 8, 4
    ids = torch.randint(0, 32, (1, length))
    fused = torch.randn(1, length, 48)
    batch = {"input_ids": ids, "fused": fused}
    outs: list[torch.Tensor] = []
    unroll_chain(head, batch, steps, lambda k, out: outs.append(out))
    t_len = length - 1
    for t in range(t_len):
        cache: list = []
        out = None
        for s in range(t + 1):
            out = _step(head, head.embed(ids[:, s + 1 : s + 2]), head.project(fused[:, s : s + 1]), s, cache)
        torch.testing.assert_close(outs[0][:, t], out[:, 0], atol=1e-5, rtol=1e-5)
        for k in range(1, steps):
            if t + 1 + k >= length:
                break
            out = _step(head, head.embed(ids[:, t + 1 + k : t + 2 + k]), out, t + k, cache)
            torch.testing.assert_close(outs[k][:, t], out[:, 0], atol=1e-5, rtol=1e-5)

"""The CPU's top-p scan (topk of the largest logits) keeps the same tokens as sorting the whole row."""

from __future__ import annotations

import pytest
import torch

import specdec.sampling as sampling
from specdec.sampling import SamplingParams, warp


def _rows(seed: int) -> torch.Tensor:
    """Rows from peaked to flat (nucleus of a few tokens to most of the vocabulary), V = 5000, and a [V] row."""
    g = torch.Generator().manual_seed(seed)
    scales = torch.tensor([0.3, 1.0, 3.0, 6.0, 12.0])[:, None]
    return torch.randn(5, 5000, generator=g) * scales


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_scan_keeps_what_the_sort_keeps(monkeypatch, top_p: float, temperature: float) -> None:
    params = SamplingParams(temperature=temperature, top_p=top_p)
    for seed in range(4):
        x = _rows(seed)
        scanned = warp(x, params)
        monkeypatch.setattr(sampling, "NUCLEUS_SCAN", ())  # the full sort
        full = warp(x, params)
        monkeypatch.undo()
        # Where a row's cut lies within float32 rounding of top_p the two may differ by that one token: skip those.
        sorted_p = torch.softmax(torch.sort(x / temperature, descending=True).values.double(), -1)
        margin = ((sorted_p.cumsum(-1) - sorted_p) - top_p).abs().amin(-1)
        clear = margin > 1e-5
        assert torch.equal(scanned[clear] > 0, full[clear] > 0), (seed, margin)
        assert torch.allclose(scanned[clear], full[clear], atol=1e-6)
        assert torch.equal(warp(x[3], params) > 0, scanned[3] > 0)  # a [V] row: the same as in a batch


def test_the_scan_falls_back_to_the_sort(monkeypatch) -> None:
    """A flat row's nucleus is wider than every scan: the sort decides, so the result is still the nucleus."""
    monkeypatch.setattr(sampling, "NUCLEUS_SCAN", (8, 16))
    x = torch.zeros(1, 100)
    x[0, :3] = 1.0
    p = warp(x, SamplingParams(temperature=1.0, top_p=0.9))
    assert int((p > 0).sum()) > 16  # kept more than any scan could decide

"""A few rows padded to the row count measured fastest in the packed linears (:mod:`specdec.backends.row_padding`).

What is shown, on tiny random Llamas with every linear packed and specdec's cache in a temporary folder (the suite
turns padding off; these tests turn it back on):

* a padded linear gives every row the values of the unpadded GEMM, in the input's leading shape, and the GEMM sees the
  padded row count only below it (control: unpadded, it sees the rows as they come);
* the choice: the fastest padded step where it beats the unpadded one by more than the margin, else none; ties to
  fewer rows; the switch (``off``, a number, bad values refused by name);
* a model whose packed weights fit the caches is not measured and pads nothing; a measured choice (the timing patched
  to a known answer) pads every eligible linear, says so, is cached (read back without timing again), leaves a linear
  whose single row runs on another kernel alone, and gives the cost curve its own name; the real timing runs the
  model's step for every candidate;
* the target decodes exactly with its rows padded (greedy = HF ``generate``; the sampled law through the loop, with
  the negative control of ``tests/test_cpus.py``); and SmolLM2's padded 1-token step gives its unpadded logits.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specdec.backends import row_padding
from specdec.backends.kernels import PackedLinear
from specdec.backends.row_padding import (
    chosen_rows,
    packed_linears,
    padding_rows,
    padding_times,
    row_padding_mode,
    set_pad_rows,
)
from specdec.budget import curve_path
from specdec.models import load_smollm2
from specdec.target import HFTarget
from tests.test_cpus import assert_decodes_exactly, exactness_model

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture
def padding(monkeypatch, tmp_path):
    """Row padding as ``weights="auto"`` does it by default (the suite turns it off), on every linear packed (the
    suite's forced profile), in a fresh cache."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECDEC_ROW_PADDING", "auto")


def test_padded_rows_get_the_unpadded_values_and_the_gemm_sees_the_padded_count() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 96)
    packed = PackedLinear(linear, keep_weight=True)
    seen: list[int] = []
    gemm = packed.gemm
    packed.gemm = lambda x: (seen.append(x.numel() // 64), gemm(x))[1]
    for pad in (1, 6):
        packed.pad_rows = pad
        for rows in range(1, 9):
            for shape in ((rows, 64), (1, rows, 64)):
                x = torch.randn(shape)
                y = packed(x)
                assert y.shape == (*shape[:-1], 96)
                torch.testing.assert_close(y, F.linear(x, linear.weight, linear.bias), rtol=1e-5, atol=1e-5)
                assert seen.pop() == (max(rows, pad) if pad > 1 else rows)  # control: unpadded, the rows as they come


def steady(times: dict[int, float], passes: int = row_padding.PASSES) -> dict[int, list[float]]:
    """Per-pass seconds where every pass gives each count its time (each faster count wins every pass)."""
    return {k: [t] * passes for k, t in times.items()}


def test_the_choice_takes_the_fastest_step_beyond_the_margin_and_ties_to_fewer_rows() -> None:
    assert chosen_rows(steady({1: 1.0, 2: 1.1, 5: 0.92, 6: 0.9, 7: 1.05})) == 6
    assert chosen_rows(steady({1: 1.0, 2: 1.1, 6: 1.0 - row_padding.MARGIN / 2})) == 1  # within the margin: none
    assert chosen_rows(steady({1: 1.0, 5: 0.9, 6: 0.9})) == 5
    assert chosen_rows(steady({1: 1.0, 2: 1.2})) == 1


def test_the_sign_test_counts_passes_and_a_few_slow_passes_do_not_choose() -> None:
    for n, needed in ((11, 9), (22, 16)):
        assert row_padding.wins_needed(n) == needed
        tail = sum(math.comb(n, w) for w in range(needed, n + 1)) / 2**n
        assert tail <= row_padding.ALPHA < tail + math.comb(n, needed - 1) / 2**n  # the fewest wins at that rate
    # 6 rows: its median 8 % below the unpadded one, but it won only 7 of 11 passes (the unpadded step's slow passes
    # moved the median): not chosen, while 5 rows won 10 of 11 by a steady 4 %
    unpadded = [1.0] * 6 + [1.2] * 5
    passes = {1: unpadded, 5: [0.96 * t for t in unpadded[:10]] + [1.3], 6: [0.92] * 7 + [1.3] * 4}
    assert statistics.median(passes[6]) < statistics.median(passes[5])
    assert chosen_rows(passes) == 5
    assert chosen_rows({1: unpadded, 6: passes[6]}) == 1  # control: by its median alone, 6 would have been taken


def test_medians_and_passes_that_disagree_are_measured_again_and_pooled(padding, monkeypatch) -> None:
    monkeypatch.setattr(row_padding, "COLD_BYTES", 0)
    unpadded = [1.0] * 6 + [1.2] * 5
    runs = iter([{1: unpadded, 6: [0.92] * 7 + [1.3] * 4}, steady({1: 1.0, 6: 0.9})])
    calls = []
    monkeypatch.setattr(row_padding, "_measure", lambda model, linears: calls.append(1) or next(runs))
    target = HFTarget(exactness_model(), max_len=64, weights="auto")
    assert len(calls) == 2 and target.execution.pad_rows == 6  # pooled: 6 rows won 18 of 22 passes
    assert len(padding_times(target.model)[6]) == 2 * row_padding.PASSES and len(calls) == 2  # cached, pooled
    runs = iter([steady({1: 1.0, 6: 0.9})])  # control: passes that agree are measured once
    padding_times(target.model, refresh=True)
    assert len(calls) == 3


def test_the_switch(monkeypatch) -> None:
    for value, expected in (("auto", "auto"), ("off", "off"), ("6", 6)):
        monkeypatch.setenv("SPECDEC_ROW_PADDING", value)
        assert row_padding_mode() == expected
    for bad in ("0", "9", "six", "-1"):
        monkeypatch.setenv("SPECDEC_ROW_PADDING", bad)
        with pytest.raises(ValueError, match="SPECDEC_ROW_PADDING"):
            row_padding_mode()


def test_a_model_that_fits_the_caches_is_not_measured(padding, monkeypatch) -> None:
    def never(*args):
        raise AssertionError("a small model was timed")

    monkeypatch.setattr(row_padding, "_measure", never)
    target = HFTarget(exactness_model(), max_len=64, weights="auto")
    assert packed_linears(target.model)  # packed, so it could have padded
    assert target.execution.pad_rows == 1 and padding_times(target.model) is None
    assert all(lin.pad_rows == 1 for lin in packed_linears(target.model))


def test_a_measured_choice_pads_is_cached_and_names_the_curve(padding, monkeypatch) -> None:
    monkeypatch.setattr(row_padding, "COLD_BYTES", 0)
    times = steady({k: 1.0 - 0.02 * (k == 6) - 0.1 * (k == 4) for k in range(1, 9)})
    monkeypatch.setattr(row_padding, "_measure", lambda model, linears: times)
    target = HFTarget(exactness_model(), max_len=64, weights="auto")
    linears = packed_linears(target.model)
    assert target.execution.pad_rows == 4 and linears and all(lin.pad_rows == 4 for lin in linears)
    assert "fewer than 4 rows padded to 4" in target.execution.describe()

    def never(*args):
        raise AssertionError("the cached choice was timed again")

    monkeypatch.setattr(row_padding, "_measure", never)
    again = HFTarget(exactness_model(), max_len=64, weights="auto")
    assert again.execution.pad_rows == 4
    assert "+pad4" in curve_path(again.model, again.device).name
    set_pad_rows(again.model, 1)
    assert "+pad" not in curve_path(again.model, again.device).name  # control: the unpadded model's curve
    linears[0].single_rows("stock")  # a single row on another kernel: that linear is left alone
    assert set_pad_rows(target.model, 4) == len(linears) - 1 and linears[0].pad_rows == 1
    monkeypatch.setenv("SPECDEC_ROW_PADDING", "off")
    assert padding_rows(target.model) == 1


def test_a_second_holder_of_the_model_keeps_its_padding(padding, monkeypatch) -> None:
    monkeypatch.setattr(row_padding, "COLD_BYTES", 0)
    monkeypatch.setattr(
        row_padding, "_measure", lambda model, linears: steady({k: 1.0 - 0.1 * (k == 6) for k in range(1, 9)})
    )
    target = HFTarget(exactness_model(), max_len=64, weights="auto")
    assert target.execution.pad_rows == 6 and target.weights_choice == "auto"
    monkeypatch.setattr(
        row_padding, "_measure", lambda model, linears: steady({k: 1.0 - 0.1 * (k == 3) for k in range(1, 9)})
    )
    padding_times(target.model, refresh=True)  # the table now says 3; the prepared model says 6
    sibling = target.sibling(max_len=32)  # prepares the same modules again, in place (a cost curve's probe)
    assert sibling.execution.pad_rows == 6
    assert all(lin.pad_rows == 6 for lin in packed_linears(target.model))
    set_pad_rows(target.model, 1)  # control: an unpadded model takes the table's choice
    assert target.sibling(max_len=32).execution.pad_rows == 3


def test_the_timing_runs_the_models_step_for_every_candidate(padding, monkeypatch) -> None:
    monkeypatch.setattr(row_padding, "COLD_BYTES", 0)
    target = HFTarget(exactness_model(), max_len=64, weights="auto")
    passes = padding_times(target.model, refresh=True)
    assert sorted(passes) == list(range(1, row_padding.MAX_ROWS + 1))
    assert all(len(v) in (row_padding.PASSES, 2 * row_padding.PASSES) and min(v) > 0 for v in passes.values())
    assert all(lin.pad_rows == target.execution.pad_rows for lin in packed_linears(target.model))  # restored


def test_a_padded_target_decodes_exactly(padding, monkeypatch) -> None:
    monkeypatch.setenv("SPECDEC_ROW_PADDING", "6")
    model = exactness_model()
    target = HFTarget(model, max_len=64, weights="auto")
    assert target.execution.pad_rows == 6
    assert_decodes_exactly(model, target)


@pytest.mark.slow
def test_smollm2_padded_step_gives_the_unpadded_logits(padding) -> None:
    target = HFTarget(load_smollm2()[0], max_len=64, weights="auto")
    ids = torch.tensor([[1]])
    with torch.inference_mode():
        set_pad_rows(target.model, 1)
        plain = target.model(input_ids=ids, use_cache=False).logits
        set_pad_rows(target.model, 6)
        padded = target.model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(padded, plain, rtol=1e-4, atol=1e-4)
    assert padded.argmax(-1).item() == plain.argmax(-1).item()

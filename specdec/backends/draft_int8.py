"""Which kernel runs each int8 linear of a draft head (``weights="int8"``, a CPU draft's ``"auto"``), measured on the
CPU at hand.

Two kernels read the same int8 weights (one symmetric scale per output channel):

* ``"int8"``: :class:`~specdec.backends.kernels.Int8Linear`, fbgemm's dynamic int8 GEMM, which also quantizes the
  inputs with one scale per call (so a row's output depends on the rows beside it);
* ``"w8"``: :class:`~specdec.backends.skinny.W8Linear`, the skinny kernel's int8-weight twin, inputs kept in float32
  (a row's output bitwise the same alone or in a tree).

Each shape goes to the one with the smaller ``T(1) + T(8)`` over cold weights (:mod:`specdec.backends.kernel_times`,
cached per machine); a tie (within ``TIE``) goes to ``"w8"``, which costs no acceptance: with EAGLE-3's shipped head
on 16-node trees, τ 1.913 in float32, 1.854 on fbgemm's kernel, 1.917 with these int8 weights and float inputs, and
1.911 with float inputs everywhere but the vocabulary projection (8 MT-bench prompts x 96 tokens, T = 0, Intel Xeon
of family 6 model 106; docs/results/2026-11-30-draft-w8-intel-f6m106). There, with cold weights and threads,
``"w8"`` ran the head's own linears in 0.4-0.85x fbgemm's time for 1-8 rows and fbgemm a 576 -> 49152 vocabulary
projection's 8 rows 1.6x faster.

Where the rule stays (every linear on ``"int8"``, as before the measured choice): the kernel library cannot run here
(no compiler, no AVX2 and FMA), ``SPECDEC_SKINNY=off``, measuring switched off
(:func:`~specdec.backends.kernel_times.measuring`), or a CPU whose results row keeps the rule
(:data:`~specdec.backends.skinny_choice.SKINNY_RULE_KEPT` and :data:`~specdec.backends.kernel_times.RULE_KEPT`):
each is measured again the next time it is at hand.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.backends.kernel_times import kernel_table, linear_shape
from specdec.backends.kernels import Int8Linear
from specdec.backends.skinny import W8Linear, unavailable
from specdec.backends.skinny_choice import skinny_measures

__all__ = ["DRAFT_KERNELS", "draft_int8_linear", "draft_int8_measures"]

#: The candidates of a draft's int8 linears (their table is cached apart: the kernels are in its key).
DRAFT_KERNELS = ("int8", "w8")


def draft_int8_measures() -> bool:
    """Whether a draft's int8 linears are chosen by measurement here (else every one runs ``"int8"``, the rule)."""
    return skinny_measures() and unavailable() is None


def draft_int8_linear(linear: nn.Linear, keep_weight: bool = True) -> nn.Module:
    """``linear`` as a draft's int8 linear on the kernel its shape measured faster on here (module docstring).

    Args:
        linear: the float ``nn.Linear`` to replace.
        keep_weight: keep its weight reachable (shared, not copied); otherwise it is released.
    """
    if not draft_int8_measures():
        return Int8Linear(linear, keep_weight=keep_weight)
    shape = linear_shape(linear)
    table = kernel_table([shape], torch.float32, kernels=DRAFT_KERNELS)
    if table.choice(shape) == "int8" or table.name(shape) in table.failed:
        return Int8Linear(linear, keep_weight=keep_weight)  # measured faster, or the measurement failed: the rule
    return W8Linear(linear, keep_weight=keep_weight)

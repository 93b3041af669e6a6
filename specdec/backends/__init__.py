"""Execution backends: a transformation of a loaded model, never a second decoding loop.

The decoding loop, the target adapter and the drafters always run the model's own (Hugging Face or head) forward;
a backend only changes *how* that forward executes, along two independent choices (:mod:`specdec.backends.choice`):

* ``weights``: ``"stock"``, ``"packed"`` (oneDNN-prepacked linears, :mod:`specdec.backends.kernels`), ``"int8"``
  (drafts only) or ``"auto"``;
* ``static_shapes``: fixed-shape compiled forwards (:mod:`specdec.backends.compiled`) or eager ones, or ``"auto"``.

:func:`prepare_model` resolves both once and returns the model to run (a copy sharing the caller's tensors unless
``in_place``) with an :class:`Execution` that says what it chose and why. Attention: grouped-query attention runs
without key/value copies wherever the model is not stock-eager (:mod:`specdec.backends.gqa`).
"""

from specdec.backends.choice import (
    WEIGHTS,
    BackendError,
    Execution,
    Invariant,
    StaticShapes,
    Weights,
    apply,
    execution_label,
    prepare_model,
    resolve,
)
from specdec.backends.cpu import cpu_gemm_profile
from specdec.backends.gqa import GQA_ATTENTION, GQA_INVARIANT, GQA_SKINNY, attention_label
from specdec.backends.kernels import (
    VOCAB_ROWS,
    FastPathWarning,
    Int8Linear,
    PackedLinear,
    pack_linears,
    packed_copy,
    shared_copy,
    unpack_linears,
)

__all__ = [
    "GQA_ATTENTION",
    "GQA_INVARIANT",
    "GQA_SKINNY",
    "attention_label",
    "VOCAB_ROWS",
    "WEIGHTS",
    "BackendError",
    "Execution",
    "FastPathWarning",
    "Invariant",
    "Int8Linear",
    "PackedLinear",
    "StaticShapes",
    "Weights",
    "apply",
    "cpu_gemm_profile",
    "execution_label",
    "pack_linears",
    "packed_copy",
    "prepare_model",
    "resolve",
    "shared_copy",
    "unpack_linears",
]

"""Whether a prepared model runs row-invariant numerics (:func:`specdec.backends.choice.apply`'s ``invariant``).

Row-invariant numerics make a row's logits bitwise the same in a 1-token step and in a tree forward, so greedy
speculation emits plain decoding's tokens. They need every linear on a row-invariant kernel (packed, with single rows
padded where the probe says so, or the skinny GEMM), eager shapes, and a row-invariant attention: the few-row kernel
(:mod:`specdec.backends.attention_choice`) where it serves the model (float32 on the CPU), else SDPA in float64 on a
float64 cache (:mod:`specdec.backends.gqa`). ``"auto"`` turns them on for bfloat16 (and says why not for float16);
``True`` asks for them and refuses what cannot serve them; ``False`` leaves them off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from specdec.backends.gqa import GQA_NAMES
from specdec.backends.kernels import plain_linear
from specdec.errors import BackendError

if TYPE_CHECKING:
    from specdec.backends.choice import Execution

__all__ = ["INVARIANT_FIX", "INVARIANT_NEEDS", "Invariant", "invariant_on"]

Invariant = bool | Literal["auto"]
INVARIANT_NEEDS = (
    "row-invariant numerics need every linear packed (or on the skinny kernel), eager shapes and SDPA attention"
)
INVARIANT_FIX = (
    "pass weights='packed' and static_shapes=False, i.e. --weights packed --static-shapes off, or leave invariant off"
)


def invariant_on(invariant: Invariant, execution: Execution, model: nn.Module) -> tuple[bool, str]:
    """``(on, reason)``: whether row-invariant numerics apply to ``model`` as ``execution`` prepared it, and why not
    where ``auto`` left them off on a bfloat16 or float16 model (:func:`~specdec.backends.choice.apply` warns with it).

    Raises:
        BackendError: ``invariant=True`` where something the numerics need is missing (named in the message).
    """
    dtype = next((p.dtype for p in model.parameters()), None)
    if invariant is False or (invariant == "auto" and dtype not in (torch.bfloat16, torch.float16)):
        return False, ""
    if invariant == "auto" and dtype == torch.float16:
        return False, (
            "float16 runs stock (packed weights, which the numerics need, run float32 or bfloat16): greedy output "
            "may differ from vanilla's at near-ties; a bfloat16 target gets them"
        )
    plain = any(plain_linear(m) for m in model.modules())  # neither packed nor on the skinny kernel
    missing = (
        "static shapes" if execution.static else "",
        f"{execution.weights} weights" if plain or execution.weights == "stock" else "",
        f"{execution.skipped} linear(s) left stock" if execution.skipped else "",
        f"{execution.attention} attention" if execution.attention and execution.attention not in GQA_NAMES else "",
    )
    missing = ", ".join(m for m in missing if m)
    if not missing:
        return True, ""
    if invariant is True:
        raise BackendError(f"{INVARIANT_NEEDS}; this model runs {missing} ({INVARIANT_FIX})")
    return False, f"{INVARIANT_NEEDS}, not {missing}: greedy output may differ from vanilla's at near-ties"

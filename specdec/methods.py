"""Named decoding methods for the demo, the command line and the benchmark.

A method is a small function that composes parts around one target; nothing in the library's hot path
looks names up. ``build_method("eagle3", target)`` returns an object with ``generate``/``stream``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec.generate import SpeculativeGenerator, VanillaGenerator
from specdec.models import MissingAssetError
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy, StaticTreePolicy, StochasticTreePolicy
from specdec.verify import default_verifier

__all__ = ["METHODS", "MethodOptions", "build_method", "shipped_head_dir", "method_names"]

HEADS_DIR = Path(__file__).parent / "heads" / "smollm2-135m-instruct"


@dataclass(frozen=True)
class MethodOptions:
    """Tree and drafter settings shared by the named methods (CPU-sized defaults)."""

    topk: int = 8
    depth: int = 5
    total_tokens: int = 24
    small_lm_layers: int = 6
    head_dir: Path | None = None


def shipped_head_dir(kind: str) -> Path:
    """Folder of a head shipped for SmolLM2-135M-Instruct (``eagle1``, ``hass`` or ``eagle3``)."""
    path = HEADS_DIR / kind
    if not (path / "config.json").is_file():
        raise MissingAssetError(f"no shipped {kind} head at {path}; train one with `specdec train {kind}`")
    return path


def _dynamic(o: MethodOptions) -> DynamicTreePolicy:
    return DynamicTreePolicy(topk=o.topk, depth=o.depth, total_tokens=o.total_tokens)


def _speculative(target: HFTarget, drafter, policy, sampling: SamplingParams) -> SpeculativeGenerator:
    stochastic = isinstance(policy, StochasticTreePolicy) and not sampling.greedy
    return SpeculativeGenerator(target, drafter, policy, default_verifier(stochastic, sampling.temperature))


def _eagle_drafter(target: HFTarget, kind: str, o: MethodOptions):
    from specdec.checkpoints import load_eagle_head
    from specdec.drafters import Eagle3Drafter, EagleDrafter

    head = load_eagle_head(o.head_dir or shipped_head_dir(kind), target_model=target.model)
    head = head.to(device=target.device, dtype=target.dtype).eval()
    cls = Eagle3Drafter if kind == "eagle3" else EagleDrafter
    return cls(head, target.model, max_len=target.max_len)


def _vanilla(target, sampling, o):
    return VanillaGenerator(target)


def _ngram(target, sampling, o):
    from specdec.drafters import NGramDrafter

    return _speculative(target, NGramDrafter(target.vocab_size), _dynamic(o), sampling)


def _small_lm(target, sampling, o):
    from specdec.drafters import SmallLMDrafter

    drafter = SmallLMDrafter.from_target_layers(target.model, o.small_lm_layers, target.max_len)
    return _speculative(target, drafter, _dynamic(o), sampling)


def _eagle1_static(target, sampling, o):
    return _speculative(target, _eagle_drafter(target, "eagle1", o), StaticTreePolicy.eagle1_default(), sampling)


def _eagle2(target, sampling, o):
    return _speculative(target, _eagle_drafter(target, "eagle1", o), _dynamic(o), sampling)


def _hass(target, sampling, o):
    return _speculative(target, _eagle_drafter(target, "hass", o), _dynamic(o), sampling)


def _eagle3(target, sampling, o):
    return _speculative(target, _eagle_drafter(target, "eagle3", o), _dynamic(o), sampling)


METHODS: dict[str, Callable] = {
    "vanilla": _vanilla,
    "ngram": _ngram,
    "small-lm": _small_lm,
    "eagle1-static": _eagle1_static,
    "eagle2": _eagle2,
    "hass": _hass,
    "eagle3": _eagle3,
}


def method_names() -> list[str]:
    return list(METHODS)


def build_method(
    name: str, target: HFTarget, sampling: SamplingParams, options: MethodOptions | None = None
) -> SpeculativeGenerator | VanillaGenerator:
    """Compose the named method around ``target``. Raises ``ValueError`` for unknown names."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name](target, sampling, options or MethodOptions())

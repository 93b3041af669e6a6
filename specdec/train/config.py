"""What a training run needs: :class:`TrainConfig`, nested by concern and validated at the boundary.

A config is a handful of small sections, each readable on its own::

    TrainConfig(recipe, out, target,
                data=DataConfig(...),      # which sequences, how long, the feature cache
                optim=OptimConfig(...),    # AdamW, schedule, steps, seed
                head=HeadConfig(...),      # fresh or continued head, its shape
                loss=LossConfig(...),      # EAGLE-1 / HASS loss terms
                ttt=TTTConfig(...),        # EAGLE-3 training-time test
                eval=EvalConfig(...),      # held-out evaluation and the τ curve
                run=RunConfig(...))        # checkpoints, logging, progress

Every field's name is unique across the sections, so a leaf name alone says where it goes:
``TrainConfig(recipe="hass", out="runs/h", max_len=512, passes=2)`` and ``specdec train hass --set passes=2`` fill
``data.max_len`` and ``loss.passes`` (``section.field`` works too). An unknown name is refused with the list of
valid ones (:class:`UnknownOptionError`). Whole sections go too (``optim=OptimConfig(lr=3e-4)``): only the fields a
section object was given count, so ``TrainConfig(..., lr=1e-3, optim=OptimConfig(epochs=5))`` keeps both; the same
option given twice with different values is refused (:class:`ConflictingOptionError`), whichever way it was given.

Every float option must be finite (``lr=inf`` is refused), and the command line turns a value out of range into one
line (:func:`config_error`).

**Recipe options** are declared once, here: a field made with :func:`option` names the recipes it applies to. The
loss of a recipe takes exactly its options of the ``loss`` and ``ttt`` sections (:meth:`TrainConfig.loss_options`),
and a model card lists all of them (:meth:`TrainConfig.recipe_options`), so the two cannot drift apart.

Defaults follow the reference recipes (eagle-family.md §4) where nothing better was measured here; the data size and
length default to CPU-sized values, and EAGLE-3 unrolls 3 training-time-test steps instead of 7 (see
:class:`TTTConfig`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specdec.errors import SpecdecError

__all__ = [
    "RECIPE_NAMES",
    "ConflictingOptionError",
    "DataConfig",
    "EvalConfig",
    "HeadConfig",
    "InvalidOptionError",
    "LossConfig",
    "OptimConfig",
    "RunConfig",
    "TTTConfig",
    "TrainConfig",
    "UnknownOptionError",
    "config_error",
    "default_of",
    "nest_options",
    "option",
    "valid_keys",
]

Recipe = Literal["eagle1", "hass", "eagle3"]
RECIPE_NAMES: tuple[str, ...] = ("eagle1", "hass", "eagle3")


class UnknownOptionError(SpecdecError, ValueError):
    """A training option that no section of :class:`TrainConfig` has (the message lists the valid ones)."""


class ConflictingOptionError(SpecdecError, ValueError):
    """A training option given twice with different values (e.g. as a leaf and inside its section)."""


class InvalidOptionError(SpecdecError, ValueError):
    """A training option whose value is out of range or of the wrong type (the message names each)."""


def config_error(err: ValidationError) -> InvalidOptionError:
    """One :class:`InvalidOptionError` naming every option of a failed :class:`TrainConfig` validation."""
    problems = []
    for e in err.errors():
        where = ".".join(str(part) for part in e["loc"]) or "config"
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "value_error":  # a validator's own message names the values
            problems.append(f"{where}: {message}")
        else:
            problems.append(f"{where}={e.get('input')!r}: {message[:1].lower()}{message[1:]}")
    return InvalidOptionError(f"invalid training option {'; '.join(problems)}")


def option(default: Any, *, recipes: tuple[str, ...], description: str, **constraints: Any) -> Any:
    """A recipe option: a field that changes what ``recipes`` train, listed on their model cards."""
    return Field(default, description=description, json_schema_extra={"recipes": list(recipes)}, **constraints)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DataConfig(_Section):
    """Which sequences the head trains and is evaluated on, and where their target features are cached."""

    max_conversations: int | None = Field(1000, ge=1, description="training sequences taken (ShareGPT or data_dir)")
    data_dir: Path | None = Field(
        None,
        description="self-distilled training data (`specdec data regenerate`) instead of ShareGPT's own answers; "
        "held-out data stays ShareGPT's held-out split",
    )
    skip_sequences: int = Field(
        0,
        ge=0,
        description="leave out the first N training sequences (those an earlier run in the head's lineage trained "
        "on), then take max_conversations; continues a head on data it has not seen",
    )
    max_len: int = Field(1024, ge=8, description="truncate sequences to this many tokens")
    heldout_fraction: float = Field(0.02, ge=0.0, lt=1.0)
    max_heldout: int = Field(50, ge=0, description="held-out conversations")
    data_seed: int = Field(42, description="order in which ShareGPT conversations are taken")
    train_sequences: int | None = Field(
        None, ge=1, description="train on the first N cached sequences only (a smaller budget on the same cache)"
    )
    features_dir: Path | None = Field(None, description="feature cache; None: OUT/features")
    feature_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    captured_features: Path | None = Field(
        None, description="a capture folder (specdec.train.captured): training sequences found there are not extracted"
    )
    extract_batch_size: int = Field(1, ge=1)


class OptimConfig(_Section):
    """AdamW and its schedule (the reference's: lr 3e-5, betas (0.9, 0.95), value clipping 0.5, linear warmup and
    decay)."""

    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop at this global step (schedule spans all epochs)")
    batch_size: int = Field(1, ge=1, description="sequences per step and process")
    lr: float = Field(3e-5, gt=0, description="peak learning rate")
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = Field(0.0, ge=0)
    warmup_steps: int | None = Field(None, ge=0, description="None: min(2000, 5% of the total steps)")
    grad_clip_value: float | None = Field(0.5, gt=0)
    seed: int = Field(0, description="seed of the head init, data order and noise")
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"

    @model_validator(mode="after")
    def _betas_in_range(self) -> OptimConfig:
        if not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ValueError(f"betas {self.betas} must each lie in [0, 1) (AdamW's moving averages)")
        return self


class HeadConfig(_Section):
    """The head a run starts from: fresh (shaped after the target) or a trained one continued."""

    init_head: Path | None = Field(
        None,
        description="start from this trained head (a folder in the official layout, e.g. a shipped head) instead of "
        "a fresh init, to continue training on new data; an EAGLE-3 head keeps its draft vocabulary and fused layers",
    )
    init_from_target: bool = option(
        False,
        recipes=RECIPE_NAMES,
        description="a fresh head's decoder layer starts from the target's last decoder layer instead of a random "
        "init (specdec.train.head_init; lost to the random init on SmolLM2: docs/results/2026-11-25-cpu-recipes)",
    )
    intermediate_size: int | None = option(
        None, recipes=RECIPE_NAMES, ge=1, description="head MLP width; None: the target's"
    )
    draft_vocab_size: int | None = option(
        None,
        recipes=("eagle3",),
        ge=1,
        description="None: min(V, 32000), or with init_head the head's own vocabulary; a size given with init_head "
        "builds a new vocabulary from the run's data (rows the head had keep their weights)",
    )
    eagle3_layers: tuple[int, ...] | None = option(
        None, recipes=("eagle3",), description="target layers whose inputs are fused; None: (2, L // 2, L - 3)"
    )

    @model_validator(mode="after")
    def _one_start(self) -> HeadConfig:
        if self.init_from_target and self.init_head is not None:
            raise ValueError("init_from_target starts a fresh head; it cannot be combined with init_head")
        return self


class LossConfig(_Section):
    """EAGLE-1 and HASS loss terms (specdec.train.recipes): the reference's weights.

    HASS keeps the paper's top-K loss (``topk_weight`` 1) and equal pass weights (``pass_decay`` 1): on SmolLM2
    neither turning the top-K loss off (τ 1.558 vs 1.544) nor ``pass_decay`` 0.5 (+0.005 ± 0.007) was measurably
    better (docs/results/2026-11-25-cpu-recipes/README.md and docs/results/2026-11-26-hass-pass-decay/README.md).
    """

    noise: float = option(
        0.1, recipes=("eagle1", "hass"), ge=0, description="uniform input-feature noise amplitude U(-a, a)"
    )
    feature_weight: float = option(1.0, recipes=("eagle1", "hass"), ge=0, description="SmoothL1 feature regression")
    ce_weight: float = option(
        0.1, recipes=("eagle1", "hass"), ge=0, description="soft cross-entropy through the lm_head"
    )
    topk: int = option(10, recipes=("hass",), ge=1, description="K of HASS's top-K distillation")
    topk_weight: float = option(1.0, recipes=("hass",), ge=0, description="weight of the top-K distillation loss")
    passes: int = option(3, recipes=("hass",), ge=1, description="HASS context-alignment passes")
    pass_decay: float = option(1.0, recipes=("hass",), gt=0, description="HASS per-pass loss weight beta^j")


class TTTConfig(_Section):
    """EAGLE-3 training-time test: ``steps`` unrolled draft steps, step ``k`` weighted ``decay^k``.

    ``steps`` defaults to **3**, not the paper's 7: at equal data on SmolLM2, TTT 3 beat TTT 7 in held-out τ
    (1.560 vs 1.524 at 92k scored slots, 1.714 vs 1.668 at 196k) in under half the training time (3.8 vs 8.3 min,
    8.0 vs 17.8 min); docs/results/2026-11-25-cpu-recipes/README.md. The shipped EAGLE-3
    head trains with 3.
    """

    steps: int = option(3, recipes=("eagle3",), ge=1, description="EAGLE-3 training-time-test steps")
    decay: float = option(0.8, recipes=("eagle3",), gt=0, description="EAGLE-3 per-step loss weight decay^k")
    detach_hidden: bool = option(
        False, recipes=("eagle3",), description="feed each step the previous step's output detached (no gradient)"
    )


class EvalConfig(_Section):
    """Held-out evaluation: greedy-chain acceptance (specdec.train.evaluate) and dynamic-tree τ (specdec.train.tau)."""

    eval_depth: int = Field(5, ge=1, description="greedy-chain depth")
    eval_max_sequences: int | None = Field(50, ge=1, description="held-out sequences scored")
    eval_tau_prompts: int = Field(8, ge=0, description="held-out prompts decoded for dynamic-tree τ (0: none)")
    eval_steps: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        (),
        description="also evaluate after these steps (0: before the first one); one line each in curve.jsonl",
    )


class RunConfig(_Section):
    """Bookkeeping: checkpoints, logging, progress bars."""

    save_every: int = Field(200, ge=1, description="checkpoint every N steps")
    keep_checkpoints: int = Field(2, ge=1)
    resume: bool = Field(True, description="continue from the newest checkpoint in OUT")
    log_every: int = Field(10, ge=1, description="progress-bar refresh of the loss")
    progress: bool = True
    extract_only: bool = Field(False, description="stop after caching the features (then train multi-GPU on them)")


_SECTIONS: dict[str, type[_Section]] = {
    "data": DataConfig,
    "optim": OptimConfig,
    "head": HeadConfig,
    "loss": LossConfig,
    "ttt": TTTConfig,
    "eval": EvalConfig,
    "run": RunConfig,
}
_TOP = ("recipe", "out", "target")
_LEAVES: dict[str, str] = {leaf: name for name, section in _SECTIONS.items() for leaf in section.model_fields}
assert len(_LEAVES) == sum(len(s.model_fields) for s in _SECTIONS.values()), "leaf names must be unique"
assert not set(_LEAVES) & (set(_TOP) | set(_SECTIONS)), "a leaf may not shadow a top-level name"


def valid_keys() -> list[str]:
    """Every key :func:`nest_options` accepts besides ``section.field``: the top-level fields and every leaf."""
    return [*_TOP, *_LEAVES]


def default_of(key: str) -> Any:
    """The default of option ``key`` (a leaf name or ``section.field``).

    Raises:
        UnknownOptionError: no section has ``key``.
    """
    ((section, leaves),) = nest_options({key: None}).items()
    (leaf,) = leaves
    return _SECTIONS[section]().model_dump()[leaf]


def nest_options(fields: dict[str, Any]) -> dict[str, Any]:
    """Flat leaf names (``max_len``), ``section.field`` names and whole sections → :class:`TrainConfig` input.

    A section given as an object contributes the fields it was given (not its defaults), so it merges with leaves
    of the same section given beside it.

    Raises:
        UnknownOptionError: a key no section has (the message lists the valid keys and the closest ones).
        ConflictingOptionError: one option given twice with different values (e.g. ``lr`` and ``optim.lr``, or ``lr``
            and ``optim=OptimConfig(lr=...)``).
    """
    nested: dict[str, Any] = {}
    given_as: dict[tuple[str, str], str] = {}

    def put(section: str, leaf: str, value: Any, key: str) -> None:
        values = nested.setdefault(section, {})
        if not isinstance(values, dict):  # a section of the wrong type: left to the validation to refuse
            return
        if leaf in values and values[leaf] != value:
            raise ConflictingOptionError(
                f"training option {section}.{leaf} is given twice: {values[leaf]!r} as {given_as[section, leaf]} and "
                f"{value!r} as {key}; give it once"
            )
        values[leaf], given_as[section, leaf] = value, key

    for key, value in fields.items():
        if key in _TOP:
            nested[key] = value
            continue
        if key in _SECTIONS:
            value = value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value
            if not isinstance(value, dict):
                nested[key] = value
            for leaf, item in value.items() if isinstance(value, dict) else ():
                put(key, leaf, item, f"{key}={type(fields[key]).__name__}(...)")
            continue
        section, dot, leaf = key.partition(".")
        if not dot:
            section, leaf = _LEAVES.get(key, ""), key
        if section not in _SECTIONS or leaf not in _SECTIONS[section].model_fields:
            close = difflib.get_close_matches(key, valid_keys(), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UnknownOptionError(
                f"unknown training option {key!r}{hint}; valid keys: {', '.join(valid_keys())}, or section.field"
            )
        put(section, leaf, value, key)
    return nested


class TrainConfig(BaseModel):
    """Everything a training run needs (module docstring: sections, leaf names, recipe options).

    Attributes:
        recipe: ``eagle1``, ``hass`` or ``eagle3``.
        out: the run folder (specdec.train.run_folder).
        target: ``smollm2``, a local HF model folder or a .gguf file.
    """

    model_config = ConfigDict(extra="forbid")

    recipe: Recipe
    out: Path
    target: str = "smollm2"
    data: DataConfig = Field(default_factory=DataConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    head: HeadConfig = Field(default_factory=HeadConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    ttt: TTTConfig = Field(default_factory=TTTConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    run: RunConfig = Field(default_factory=RunConfig)

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        return nest_options(data) if isinstance(data, dict) else data

    def recipe_options(self) -> dict[str, Any]:
        """Every option of this run's recipe, by leaf name, in section order (what a model card lists)."""
        return _options_of(self, self.recipe, _SECTIONS)

    def loss_options(self) -> dict[str, Any]:
        """The keyword arguments of this run's loss (its options of the ``loss`` and ``ttt`` sections)."""
        return _options_of(self, self.recipe, ("loss", "ttt"))


def _options_of(config: TrainConfig, recipe: str, sections: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sections:
        section = getattr(config, name)
        values = section.model_dump(mode="json")
        for leaf, field in type(section).model_fields.items():
            extra = field.json_schema_extra
            if isinstance(extra, dict) and recipe in extra.get("recipes", ()):  # type: ignore[operator]
                out[leaf] = values[leaf]
    return out

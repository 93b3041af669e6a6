"""Training loop: data → cached target features → recipe loss → AdamW → resumable checkpoints → head + eval.

Single process on a CPU (``specdec train …`` or :func:`train`), or several GPUs with
``accelerate launch -m specdec.train.cli eagle1 --out DIR …``: the recipe runs inside one ``nn.Module`` forward so
DDP sees a single forward per step, each process takes every ``world``-th batch, and only the main process extracts
features, writes checkpoints, saves the head and evaluates.

Determinism: the data order of epoch ``e`` is a permutation seeded by ``(seed, e)``, and the feature noise of step
``s`` on process ``r`` comes from a generator seeded by ``(seed, s, r)``, so a run resumed from a checkpoint (head,
optimizer, scheduler, step, global RNG states) produces the same loss sequence as an uninterrupted one.

Output folder::

    train_config.json      the TrainConfig
    init_head_training.json  what ``init_head`` was trained on when the run started: its ``training.json``, or the
                           facts of the unshipped run it is the head of (the lineage this run's card records, even
                           if that folder is shipped over or deleted before this run ships)
    features/{train,heldout}/   cached target features (see specdec.train.features)
    checkpoints/step_*.pt  resumable state (the newest ``keep_checkpoints`` are kept)
    log.jsonl              one line per optimizer step: step, epoch, lr, loss, wall_s (training time so far, resumes
                           included) and the recipe's metrics
    head/                  the trained head in the official format (specdec.checkpoints.save_eagle_head)
    eval.json              held-out greedy-chain acceptance (specdec.train.evaluate)
    curve.jsonl            the same evaluation after each of ``eval_steps`` (τ against training tokens)
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
from tqdm.auto import tqdm

from specdec.checkpoints import CheckpointError, save_eagle_head
from specdec.drafters.eagle_modules import Eagle1Head, Eagle3Head, EagleConfig
from specdec.train.captured import CapturedFeatures
from specdec.train.data import TokenDataset, load_sharegpt
from specdec.train.draft_vocab import select_draft_vocab, token_frequencies
from specdec.train.evaluate import evaluate_heldout
from specdec.train.features import FeatureSpec, FeatureStore, collate, eagle3_layers, extract_features
from specdec.train.head_init import init_from_target_layer
from specdec.train.recipes import RECIPES, recipe_kwargs
from specdec.train.regenerate import load_regenerated

__all__ = [
    "TrainConfig",
    "train",
    "build_head",
    "initial_head",
    "with_draft_vocab",
    "RecipeModule",
    "lr_lambda",
    "read_log",
    "trained_tokens",
    "curve_points",
    "PARENT_FACTS",
]

PARENT_FACTS = "init_head_training.json"

Recipe = Literal["eagle1", "hass", "eagle3"]


class TrainConfig(BaseModel):
    """Everything a training run needs (validated at the boundary; inner code takes plain arguments).

    Defaults follow the reference recipes (eagle-family.md §4) except the data size and length, which default
    to CPU-friendly values.
    """

    model_config = ConfigDict(extra="forbid")

    recipe: Recipe
    out: Path
    target: str = Field("smollm2", description="'smollm2' or a local HF model folder")
    # data
    max_conversations: int | None = Field(1000, ge=1)
    data_dir: Path | None = Field(
        None,
        description="self-distilled training data (`specdec data regenerate`) instead of ShareGPT's own answers; "
        "max_conversations caps the sequences taken from it; held-out data stays ShareGPT's held-out split",
    )
    skip_sequences: int = Field(
        0,
        ge=0,
        description="leave out the first N training sequences of the data (those an earlier run in the head's "
        "lineage trained on), then take max_conversations; continues a head on data it has not seen",
    )
    max_len: int = Field(1024, ge=8)
    heldout_fraction: float = Field(0.02, ge=0.0, lt=1.0)
    max_heldout: int = Field(50, ge=0)
    eval_tau_prompts: int = Field(8, ge=0)
    data_seed: int = 42
    features_dir: Path | None = None
    train_sequences: int | None = Field(
        None, ge=1, description="train on the first N cached sequences only (a smaller budget on the same cache)"
    )
    feature_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    captured_features: Path | None = Field(
        None, description="a capture folder (specdec.train.captured): training sequences found there are not extracted"
    )
    extract_batch_size: int = Field(1, ge=1)
    # optimisation
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop at this global step (schedule spans all epochs)")
    batch_size: int = Field(1, ge=1)
    lr: float = Field(3e-5, gt=0)
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = Field(0.0, ge=0)
    warmup_steps: int | None = Field(None, ge=0, description="None: min(2000, 5% of the total steps)")
    grad_clip_value: float | None = Field(0.5, gt=0)
    seed: int = 0
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    # recipe
    noise: float = Field(0.1, ge=0, description="uniform input-feature noise amplitude (EAGLE-1/HASS)")
    feature_weight: float = 1.0
    ce_weight: float = 0.1
    topk: int = Field(10, ge=1)
    topk_weight: float = 1.0
    passes: int = Field(3, ge=1, description="HASS context-alignment passes")
    pass_decay: float = Field(1.0, gt=0, description="HASS per-pass loss weight beta^j")
    steps: int = Field(7, ge=1, description="EAGLE-3 training-time-test steps")
    decay: float = Field(0.8, gt=0, description="EAGLE-3 per-step loss weight decay^k")
    detach_hidden: bool = False
    draft_vocab_size: int | None = Field(
        None,
        ge=1,
        description="EAGLE-3; None: min(V, 32000), or with init_head the head's own vocabulary; a size given with "
        "init_head builds a new vocabulary from the run's data (rows the head had keep their weights)",
    )
    eagle3_layers: tuple[int, ...] | None = None
    intermediate_size: int | None = Field(None, ge=1, description="head MLP width; None: the target's")
    init_head: Path | None = Field(
        None,
        description="start from this trained head (a folder in the official layout, e.g. a shipped head) instead of "
        "a fresh init, to continue training on new data; an EAGLE-3 head keeps its draft vocabulary and fused layers",
    )
    init_from_target: bool = Field(
        False,
        description="a fresh head's decoder layer starts from the target's last decoder layer instead of a random "
        "init (see specdec.train.head_init); not with init_head",
    )
    # bookkeeping
    save_every: int = Field(200, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    resume: bool = True
    log_every: int = Field(10, ge=1)
    eval_depth: int = Field(5, ge=1)
    eval_max_sequences: int | None = Field(50, ge=1)
    eval_steps: tuple[int, ...] = Field(
        (),
        description="also evaluate (chain acceptance and τ) after these steps (0: before the first one); one line "
        "each in curve.jsonl",
    )
    progress: bool = True
    extract_only: bool = Field(False, description="stop after caching the features (then train multi-GPU on them)")

    @model_validator(mode="after")
    def _one_start(self) -> TrainConfig:
        if self.init_from_target and self.init_head is not None:
            raise ValueError("init_from_target starts a fresh head; it cannot be combined with init_head")
        return self


# ------------------------------------------------------------------------------------------------ pieces


def lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warmup over ``warmup`` steps, then linear decay to 0 at ``total`` (the reference schedule)."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if total <= warmup:
            return 1.0
        return max(0.0, (total - step) / (total - warmup))

    return f


def build_head(
    recipe: str,
    target_config: Any,
    layers: Sequence[int] = (),
    draft_vocab_size: int | None = None,
    intermediate_size: int | None = None,
) -> Eagle1Head | Eagle3Head:
    """A fresh head shaped after the target's HF config (one decoder layer, the target's attention geometry)."""
    c = target_config
    heads = int(c.num_attention_heads)
    config = EagleConfig.model_validate(
        {
            "hidden_size": c.hidden_size,
            "intermediate_size": intermediate_size or c.intermediate_size,
            "num_attention_heads": heads,
            "num_key_value_heads": getattr(c, "num_key_value_heads", None) or heads,
            "head_dim": getattr(c, "head_dim", None) or c.hidden_size // heads,
            "vocab_size": c.vocab_size,
            "draft_vocab_size": draft_vocab_size if recipe == "eagle3" else c.vocab_size,
            "target_hidden_size": c.hidden_size,
            "rms_norm_eps": getattr(c, "rms_norm_eps", 1e-6),
            "rope_theta": _rope_theta(c),
            "max_position_embeddings": getattr(c, "max_position_embeddings", 2048),
            "hidden_act": getattr(c, "hidden_act", "silu"),
            "bias": True,
            "aux_layer_ids": tuple(layers) if recipe == "eagle3" else None,
        }
    )
    if recipe == "eagle3":
        return Eagle3Head(config, num_fused=len(layers))
    return Eagle1Head(config)


def _keep_parent_facts(init_head: Path | None, out: Path) -> None:
    """Keep what ``init_head`` was trained on in the run as ``init_head_training.json``, once (a resumed run keeps the
    copy made at its start: the parent folder may have been shipped over, or its run deleted, since): its
    ``training.json``, or the facts of the unshipped run whose ``head/`` it is (:func:`~specdec.train.card.head_facts`).
    """
    if init_head is None or (out / PARENT_FACTS).is_file():
        return
    from specdec.train.card import head_facts  # the card module builds on this one

    facts = head_facts(init_head)
    if facts is not None:
        (out / PARENT_FACTS).write_text(json.dumps(facts, indent=1) + "\n")


def initial_head(path: str | Path, recipe: str, target: Any, layers: Sequence[int] = ()) -> Eagle1Head | Eagle3Head:
    """A trained head to continue training from (float32, in train mode), checked against the run.

    Continued training keeps what the head was built with: an EAGLE-3 head its draft vocabulary (``d2t``/``t2d``) and
    the target layers it fuses, which must be the run's feature ``layers``.

    Raises:
        CheckpointError: the folder holds no readable head.
        VocabMismatchError / ValueError: the head was made for another target (vocabulary or width), for another
            recipe (EAGLE-1/HASS heads and EAGLE-3 heads are not interchangeable), or fuses other layers.
    """
    from specdec.checkpoints import load_eagle_head

    head = load_eagle_head(path, target_model=target, dtype=torch.float32)
    want = Eagle3Head if recipe == "eagle3" else Eagle1Head
    if not isinstance(head, want):
        raise ValueError(f"init_head {path} is a {head.kind} head; the {recipe} recipe trains a {want.kind} head")
    if isinstance(head, Eagle3Head):
        aux = tuple(head.config.aux_layer_ids or ())
        if (aux and aux != tuple(layers)) or head.num_fused != len(layers):
            raise ValueError(
                f"init_head {path} fuses target layers {aux or head.num_fused} but the run extracts {tuple(layers)}; "
                "set eagle3_layers to the head's"
            )
    return head.train()


def with_draft_vocab(head: Eagle3Head, draft_ids: torch.Tensor) -> Eagle3Head:
    """``head`` moved onto another draft vocabulary ``draft_ids`` ``[V_d']`` (increasing target ids).

    Every weight but the draft lm_head ``[V_d', H]`` is kept. A draft token the head already had keeps its trained
    lm_head row; a new one starts from the mean of the trained rows, so it starts at an average logit: neither
    winning the argmax nor ruled out. (The target's lm_head rows, a fresh head's init, do not fit the trained head's
    output space: on the SmolLM2 EAGLE-3 head they took held-out α₁ from 0.26 to 0.003.)
    """
    config = head.config.model_copy(update={"draft_vocab_size": int(draft_ids.numel())})
    new = Eagle3Head(config, with_embedding=head.embed_tokens is not None, num_fused=head.num_fused)
    new.set_vocab_map(draft_ids)
    state = {k: v for k, v in head.state_dict().items() if k not in ("lm_head.weight", "d2t", "t2d")}
    new.load_state_dict(state, strict=False)
    old_ids = head.to_target_ids(torch.arange(head.config.draft_vocab_size, device=head.d2t.device))
    old_row = torch.full((head.config.vocab_size,), -1, dtype=torch.long)
    old_row[old_ids.cpu()] = torch.arange(old_ids.numel())
    rows = old_row[draft_ids.cpu()]
    kept = rows >= 0
    trained = head.lm_head.weight.detach().cpu().to(new.lm_head.weight.dtype)
    with torch.no_grad():
        weight = trained.mean(0).expand(draft_ids.numel(), -1).clone()
        weight[kept] = trained[rows[kept]]
        new.lm_head.weight.copy_(weight)
    return new.train(head.training)


def _default_tau_fn(target: Any, config: TrainConfig) -> Callable[[Any, Any], float] | None:
    """Dynamic-tree τ on held-out prompts through the real decoding loop (``eval_tau_prompts`` of them)."""
    if config.eval_tau_prompts <= 0:
        return None
    from specdec.train.tau import make_tau_fn

    return make_tau_fn(target, num_prompts=config.eval_tau_prompts)


def _rope_theta(c: Any) -> float:
    theta = getattr(c, "rope_theta", None)
    params = getattr(c, "rope_parameters", None)
    if theta is None and isinstance(params, dict):
        theta = params.get("rope_theta")
    return float(theta or 10000.0)


class RecipeModule(nn.Module):
    """The head plus its frozen target pieces; ``forward(batch, generator) -> (loss, metrics)`` is one recipe step.

    The target's lm_head weight ``[V, H]`` is a plain tensor attribute, created on the training device: not a
    parameter or buffer, so it is never saved, optimised, or broadcast by DDP every step. The target embedding is
    attached to the head the same way (shared, frozen).
    """

    def __init__(
        self, head: Eagle1Head | Eagle3Head, recipe: str, lm_head_weight: torch.Tensor, options: dict[str, Any]
    ) -> None:
        super().__init__()
        self.head = head
        self.recipe = recipe
        self.lm_head_weight = lm_head_weight.detach()
        self.options = recipe_kwargs(recipe, options)

    def forward(
        self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return RECIPES[self.recipe](self.head, batch, self.lm_head_weight, generator, **self.options)


def _load_target(name: str, device: torch.device) -> tuple[Any, Any]:
    from specdec.models import load_model

    return load_model(name, device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _derived_seed(*parts: int) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big") >> 1


def _checkpoints(out: Path) -> list[Path]:
    return sorted((out / "checkpoints").glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def _load_checkpoint(path: Path) -> dict[str, Any]:
    """A training checkpoint, read with ``weights_only=True``: tensors and plain values, never arbitrary objects.

    Raises:
        CheckpointError: the file holds other objects (e.g. numpy RNG state pickled by an older specdec).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"{path} holds objects a weights-only load refuses (written by an older specdec?); "
            f"delete {path.parent} or train with --no-resume to start over"
        ) from err


def _rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain numbers, so that ``torch.load(weights_only=True)`` reads it back."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": int(version), "mt": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`_rng_state`."""
    py, nps = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(int(x) for x in py["mt"].tolist()), py["gauss"]))
    keys = nps["keys"].numpy().astype(np.uint32)
    np.random.set_state((nps["kind"], keys, nps["pos"], nps["has_gauss"], nps["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------------------------------ train


def train(
    config: TrainConfig,
    *,
    target: Any | None = None,
    tokenizer: Any | None = None,
    train_data: TokenDataset | Sequence[Any] | None = None,
    heldout_data: TokenDataset | Sequence[Any] | None = None,
    tau_fn: Callable[[Any, Any], float] | None = None,
) -> Path:
    """Train a head with ``config``; returns the folder of the saved head (``config.out / "head"``), or the features
    folder when ``config.extract_only``.

    Multi-GPU: only the main process extracts features while the others wait at a barrier, which can time out on
    long extractions; run once with ``extract_only`` (``--extract-only``) first, then ``accelerate launch``.

    Args:
        target: an HF causal LM to use instead of loading ``config.target`` (with ``tokenizer`` when the data must be
            built from ShareGPT).
        train_data, heldout_data: :class:`~specdec.train.data.TokenDataset` to use instead of ShareGPT (e.g.
            self-distilled data); ``heldout_data`` may be empty.
        tau_fn: optional ``(head, heldout_store) -> τ`` hook measuring dynamic-tree τ (see
            :mod:`specdec.train.evaluate`).
    """
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=config.mixed_precision)
    device = accelerator.device
    main = accelerator.is_main_process
    out = Path(config.out)
    _seed_all(config.seed)
    if main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_config.json").write_text(config.model_dump_json(indent=1))
        _keep_parent_facts(config.init_head, out)

    # ---- target and data
    if target is None:
        target, tokenizer = _load_target(config.target, device)
    else:
        target = target.to(device).eval()
    num_layers = int(target.config.num_hidden_layers)
    layers = tuple(config.eagle3_layers or eagle3_layers(num_layers)) if config.recipe == "eagle3" else ()
    spec = FeatureSpec(final=True, layers=layers)
    features_dir = Path(config.features_dir) if config.features_dir else out / "features"
    if main:
        if train_data is None and config.data_dir:
            regenerated = load_regenerated(config.data_dir, max_len=config.max_len)
            train_data = _window(regenerated, config.skip_sequences, config.max_conversations)
        if train_data is None or heldout_data is None:
            if tokenizer is None:
                raise ValueError("building ShareGPT data needs the target's tokenizer")
            sharegpt_train, sharegpt_heldout = load_sharegpt(
                tokenizer,
                max_conversations=0
                if train_data is not None
                else _plus(config.max_conversations, config.skip_sequences),
                max_len=config.max_len,
                heldout_fraction=config.heldout_fraction,
                max_heldout=config.max_heldout,
                seed=config.data_seed,
            )
            if train_data is None:
                train_data = _window(sharegpt_train, config.skip_sequences, None)
            heldout_data = sharegpt_heldout if heldout_data is None else heldout_data
        dtype = getattr(torch, config.feature_dtype)
        captured = None
        if config.captured_features is not None:
            captured = CapturedFeatures(config.captured_features, target, spec, dtype, max_len=config.max_len)
        for split, data in (("train", train_data), ("heldout", heldout_data or TokenDataset([]))):
            extract_features(
                target,
                data,
                features_dir / split,
                spec,
                dtype=dtype,
                batch_size=config.extract_batch_size,
                progress=config.progress,
                desc=f"target features ({split})",
                captured=captured if split == "train" else None,
            )
    accelerator.wait_for_everyone()
    if config.extract_only:
        return features_dir
    train_store = FeatureStore(features_dir / "train", spec)
    heldout_store = FeatureStore(features_dir / "heldout", spec)
    if config.train_sequences is not None:
        if config.train_sequences > len(train_store):
            raise ValueError(f"train_sequences={config.train_sequences} but the cache holds {len(train_store)}")
        train_store = _Prefix(train_store, config.train_sequences)
    if len(train_store) == 0:
        raise ValueError("no training sequences")

    # ---- head
    lm_head_weight = target.get_output_embeddings().weight.detach().to(device, torch.float32).clone()
    embed_weight = target.get_input_embeddings().weight.detach().to(device, torch.float32).clone()
    vocab_size = int(target.config.vocab_size)
    draft_vocab = min(vocab_size, config.draft_vocab_size or 32000)
    torch.manual_seed(config.seed)
    if config.init_head is not None:
        head = initial_head(config.init_head, config.recipe, target, layers)
    else:
        head = build_head(config.recipe, target.config, layers, draft_vocab, config.intermediate_size)
        if config.init_from_target:
            init_from_target_layer(head, target)
    if isinstance(head, Eagle3Head) and (config.init_head is None or config.draft_vocab_size is not None):
        counts = token_frequencies(
            ((train_store[i]["input_ids"], train_store[i]["loss_mask"]) for i in range(len(train_store))), vocab_size
        )
        draft_ids = select_draft_vocab(counts, draft_vocab)
        if config.init_head is None:
            head.set_vocab_map(draft_ids)
            with torch.no_grad():  # start the draft lm_head from the target's rows of the draft tokens
                head.lm_head.weight.copy_(lm_head_weight[draft_ids.to(device)].cpu())
        else:
            head = with_draft_vocab(head, draft_ids)
    head.attach_target_embedding(embed_weight)
    if tau_fn is None and main:
        tau_fn = _default_tau_fn(target, config)  # keeps the target for the final τ evaluation only
    del target  # features are cached: only the frozen embedding and lm_head are needed from here on
    module = RecipeModule(head, config.recipe, lm_head_weight, config.model_dump())
    module.to(device)

    # ---- schedule
    world, rank = accelerator.num_processes, accelerator.process_index
    batches_per_epoch = math.ceil(len(train_store) / config.batch_size)
    if batches_per_epoch < world:
        raise ValueError(f"{batches_per_epoch} batches per epoch cannot feed {world} processes")
    steps_per_epoch = batches_per_epoch // world
    total_steps = steps_per_epoch * config.epochs
    warmup = config.warmup_steps if config.warmup_steps is not None else min(2000, total_steps // 20)
    optimizer = torch.optim.AdamW(
        [p for p in head.parameters() if p.requires_grad],
        lr=config.lr,
        betas=config.betas,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup, total_steps))
    module, optimizer = accelerator.prepare(module, optimizer)
    unwrapped: RecipeModule = accelerator.unwrap_model(module)

    # ---- resume
    step = 0
    checkpoints = _checkpoints(out) if config.resume else []
    if checkpoints:
        state = _load_checkpoint(checkpoints[-1])
        unwrapped.head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = int(state["step"])
        _set_rng_state(state["rng"])
    log_path = out / "log.jsonl"
    if main:
        kept = []
        if step and log_path.is_file():
            kept = [line for line in log_path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        log_path.write_text("".join(line + "\n" for line in kept))
    wall_before = float(json.loads(kept[-1]).get("wall_s", 0.0)) if main and kept else 0.0
    start_time = time.perf_counter()

    def evaluate() -> dict[str, Any]:
        head = unwrapped.head
        was_training = head.training
        head.eval()
        result = evaluate_heldout(
            head,
            heldout_store,
            unwrapped.lm_head_weight,
            depth=config.eval_depth,
            max_sequences=config.eval_max_sequences,
            tau_fn=tau_fn,
        )
        head.train(was_training)
        return {"step": step, "heldout_sequences": len(heldout_store), **result.to_dict()}

    def save_checkpoint() -> None:
        if not main:
            return
        folder = out / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "head": unwrapped.head.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": step,
            "rng": _rng_state(),
            "config": config.model_dump(mode="json"),
        }
        path = folder / f"step_{step:08d}.pt"
        torch.save(state, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
        for old in _checkpoints(out)[: -config.keep_checkpoints]:
            old.unlink()

    # ---- loop
    stop = total_steps if config.max_steps is None else min(total_steps, config.max_steps)
    order_cache: dict[int, torch.Tensor] = {}
    module.train()
    if main and step == 0 and 0 in config.eval_steps:  # the starting point (an init_head's own score)
        with open(out / "curve.jsonl", "w") as f:
            f.write(json.dumps({**evaluate(), "trained_tokens": 0}) + "\n")
    show = main and config.progress
    bar = tqdm(total=stop, initial=step, unit="step", desc=f"train {config.recipe}", disable=not show)
    log_file = open(log_path, "a") if main else None  # noqa: SIM115 (kept open across the loop)
    try:
        while step < stop:
            epoch, index = divmod(step, steps_per_epoch)
            if epoch not in order_cache:
                order_cache.clear()
                order_cache[epoch] = torch.randperm(
                    len(train_store), generator=torch.Generator().manual_seed(_derived_seed(config.seed, epoch))
                )
            order = order_cache[epoch]
            b = index * world + rank
            items = [train_store[int(i)] for i in order[b * config.batch_size : (b + 1) * config.batch_size]]
            batch = {k: v.to(device) for k, v in collate(items).items()}
            generator = torch.Generator(device=device).manual_seed(_derived_seed(config.seed, step, rank))
            with accelerator.autocast():
                loss, metrics = module(batch, generator)
            accelerator.backward(loss)
            if config.grad_clip_value is not None:
                accelerator.clip_grad_value_(module.parameters(), config.grad_clip_value)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if log_file is not None:
                record = {"step": step, "epoch": epoch, "lr": scheduler.get_last_lr()[0], "loss": float(loss.detach())}
                record["wall_s"] = round(wall_before + time.perf_counter() - start_time, 3)
                record.update({k: float(v) for k, v in metrics.items()})
                log_file.write(json.dumps(record) + "\n")
                log_file.flush()
                bar.update(1)
                if step % config.log_every == 0:
                    bar.set_postfix(loss=f"{record['loss']:.4f}", acc=f"{record.get('acc_0', 0.0):.3f}")
            if step % config.save_every == 0 or step == stop:
                save_checkpoint()
            if main and step in config.eval_steps and step < stop:
                point = evaluate()
                point["trained_tokens"] = trained_tokens(read_log(out))
                with open(out / "curve.jsonl", "a") as f:
                    f.write(json.dumps(point) + "\n")
    finally:
        bar.close()
        if log_file is not None:
            log_file.close()
    accelerator.wait_for_everyone()

    # ---- save and evaluate
    head_dir = out / "head"
    if main:
        unwrapped.head.eval()
        save_eagle_head(unwrapped.head, head_dir)
        report = evaluate()
        report["trained_tokens"] = trained_tokens(read_log(out))
        (out / "eval.json").write_text(json.dumps(report, indent=1))
    accelerator.wait_for_everyone()
    return head_dir


def _plus(limit: int | None, skip: int) -> int | None:
    return None if limit is None else limit + skip


def _window(data: TokenDataset, skip: int, limit: int | None) -> TokenDataset:
    """Sequences ``skip … skip + limit`` of ``data``; refuses a skip that leaves nothing to train on."""
    if skip >= len(data):
        raise ValueError(f"skip_sequences={skip} leaves none of the {len(data)} training sequences")
    return TokenDataset(data.examples[skip : _plus(limit, skip)])


class _Prefix(Sequence[dict[str, torch.Tensor]]):
    """The first ``n`` items of a feature store."""

    def __init__(self, store: FeatureStore, n: int) -> None:
        self.store, self.n = store, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.store[i]


def trained_tokens(records: Sequence[dict[str, Any]]) -> int:
    """Scored draft slots over ``log.jsonl`` records (sum of the per-step ``tokens``; epochs count again)."""
    return int(sum(r.get("tokens", 0) for r in records))


def curve_points(out: str | Path) -> list[dict[str, Any]]:
    """The run's mid-run evaluations (``curve.jsonl``) followed by its final one (``eval.json``), when present."""
    out = Path(out)
    curve = out / "curve.jsonl"
    points = [json.loads(line) for line in curve.read_text().splitlines() if line] if curve.is_file() else []
    if (out / "eval.json").is_file():
        points.append(json.loads((out / "eval.json").read_text()))
    return points


def read_log(out: str | Path) -> list[dict[str, Any]]:
    """The ``log.jsonl`` records of a run folder."""
    path = Path(out) / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]

"""Training loop: data → cached target features → recipe loss → AdamW → resumable checkpoints → head + eval.

Single process on a CPU (``specdec train …`` or :func:`train`), or several GPUs with
``accelerate launch -m specdec.train.cli eagle1 --out DIR …``: the recipe runs inside one ``nn.Module`` forward so
DDP sees a single forward per step, each process takes every ``world``-th batch, and only the main process extracts
features, writes the run folder (:mod:`specdec.train.run_folder`), saves the head and evaluates.

:func:`train` reads top to bottom:

1. :func:`start_run`: the run folder, its config and the lineage of ``init_head``;
2. :func:`~specdec.train.inputs.load_data` and :func:`~specdec.train.inputs.cache_features`: ShareGPT or
   self-distilled sequences → cached target features (:mod:`specdec.train.inputs`);
3. :func:`~specdec.train.inputs.open_stores`, then :func:`~specdec.train.heads.make_head` and a
   :class:`RecipeModule` around it;
4. :func:`prepare_loop`: AdamW, the schedule, and the state of the newest checkpoint (:mod:`specdec.train.state`);
5. :func:`run_steps`: the optimizer steps (:func:`take_step`), their log, checkpoints and mid-run evaluations;
6. :func:`finish`: the head in the official format and the final held-out evaluation.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn
from tqdm.auto import tqdm

from specdec.checkpoints import save_eagle_head
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.errors import SpecdecError
from specdec.train.card import head_facts
from specdec.train.config import TrainConfig
from specdec.train.data import TokenDataset
from specdec.train.evaluate import evaluate_heldout
from specdec.train.features import FeatureStore, collate
from specdec.train.heads import check_init_head, make_head
from specdec.train.inputs import Rows, cache_features, feature_spec, load_data, load_target, open_stores
from specdec.train.recipes import RECIPES
from specdec.train.run_folder import (
    HEAD,
    LOG,
    RunFolderError,
    append_curve,
    features_dir,
    prepare_run,
    read_log,
    read_parent_facts,
    start_log,
    trained_tokens,
    write_config,
    write_eval,
    write_parent_facts,
)
from specdec.train.state import derived_seed, resume, save_checkpoint, seed_all

__all__ = [
    "Loop",
    "RecipeModule",
    "TrainingDivergedError",
    "batch_at",
    "evaluate",
    "finish",
    "lr_lambda",
    "prepare_loop",
    "run_steps",
    "start_run",
    "take_step",
    "train",
]


class TrainingDivergedError(SpecdecError, FloatingPointError):
    """The loss, or the trained head's weights, stopped being finite: the run diverged and no head is saved."""


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
    folder when ``config.run.extract_only``.

    Multi-GPU: only the main process extracts features while the others wait at a barrier, which can time out on
    long extractions; run once with ``extract_only`` (``--extract-only``) first, then ``accelerate launch``.

    Args:
        target: an HF causal LM to use instead of loading ``config.target`` (with ``tokenizer`` when the data must be
            built from ShareGPT).
        train_data, heldout_data: :class:`~specdec.train.data.TokenDataset` to use instead of ShareGPT (e.g.
            self-distilled data); ``heldout_data`` may be empty.
        tau_fn: optional ``(head, heldout_store) -> τ`` hook measuring dynamic-tree τ (see
            :mod:`specdec.train.evaluate`); default :func:`specdec.train.tau.make_tau_fn` on
            ``eval.eval_tau_prompts`` held-out prompts.
    """
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=config.optim.mixed_precision)
    device, main, out = accelerator.device, accelerator.is_main_process, Path(config.out)
    seed_all(config.optim.seed)
    if main:
        start_run(out, config)
    if target is None:
        target, tokenizer = load_target(config.target, device)
    else:
        target = target.to(device).eval()
    spec = feature_spec(config, int(target.config.num_hidden_layers))
    folder = features_dir(out, config)
    if main:
        check_init_head(config.head, config.recipe, target, spec.layers)  # before the long feature extraction
        train_data, heldout_data = load_data(config, tokenizer, train_data, heldout_data, target)
        cache_features(config, target, train_data, heldout_data, spec, folder)
    accelerator.wait_for_everyone()
    if config.run.extract_only:
        return folder
    train_rows, heldout_rows = open_stores(folder, spec, config.data.train_sequences)

    lm_head_weight = target.get_output_embeddings().weight.detach().to(device, torch.float32).clone()
    torch.manual_seed(config.optim.seed)
    head = make_head(config.head, config.recipe, target, spec.layers, train_rows, lm_head_weight)
    if tau_fn is None and main and config.eval.eval_tau_prompts > 0:
        from specdec.train.tau import make_tau_fn

        tau_fn = make_tau_fn(target, num_prompts=config.eval.eval_tau_prompts)  # keeps the target for τ only
    del target  # features are cached: only the frozen embedding and lm_head are needed from here on
    module = RecipeModule(head, config.recipe, lm_head_weight, config.loss_options()).to(device)

    loop = prepare_loop(config, accelerator, module, train_rows, heldout_rows, tau_fn)
    run_steps(loop)
    return finish(loop)


def start_run(out: Path, config: TrainConfig) -> None:
    """Create the run folder and write its config; keep what ``init_head`` was trained on, once (a resumed run keeps
    the copy made at its start: the parent folder may have been shipped over, or its run deleted, since).

    A run that resumes must have the settings it was started with; one that starts over first removes the earlier
    run's checkpoints, log, evaluations and head (:func:`~specdec.train.run_folder.prepare_run`).

    Raises:
        RunFolderError: a resume with other settings, or a damaged run folder.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file where the folder (or one above it) should be, or no permission
        problem = err.strerror or err
        raise RunFolderError(f"cannot create the run folder {out} ({problem}); choose another --out") from err
    prepare_run(out, config)
    write_config(out, config)
    parent = config.head.init_head
    if parent is not None and read_parent_facts(out) is None:
        facts = head_facts(parent)
        if facts is not None:
            write_parent_facts(out, facts)


# ------------------------------------------------------------------------------------------------ the recipe step


class RecipeModule(nn.Module):
    """The head plus its frozen target pieces; ``forward(batch, generator) -> (loss, metrics)`` is one recipe step.

    The target's lm_head weight ``[V, H]`` is a plain tensor attribute, created on the training device: not a
    parameter or buffer, so it is never saved, optimised, or broadcast by DDP every step. The target embedding is
    attached to the head the same way (shared, frozen).

    Args:
        options: the loss's keyword arguments (:meth:`~specdec.train.config.TrainConfig.loss_options`).
    """

    def __init__(
        self, head: Eagle1Head | Eagle3Head, recipe: str, lm_head_weight: torch.Tensor, options: dict[str, Any]
    ) -> None:
        super().__init__()
        self.head = head
        self.recipe = recipe
        self.lm_head_weight = lm_head_weight.detach()
        self.options = dict(options)

    def forward(
        self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return RECIPES[self.recipe](self.head, batch, self.lm_head_weight, generator, **self.options)


def lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warmup over ``warmup`` steps, then linear decay to 0 at ``total`` (the reference schedule)."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if total <= warmup:
            return 1.0
        return max(0.0, (total - step) / (total - warmup))

    return f


@dataclass
class Loop:
    """What the optimizer steps of one process share.

    Attributes:
        module: the :class:`RecipeModule` as ``accelerate`` prepared it (DDP-wrapped on several GPUs).
        recipe: the same module unwrapped (its ``head`` is what is saved and evaluated).
        steps_per_epoch: optimizer steps per epoch and process (``batches_per_epoch // world``).
        stop: the last step (``max_steps`` or the end of the last epoch).
        step: optimizer steps done (a resumed run starts at its checkpoint's).
        order: ``(epoch, permutation of the training rows)``, cached by :func:`batch_at`.
    """

    config: TrainConfig
    accelerator: Any
    module: nn.Module
    recipe: RecipeModule
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    train_rows: Rows
    heldout_rows: FeatureStore
    tau_fn: Callable[[Any, Any], float] | None
    steps_per_epoch: int
    stop: int
    step: int = 0
    order: tuple[int, torch.Tensor] | None = None

    @property
    def out(self) -> Path:
        return Path(self.config.out)

    @property
    def main(self) -> bool:
        return bool(self.accelerator.is_main_process)


def prepare_loop(
    config: TrainConfig,
    accelerator: Any,
    module: RecipeModule,
    train_rows: Rows,
    heldout_rows: FeatureStore,
    tau_fn: Callable[[Any, Any], float] | None,
) -> Loop:
    """AdamW over the head's trainable weights, the warmup-then-decay schedule over every epoch, and the state of the
    newest checkpoint when ``run.resume``."""
    opt = config.optim
    world = accelerator.num_processes
    batches_per_epoch = math.ceil(len(train_rows) / opt.batch_size)
    if batches_per_epoch < world:
        raise ValueError(f"{batches_per_epoch} batches per epoch cannot feed {world} processes")
    steps_per_epoch = batches_per_epoch // world
    total = steps_per_epoch * opt.epochs
    warmup = opt.warmup_steps if opt.warmup_steps is not None else min(2000, total // 20)
    trainable = [p for p in module.head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup, total))
    prepared, optimizer = accelerator.prepare(module, optimizer)
    unwrapped: RecipeModule = accelerator.unwrap_model(prepared)
    step = resume(config.out, unwrapped.head, optimizer, scheduler) if config.run.resume else 0
    stop = total if opt.max_steps is None else min(total, opt.max_steps)
    return Loop(
        config=config,
        accelerator=accelerator,
        module=prepared,
        recipe=unwrapped,
        optimizer=optimizer,
        scheduler=scheduler,
        train_rows=train_rows,
        heldout_rows=heldout_rows,
        tau_fn=tau_fn,
        steps_per_epoch=steps_per_epoch,
        stop=stop,
        step=step,
    )


# ------------------------------------------------------------------------------------------------ the steps


def batch_at(loop: Loop, step: int) -> dict[str, torch.Tensor]:
    """The batch of global ``step`` on this process: epoch ``e``'s rows in an order seeded by ``(seed, e)``, every
    ``world``-th batch of it."""
    epoch, index = divmod(step, loop.steps_per_epoch)
    if loop.order is None or loop.order[0] != epoch:
        generator = torch.Generator().manual_seed(derived_seed(loop.config.optim.seed, epoch))
        loop.order = (epoch, torch.randperm(len(loop.train_rows), generator=generator))
    size = loop.config.optim.batch_size
    b = index * loop.accelerator.num_processes + loop.accelerator.process_index
    rows = [loop.train_rows[int(i)] for i in loop.order[1][b * size : (b + 1) * size]]
    return {k: v.to(loop.accelerator.device) for k, v in collate(rows).items()}


def take_step(loop: Loop) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One optimizer step at ``loop.step`` (which it advances); returns the step's loss and recipe metrics.

    The feature noise of step ``s`` on process ``r`` comes from a generator seeded by ``(seed, s, r)``."""
    accelerator, seed = loop.accelerator, loop.config.optim.seed
    batch = batch_at(loop, loop.step)
    generator = torch.Generator(device=accelerator.device).manual_seed(
        derived_seed(seed, loop.step, accelerator.process_index)
    )
    with accelerator.autocast():
        loss, metrics = loop.module(batch, generator)
    _refuse_divergence(loop, loss)
    accelerator.backward(loss)
    if loop.config.optim.grad_clip_value is not None:
        accelerator.clip_grad_value_(loop.module.parameters(), loop.config.optim.grad_clip_value)
    loop.optimizer.step()
    loop.scheduler.step()
    loop.optimizer.zero_grad(set_to_none=True)
    loop.step += 1
    return loss, metrics


def _refuse_divergence(loop: Loop, loss: torch.Tensor) -> None:
    """Stop before a non-finite loss of any process reaches the weights (every process stops at the same step).

    Raises:
        TrainingDivergedError: the loss of step ``loop.step + 1`` is not finite on some process.
    """
    finite = torch.isfinite(loss.detach()).reshape(1)
    if loop.accelerator.num_processes > 1:
        finite = loop.accelerator.gather(finite)
    if not bool(finite.all()):
        raise _diverged(loop, f"the loss of step {loop.step + 1} is not finite ({float(loss.detach())} here)")


def _diverged(loop: Loop, problem: str) -> TrainingDivergedError:
    return TrainingDivergedError(
        f"training diverged: {problem}, so no head was saved; train again with a lower lr (this run's is "
        f"{loop.config.optim.lr:g}) and --no-resume (resume=False)"
    )


def evaluate(loop: Loop) -> dict[str, Any]:
    """Held-out greedy-chain acceptance (and τ with ``tau_fn``) of the head as it is now (main process)."""
    head = loop.recipe.head
    was_training = head.training
    head.eval()
    result = evaluate_heldout(
        head,
        loop.heldout_rows,
        loop.recipe.lm_head_weight,
        depth=loop.config.eval.eval_depth,
        max_sequences=loop.config.eval.eval_max_sequences,
        tau_fn=loop.tau_fn,
    )
    head.train(was_training)
    return {"step": loop.step, "heldout_sequences": len(loop.heldout_rows), **result.to_dict()}


def run_steps(loop: Loop) -> None:
    """Take the optimizer steps up to ``loop.stop``: log each (main process), checkpoint every ``save_every`` and at
    the end, and evaluate after each of ``eval_steps`` (``0``: the starting point, e.g. an ``init_head``'s score)."""
    config, out, main = loop.config, loop.out, loop.main
    wall_before = start_log(out, loop.step) if main else 0.0
    started = time.perf_counter()
    loop.module.train()
    if main and loop.step == 0 and 0 in config.eval.eval_steps:
        append_curve(out, {**evaluate(loop), "trained_tokens": 0}, fresh=True)
    show = main and config.run.progress
    bar = tqdm(total=loop.stop, initial=loop.step, unit="step", desc=f"train {config.recipe}", disable=not show)
    log = open(out / LOG, "a") if main else None  # noqa: SIM115 (kept open across the loop)
    try:
        while loop.step < loop.stop:
            epoch = loop.step // loop.steps_per_epoch
            loss, metrics = take_step(loop)
            if log is not None:
                wall = wall_before + time.perf_counter() - started
                _log_step(log, bar, loop, epoch, float(loss.detach()), metrics, wall)
            if main and (loop.step % config.run.save_every == 0 or loop.step == loop.stop):
                head = loop.recipe.head
                save_checkpoint(out, loop.step, head, loop.optimizer, loop.scheduler, config.run.keep_checkpoints)
            if main and loop.step in config.eval.eval_steps and loop.step < loop.stop:
                append_curve(out, {**evaluate(loop), "trained_tokens": trained_tokens(read_log(out))})
    finally:
        bar.close()
        if log is not None:
            log.close()
    loop.accelerator.wait_for_everyone()


def _log_step(
    log: IO[str], bar: Any, loop: Loop, epoch: int, loss: float, metrics: dict[str, torch.Tensor], wall: float
) -> None:
    """One ``log.jsonl`` record (run_folder's format) and the progress bar."""
    record = {"step": loop.step, "epoch": epoch, "lr": loop.scheduler.get_last_lr()[0], "loss": loss}
    record["wall_s"] = round(wall, 3)
    record.update({k: float(v) for k, v in metrics.items()})
    log.write(json.dumps(record) + "\n")
    log.flush()
    bar.update(1)
    if loop.step % loop.config.run.log_every == 0:
        bar.set_postfix(loss=f"{loss:.4f}", acc=f"{record.get('acc_0', 0.0):.3f}")


def finish(loop: Loop) -> Path:
    """Save the head (official format) and its final held-out evaluation; returns the head folder.

    Raises:
        TrainingDivergedError: some of the head's weights are not finite (nothing is saved).
    """
    broken = [name for name, p in loop.recipe.head.named_parameters() if not bool(torch.isfinite(p).all())]
    if broken:
        raise _diverged(loop, f"after step {loop.step} the head's {', '.join(broken[:3])} are not finite")
    head_dir = loop.out / HEAD
    if loop.main:
        loop.recipe.head.eval()
        save_eagle_head(loop.recipe.head, head_dir)
        write_eval(loop.out, {**evaluate(loop), "trained_tokens": trained_tokens(read_log(loop.out))})
    loop.accelerator.wait_for_everyone()
    return head_dir

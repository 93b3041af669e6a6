"""The benchmark's records: the append-only ``results.jsonl`` (what resuming skips) and the greedy check's report of
where a method's tokens first differ from vanilla's (with the target's margin there, to tell a near-tie from a bug)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from specdec.assets import Prompt
from specdec.bench.variants import HF_METHODS, Variant, tree_label
from specdec.calls import GenerationMetrics, StopCondition
from specdec.sampling import SamplingParams

__all__ = [
    "NEAR_TIE",
    "NEAR_TIE_ULPS",
    "ResultsFile",
    "compile_lines",
    "first_difference",
    "near_tie_threshold",
    "result_row",
    "row_key",
    "status_row",
]

#: Top-2 logit margin under which a greedy divergence is attributed to floating-point rounding (float32 logits).
NEAR_TIE = 1e-2
#: For logits of a low-precision dtype (bfloat16: 8 bits of mantissa), a near-tie is a margin of at most this many
#: units in the last place of the top logit: one rounding step in any layer can move a logit by about one.
NEAR_TIE_ULPS = 2


def near_tie_threshold(top: float, dtype: torch.dtype) -> float:
    """The margin under which a divergence at a top logit of ``top`` in ``dtype`` counts as a near-tie."""
    if dtype in (torch.float32, torch.float64):
        return NEAR_TIE
    ulp = torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(abs(top) or 1.0))
    return max(NEAR_TIE, NEAR_TIE_ULPS * ulp * (1 + 1e-6))  # a margin of exactly NEAR_TIE_ULPS ulps is below it


def row_key(row: dict) -> tuple:
    """The identity of a measurement: (prompt, row label, temperature, max_new_tokens)."""
    return (row["prompt_id"], row["method"], float(row["temperature"]), int(row["max_new_tokens"]))


class ResultsFile:
    """``results.jsonl``: append-only, one flushed line per measurement."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_file() and path.stat().st_size:
            with path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                cut = f.read(1) != b"\n"
            if cut:  # an interrupted write left half a line: end it, so the next row starts on its own line
                with path.open("a") as f:
                    f.write("\n")

    def rows(self) -> list[dict]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by an interrupt
        return out

    def done(self) -> set[tuple]:
        return {row_key(r) for r in self.rows() if r.get("status") == "ok"}

    def append(self, row: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------- greedy checks
@torch.no_grad()
def first_difference(model, prompt: torch.Tensor, reference: list[int], tokens: list[int]) -> dict | None:
    """Where ``tokens`` first departs from the vanilla greedy ``reference``, and how close the call was there.

    Returns None when equal; else ``position``, ``vanilla_token``, ``method_token``, ``top2_margin`` (vanilla
    top-2 logit margin after ``prompt + reference[:position]``, from one fresh forward), ``logit_gap`` (vanilla
    token's logit minus the method token's) and ``near_tie`` (``top2_margin`` under :func:`near_tie_threshold`:
    :data:`NEAR_TIE` for float32 logits, :data:`NEAR_TIE_ULPS` units in the last place of bfloat16 ones).
    """
    if reference == tokens:
        return None
    n = min(len(reference), len(tokens))
    i = next((k for k in range(n) if reference[k] != tokens[k]), n)
    out = {"position": i, "vanilla_token": None, "method_token": None, "top2_margin": None, "logit_gap": None}
    if i == n:  # one is a prefix of the other (a stop condition differed)
        out["near_tie"] = False
        return out
    device = model.get_output_embeddings().weight.device
    context = torch.cat([prompt.cpu(), torch.tensor(reference[:i], dtype=torch.long)]).to(device)
    raw = model(context[None]).logits[0, -1]
    logits = raw.float()
    top2 = logits.topk(2).values
    margin = float(top2[0] - top2[1])
    out.update(
        vanilla_token=reference[i],
        method_token=tokens[i],
        top2_margin=margin,
        logit_gap=float(logits[reference[i]] - logits[tokens[i]]),
        near_tie=margin < near_tie_threshold(float(top2[0]), raw.dtype),
    )
    return out


def result_row(
    variant: Variant, prompt: Prompt, ids: torch.Tensor, sampling: SamplingParams, stop: StopCondition, result
) -> dict:
    """The ``results.jsonl`` row of one timed generation (``result``: its :class:`~specdec.calls.GenerationResult`)."""
    m: GenerationMetrics = result.metrics
    speculative = variant.method not in HF_METHODS
    phases = {"prefill": m.time_prefill, **m.phase_seconds()}
    return {
        "status": "ok",
        "prompt_id": prompt.id,
        "family": prompt.family,
        "method": variant.name,
        "base_method": variant.method,
        "tree_size": tree_label(variant, sampling),
        "temperature": float(sampling.temperature),
        "max_new_tokens": stop.max_new_tokens,
        "seed": sampling.seed,
        "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k or 0),
        "prompt_tokens": int(ids.shape[0]),
        "new_tokens": m.new_tokens,
        "tokens": list(result.tokens),
        "finish_reason": result.finish_reason,
        "time_total": m.time_total,
        "time_prefill": m.time_prefill,
        "tokens_per_second": m.tokens_per_second,
        "tau": m.tau if speculative and m.cycles else None,
        "cycles": m.cycles if speculative else None,
        "accept_lengths": m.accept_lengths if speculative else None,
        "tree_depths": m.tree_depths if speculative else None,
        "tree_sizes": m.tree_sizes if speculative else None,
        "acceptance_per_depth": m.acceptance_per_depth() if speculative else None,
        "time_phases": phases if speculative else None,
        "time_split": m.time_split() if speculative else None,
        "greedy_equal": None,
        "first_diff": None,
        "compiles": None,  # graphs compiled during this generation (set by the runner)
    }


def compile_lines(rows: list[dict], runs: list[dict]) -> list[str]:
    """The report's lines on graphs compiled inside timed generations (every shape should be compiled before timing:
    a compile inside a generation puts its seconds into that generation's time). Said when a run had static shapes
    or any row compiled; nothing for eager runs, which compile nothing."""
    counted = [r for r in rows if r.get("status") == "ok" and r.get("compiles") is not None]
    hit = [r for r in counted if r["compiles"]]
    if not hit and not any("static" in str(run.get("backend", "")) for run in runs):
        return []
    if not hit:
        return ["", f"Graphs compiled during timed generations: none in {len(counted)} generations."]
    where: dict[str, int] = {}
    for r in hit:
        key = f"{r['method']} (T={r['temperature']:g}) on {r['prompt_id']}"
        where[key] = where.get(key, 0) + r["compiles"]
    return [
        "",
        f"**Graphs compiled during timed generations: {sum(where.values())}, in {len(hit)} of {len(counted)} "
        "generations** (their compile time is inside those generations' times): "
        + ", ".join(f"{k}: {n}" for k, n in where.items()),
    ]


def status_row(variant: Variant, temperature: float, max_new_tokens: int, status: str, reason: str) -> dict:
    """The row of a variant not measured at ``temperature``: ``status`` ``"skipped"`` or ``"error"``, and why."""
    return {
        "status": status,
        "prompt_id": None,
        "method": variant.name,
        "base_method": variant.method,
        "tree_size": tree_label(variant, SamplingParams(temperature=temperature)),
        "temperature": float(temperature),
        "max_new_tokens": max_new_tokens,
        "reason": reason,
    }

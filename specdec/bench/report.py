"""Aggregate ``results.jsonl`` into ``results.md`` and PNG plots.

Per row label and temperature, over the prompts it ran on:

* ``tau``: pooled tokens per target forward, ``sum(accepted + 1) / cycles`` over every cycle of every prompt;
* ``tok/s``: summed new tokens / summed wall time (prefill included);
* ``x vanilla`` / ``x hf-generate``: that rate divided by the baseline's rate *over the same prompts*
  (``sum tokens / sum time`` on both sides), so an EOS that ends one prompt early weighs the same on both;
* ``greedy = vanilla`` (T=0): outputs identical to vanilla greedy token for token; divergences whose vanilla
  top-2 logit margin is below the runner's ``NEAR_TIE`` are counted as near-ties;
* acceptance per depth ``n-alpha`` pooled over cycles, mean tree size, the split of decode time, and the cost of
  a cycle (draft, target and verify milliseconds per target forward, pooled over every cycle);
* the spread over prompts: each prompt's own ratio to the baseline (median, min–max), the baseline being vanilla,
  and for vanilla itself HF ``generate`` where it ran. A generation whose ratio is more than :data:`OUTLIER_FACTOR`
  times away from its row's median is flagged in the report (a stall in one of the two runs: one such prompt once
  made HF ``generate`` read 2.39× our vanilla on the pooled ratio). It takes 3 prompts or more (with two, the median
  is their mean, within 2× of both); a stall of a baseline's run is flagged in every row measured against it.

Where rows carry a task ``family`` (Spec-Bench), a per-family table in the leaderboard's layout follows: per row label
and temperature, one column per family and ``overall``, each cell the same ``x vanilla`` ratio (and ``x hf-generate``)
pooled over that family's prompts (``overall``: over every prompt, as in the main table), with τ.

Plots (:mod:`specdec.bench.plots`, each titled with the hardware and the prompt count): ``speedup.png`` (bars vs
vanilla), ``acceptance_per_depth.png``, and from a tree-size sweep ``tau_vs_tree_size.png`` and
``tokps_vs_tree_size.png`` (the adaptive row drawn at its mean tree size); with families, ``family_speedup_T{T}.png``
per temperature (bars vs vanilla per family).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specdec.assets import SPEC_BENCH_FAMILIES
from specdec.bench.records import compile_lines

__all__ = [
    "OVERALL",
    "Summary",
    "aggregate",
    "family_prompt_counts",
    "family_summaries",
    "hardware_label",
    "load_rows",
    "load_runs",
    "markdown",
    "pooled_acceptance",
    "row_label",
    "sweep_table",
]

PHASES = ("draft", "target", "verify", "bookkeeping")
#: A prompt whose ratio to the baseline is this many times above or below its row's median ratio is flagged.
OUTLIER_FACTOR = 3.0
#: The column of the per-family table pooled over every prompt.
OVERALL = "overall"


@dataclass
class Summary:
    """One table row: a row label (method) at one temperature."""

    method: str
    base_method: str
    tree_size: int | str | None
    temperature: float
    prompts: int
    tokens: int
    seconds: float
    tokens_per_second: float
    tau: float | None
    acceptance_per_depth: list[float] | None
    mean_tree_size: float | None
    speedup_vs_vanilla: float | None
    speedup_vs_hf: float | None
    greedy_equal: int | None
    greedy_near_ties: int | None
    time_split: dict[str, float] | None
    prompt_ids: list[str] = field(default_factory=list, repr=False)
    cycle_ms: dict[str, float] | None = None
    prompt_ratios: dict[str, float] = field(default_factory=dict, repr=False)
    ratio_baseline: str | None = None

    @property
    def ratio_spread(self) -> tuple[float, float, float] | None:
        """``(median, min, max)`` of the per-prompt ratios to :attr:`ratio_baseline` (None without a baseline)."""
        if not self.prompt_ratios:
            return None
        values = sorted(self.prompt_ratios.values())
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        return median, values[0], values[-1]

    @property
    def outliers(self) -> dict[str, float]:
        """Prompts whose ratio is more than :data:`OUTLIER_FACTOR` times away from the median ratio."""
        spread = self.ratio_spread
        if spread is None or spread[0] <= 0:
            return {}
        median = spread[0]
        far = {p: r for p, r in self.prompt_ratios.items() if max(r / median, median / max(r, 1e-12)) > OUTLIER_FACTOR}
        return dict(sorted(far.items()))


def _read_jsonl(path: Path) -> list[dict]:
    """The objects of a jsonl file (none if it is missing; lines cut short by an interrupt are ignored)."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def load_runs(out_dir: str | Path) -> list[dict]:
    """The run records of ``out_dir`` (``runs.jsonl``: command, hardware, date of each run)."""
    return _read_jsonl(Path(out_dir) / "runs.jsonl")


def load_rows(out_dir: str | Path) -> list[dict]:
    """Rows of ``out_dir/results.jsonl`` (lines cut short by an interrupt are ignored)."""
    return _read_jsonl(Path(out_dir) / "results.jsonl")


def _latest_ok(rows: Sequence[dict]) -> dict[tuple, dict]:
    """One row per (method, T, prompt): the latest ``ok`` measurement."""
    out = {}
    for r in rows:
        if r.get("status") == "ok":
            out[(r["method"], float(r["temperature"]), r["prompt_id"])] = r
    return out


def pooled_acceptance(rows: Sequence[dict]) -> list[float]:
    """n-alpha over all cycles of ``rows``: P(depth-n draft accepted | depths < n accepted, tree reaches n)."""
    reached: dict[int, int] = defaultdict(int)
    accepted: dict[int, int] = defaultdict(int)
    for r in rows:
        for a, d in zip(r.get("accept_lengths") or [], r.get("tree_depths") or [], strict=True):
            for n in range(1, d + 1):
                if a >= n - 1:
                    reached[n] += 1
                    accepted[n] += a >= n
    return [accepted[n] / reached[n] for n in sorted(reached) if reached[n]]


def _rate(rows: Sequence[dict]) -> float:
    seconds = sum(r["time_total"] for r in rows)
    return sum(r["new_tokens"] for r in rows) / seconds if seconds > 0 else 0.0


def _speedup(mine: dict[str, dict], base: dict[str, dict] | None) -> float | None:
    if not base:
        return None
    common = [p for p in mine if p in base]
    if not common:
        return None
    b = _rate([base[p] for p in common])
    return _rate([mine[p] for p in common]) / b if b > 0 else None


def _prompt_ratios(mine: dict[str, dict], base: dict[str, dict] | None) -> dict[str, float]:
    """Each common prompt's own tokens/s ratio to ``base``'s."""
    if not base:
        return {}
    out = {}
    for p, r in mine.items():
        b = base.get(p)
        if b is not None and _rate([b]) > 0:
            out[p] = _rate([r]) / _rate([b])
    return out


def _cycle_ms(rs: Sequence[dict], phases: dict[str, float], cycles: int) -> dict[str, float] | None:
    """Milliseconds per cycle of each phase, pooled over every cycle of ``rs``."""
    if not cycles or not any(r.get("time_phases") for r in rs):
        return None
    return {k: 1e3 * phases[k] / cycles for k in PHASES}


def aggregate(rows: Sequence[dict]) -> list[Summary]:
    """One :class:`Summary` per (row label, temperature), in first-seen order."""
    latest = _latest_ok(rows)
    groups: dict[tuple[str, float], dict[str, dict]] = {}
    for (method, t, prompt), r in latest.items():
        groups.setdefault((method, t), {})[prompt] = r
    out = []
    for (method, t), by_prompt in groups.items():
        rs = list(by_prompt.values())
        first = rs[0]
        cycles = sum(r.get("cycles") or 0 for r in rs)
        speculative = first.get("tau") is not None or first.get("cycles") is not None
        tau = sum(sum(a + 1 for a in r["accept_lengths"]) for r in rs) / cycles if speculative and cycles else None
        sizes = [s for r in rs for s in (r.get("tree_sizes") or [])]
        phases = defaultdict(float)
        for r in rs:
            for k, v in (r.get("time_phases") or {}).items():
                phases[k] += v
        decode = sum(phases[k] for k in PHASES)
        split = {k: phases[k] / decode for k in PHASES} if speculative and decode > 0 else None
        baseline = "hf-generate" if method == "vanilla" else "vanilla"
        ratios = _prompt_ratios(by_prompt, groups.get((baseline, t))) if method != baseline else {}
        greedy = near = None
        if t == 0.0:
            greedy = sum(bool(r.get("greedy_equal")) for r in rs)
            near = sum(bool((r.get("first_diff") or {}).get("near_tie")) for r in rs)
        out.append(
            Summary(
                method=method,
                base_method=first.get("base_method", method),
                tree_size=first.get("tree_size"),
                temperature=t,
                prompts=len(rs),
                tokens=sum(r["new_tokens"] for r in rs),
                seconds=sum(r["time_total"] for r in rs),
                tokens_per_second=_rate(rs),
                tau=tau,
                acceptance_per_depth=pooled_acceptance(rs) if speculative else None,
                mean_tree_size=sum(sizes) / len(sizes) if sizes and speculative else None,
                speedup_vs_vanilla=_speedup(by_prompt, groups.get(("vanilla", t))),
                speedup_vs_hf=_speedup(by_prompt, groups.get(("hf-generate", t))),
                greedy_equal=greedy,
                greedy_near_ties=near,
                time_split=split,
                prompt_ids=sorted(by_prompt),
                cycle_ms=_cycle_ms(rs, phases, cycles) if speculative else None,
                prompt_ratios=ratios,
                ratio_baseline=baseline if ratios else None,
            )
        )
    return out


def _families(rows: Sequence[dict]) -> list[str]:
    """The families of ``rows``: Spec-Bench's in leaderboard order, then any others in order of appearance."""
    seen = list(dict.fromkeys(r["family"] for r in rows if r.get("family")))
    known = [f for f in SPEC_BENCH_FAMILIES if f in seen]
    return known + [f for f in seen if f not in known]


def family_summaries(rows: Sequence[dict]) -> dict[str, dict[tuple[str, float], Summary]]:
    """Per task family, then :data:`OVERALL`: the summaries by (row label, temperature), each over that family's
    prompts (``overall``: every prompt), pooled as :func:`aggregate` pools. Empty when no row carries a family."""
    ok = [r for r in rows if r.get("status") == "ok"]
    families = _families(ok)
    if not families:
        return {}
    subsets = {f: [r for r in ok if r.get("family") == f] for f in families}
    subsets[OVERALL] = ok
    return {f: {(s.method, s.temperature): s for s in aggregate(subset)} for f, subset in subsets.items()}


def family_prompt_counts(rows: Sequence[dict]) -> dict[str, int]:
    """Distinct prompts measured per family (any method, any temperature), and :data:`OVERALL`."""
    ok = [r for r in rows if r.get("status") == "ok"]
    counts = {f: len({r["prompt_id"] for r in ok if r.get("family") == f}) for f in _families(ok)}
    counts[OVERALL] = len({r["prompt_id"] for r in ok})
    return counts


def sweep_table(summaries: Sequence[Summary]) -> dict[tuple[str, float], dict]:
    """Per (swept method, T): the fixed sizes' summaries by size and the adaptive summary (if any)."""
    out: dict[tuple[str, float], dict] = {}
    for s in summaries:
        if isinstance(s.tree_size, int):
            out.setdefault((s.base_method, s.temperature), {"fixed": {}, "adaptive": None})["fixed"][s.tree_size] = s
    for s in summaries:
        if s.tree_size == "adaptive" and (s.base_method, s.temperature) in out:
            out[(s.base_method, s.temperature)]["adaptive"] = s
    return out


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def row_label(s: Summary) -> str:
    """The row label, with the tree where it is not a plain size (``adaptive``, ``sampled SHAPE``)."""
    return f"{s.method} ({s.tree_size})" if isinstance(s.tree_size, str) else s.method


def _greedy_cell(s: Summary) -> str:
    """``equal/prompts`` at T=0 with the near-ties, else a dash."""
    if s.greedy_equal is None:
        return "–"
    cell = f"{s.greedy_equal}/{s.prompts}"
    return cell + f" (+{s.greedy_near_ties} near-tie)" if s.greedy_near_ties else cell


def _family_table(
    by_family: dict[str, dict[tuple[str, float], Summary]], counts: dict[str, int], baseline: str
) -> list[str]:
    """One markdown table: a row per (row label, T) but ``baseline``'s own, a column per family and overall, each
    cell the tokens/s ratio to ``baseline`` (with τ and the greedy check when the baseline is vanilla)."""
    attr = "speedup_vs_vanilla" if baseline == "vanilla" else "speedup_vs_hf"
    with_tau = baseline == "vanilla"
    columns = list(by_family)
    titles = [f"{SPEC_BENCH_FAMILIES.get(f, f)} ({counts.get(f, 0)})" for f in columns]
    head = ["method", "T", *titles] + (["greedy = vanilla"] if with_tau else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    keys = sorted((k for k in by_family[OVERALL] if k[0] != baseline), key=lambda k: k[1])  # stable: T, then seen
    for method, t in keys:
        cells = []
        for f in columns:
            s = by_family[f].get((method, t))
            ratio = None if s is None else getattr(s, attr)
            tau = f" (τ {s.tau:.2f})" if with_tau and s is not None and s.tau is not None else ""
            cells.append(_fmt(ratio, ".2f", "×") + tau)
        overall = by_family[OVERALL][(method, t)]
        if with_tau:
            cells.append(_greedy_cell(overall))
        lines.append(f"| {row_label(overall)} | {t:g} | " + " | ".join(cells) + " |")
    return lines


def _spread_cell(s: Summary) -> str:
    """``median× (min–max)`` of the per-prompt ratios, with the baseline when it is not vanilla."""
    spread = s.ratio_spread
    if spread is None:
        return "–"
    vs = "" if s.ratio_baseline == "vanilla" else f" vs {s.ratio_baseline}"
    return f"{spread[0]:.2f}× ({spread[1]:.2f}–{spread[2]:.2f}){vs}"


def _outlier_lines(summaries: Sequence[Summary]) -> list[str]:
    """The flagged generations: a prompt whose ratio is far from its row's median (a stall in one of two runs)."""
    flagged = [(s, p, r) for s in summaries for p, r in s.outliers.items()]
    if not flagged:
        return []
    lines = [
        "",
        f"Flagged generations (a prompt's ratio more than {OUTLIER_FACTOR:g}× away from its row's median: a stall "
        "in one of the two runs is likely; the pooled ratios above include them):",
        "",
    ]
    for s, p, r in flagged:
        lines.append(
            f"- {row_label(s)} (T={s.temperature:g}), {p}: {r:.2f}× {s.ratio_baseline} against a median of "
            f"{s.ratio_spread[0]:.2f}×"
        )
    return lines


def _family_lines(rows: Sequence[dict]) -> list[str]:
    """The per-family section of the report (leaderboard layout); no lines when no row carries a family."""
    by_family = family_summaries(rows)
    if not by_family:
        return []
    counts = family_prompt_counts(rows)
    lines = [
        "",
        "Per task family (Spec-Bench leaderboard layout; each header gives the prompts measured): tokens/s × vanilla "
        "over the family's prompts, τ in brackets; overall pools every prompt, as the table above.",
        "",
        *_family_table(by_family, counts, "vanilla"),
    ]
    if any(method == "hf-generate" for method, _ in by_family[OVERALL]):
        lines += ["", "Per task family, tokens/s × HF `generate` over the same prompts:", ""]
        lines += _family_table(by_family, counts, "hf-generate")
    return lines


def markdown(rows: Sequence[dict], runs: Sequence[dict] = ()) -> str:
    """The report as markdown: header (hardware, date, command), the table, the sweep, skips and errors."""
    summaries = aggregate(rows)
    lines = ["# specdec benchmark", ""]
    for run in runs[-3:]:
        hw = run.get("hardware", {})
        lines.append(
            f"- {hw.get('date', '?')}: `{run.get('command') or '(API call)'}` on {hw.get('device', '?')}, "
            f"CPU {hw.get('cpu', '?')} ({hw.get('logical_cores', '?')} logical cores), "
            f"{hw.get('torch_threads', '?')} torch threads, torch {hw.get('torch', '?')}, "
            f"transformers {hw.get('transformers', '?')}; dataset {run.get('dataset')}, "
            f"max_new_tokens {run.get('max_new_tokens')}"
        )
    if len(runs) > 3:
        lines.append(f"- ({len(runs) - 3} earlier invocations on the same folder)")
    lines += [
        "",
        "Speedups are ratios of summed tokens / summed wall time (prefill included) over the same prompts, "
        "measured interleaved in one run. τ counts the bonus token.",
        "",
        "Per prompt: each prompt's own ratio to vanilla (for vanilla: to HF `generate`), median and min–max. "
        "A cycle's cost is pooled over every cycle (draft / target / verify ms per target forward).",
        "",
        "| method | T | prompts | τ | tok/s | × vanilla | × hf-generate | per prompt: median (min–max) "
        "| greedy = vanilla | mean tree | draft / target / verify / other | ms per cycle: draft / target / verify |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        greedy = _greedy_cell(s)
        split = " / ".join(f"{s.time_split[k]:.0%}" for k in PHASES) if s.time_split else "–"  # other = bookkeeping
        cost = " / ".join(f"{s.cycle_ms[k]:.1f}" for k in PHASES[:3]) if s.cycle_ms else "–"
        lines.append(
            f"| {row_label(s)} | {s.temperature:g} | {s.prompts} | {_fmt(s.tau)} | {s.tokens_per_second:.1f} "
            f"| {_fmt(s.speedup_vs_vanilla, '.2f', '×')} | {_fmt(s.speedup_vs_hf, '.2f', '×')} | {_spread_cell(s)} "
            f"| {greedy} | {_fmt(s.mean_tree_size, '.1f')} | {split} | {cost} |"
        )
    lines += _outlier_lines(summaries) + compile_lines(list(rows), list(runs))
    lines += _family_lines(rows)
    acc = [s for s in summaries if s.acceptance_per_depth]
    if acc:
        lines += ["", "Acceptance per depth (n-α):", ""]
        for s in acc:
            rates = ", ".join(f"{a:.2f}" for a in s.acceptance_per_depth or [])
            lines.append(f"- {s.method} (T={s.temperature:g}): {rates}")
    for (method, t), sweep in sweep_table(summaries).items():
        fixed = sweep["fixed"]
        best = max(fixed.values(), key=lambda s: s.tokens_per_second)
        lines += ["", f"Tree-size sweep, {method}, T={t:g}:", ""]
        lines += ["| tree | τ | tok/s | × vanilla |", "| --- | --- | --- | --- |"]
        for m in sorted(fixed):
            f = fixed[m]
            lines.append(f"| {m} | {_fmt(f.tau)} | {f.tokens_per_second:.1f} | {_fmt(f.speedup_vs_vanilla)} |")
        ad = sweep["adaptive"]
        if ad is not None:
            lines.append(
                f"| adaptive (mean {_fmt(ad.mean_tree_size, '.1f')}) | {_fmt(ad.tau)} | {ad.tokens_per_second:.1f} "
                f"| {_fmt(ad.speedup_vs_vanilla)} |"
            )
            ratio = ad.tokens_per_second / best.tokens_per_second if best.tokens_per_second else float("nan")
            lines += [
                "",
                f"Adaptive vs best fixed size ({best.tree_size}): {ratio:.2f}× tokens/s "
                f"({'matches or beats' if ratio >= 0.97 else 'below'}; ±3% is within run-to-run noise here).",
            ]
    skipped = {}
    for r in rows:
        if r.get("status") in ("skipped", "error"):
            skipped[(r["method"], r["status"])] = r.get("reason", "")
    ok_methods = {s.method for s in summaries}
    notes = [(m, st, why) for (m, st), why in skipped.items() if st == "error" or m not in ok_methods]
    if notes:
        lines += ["", "Not measured / errors:", ""]
        lines += [f"- {m}: {st}: {why}" for m, st, why in notes]
    return "\n".join(lines) + "\n"


def hardware_label(runs: Sequence[dict]) -> str:
    """The device of the latest recorded run: the GPU's name, or the CPU model and torch threads."""
    hw = next((r["hardware"] for r in reversed(runs) if r.get("hardware")), None)
    if hw is None:
        return "hardware not recorded"
    if hw.get("device", "cpu") != "cpu":
        return str(hw["device"])
    return f"{hw.get('cpu', '?')}, {hw.get('torch_threads', '?')} torch threads"


_hardware_label = hardware_label  # the name tests/test_spec_bench.py imports

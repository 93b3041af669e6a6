"""Aggregate ``results.jsonl`` into ``results.md`` and PNG plots.

Per row label and temperature, over the prompts it ran on:

* ``tau``: pooled tokens per target forward, ``sum(accepted + 1) / cycles`` over every cycle of every prompt;
* ``tok/s``: summed new tokens / summed wall time (prefill included);
* ``x vanilla`` / ``x hf-generate``: that rate divided by the baseline's rate *over the same prompts*
  (``sum tokens / sum time`` on both sides), so an EOS that ends one prompt early weighs the same on both;
* ``greedy = vanilla`` (T=0): outputs identical to vanilla greedy token for token; divergences whose vanilla
  top-2 logit margin is below the runner's ``NEAR_TIE`` are counted as near-ties;
* acceptance per depth ``n-alpha`` pooled over cycles, mean tree size, and the split of decode time.

Plots: ``speedup.png`` (bars vs vanilla), ``acceptance_per_depth.png``, and from a tree-size sweep
``tau_vs_tree_size.png`` and ``tokps_vs_tree_size.png`` (the adaptive row drawn at its mean tree size).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Summary", "aggregate", "load_rows", "markdown", "pooled_acceptance", "sweep_table", "write_report"]

PHASES = ("draft", "target", "verify", "bookkeeping")


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


def load_rows(out_dir: str | Path) -> list[dict]:
    """Rows of ``out_dir/results.jsonl`` (lines cut short by an interrupt are ignored)."""
    path = Path(out_dir) / "results.jsonl"
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


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
            )
        )
    return out


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
        "| method | T | prompts | τ | tok/s | × vanilla | × hf-generate | greedy = vanilla | mean tree "
        "| draft / target / verify / other |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        greedy = "–" if s.greedy_equal is None else f"{s.greedy_equal}/{s.prompts}"
        if s.greedy_near_ties:
            greedy += f" (+{s.greedy_near_ties} near-tie)"
        split = " / ".join(f"{s.time_split[k]:.0%}" for k in PHASES) if s.time_split else "–"  # other = bookkeeping
        label = f"{s.method} ({s.tree_size})" if isinstance(s.tree_size, str) else s.method
        lines.append(
            f"| {label} | {s.temperature:g} | {s.prompts} | {_fmt(s.tau)} | {s.tokens_per_second:.1f} "
            f"| {_fmt(s.speedup_vs_vanilla, '.2f', '×')} | {_fmt(s.speedup_vs_hf, '.2f', '×')} | {greedy} "
            f"| {_fmt(s.mean_tree_size, '.1f')} | {split} |"
        )
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


def _plots(summaries: Sequence[Summary], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    temps = sorted({s.temperature for s in summaries})
    methods = list(dict.fromkeys(s.method for s in summaries if s.method != "vanilla"))
    if methods:
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(methods)), 4))
        width = 0.8 / max(1, len(temps))
        for j, t in enumerate(temps):
            by = {s.method: s for s in summaries if s.temperature == t}
            ys = [(by[m].speedup_vs_vanilla or 0.0) if m in by else 0.0 for m in methods]
            ax.bar([i + j * width for i in range(len(methods))], ys, width, label=f"T={t:g}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks([i + width * (len(temps) - 1) / 2 for i in range(len(methods))], methods, rotation=30)
        ax.set_ylabel("speedup vs vanilla (tokens/s ratio)")
        ax.legend()
        fig.tight_layout()
        written.append(out / "speedup.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    acc = [s for s in summaries if s.acceptance_per_depth and "@" not in s.method]
    if acc:
        fig, ax = plt.subplots(figsize=(6, 4))
        for s in acc:
            n = range(1, len(s.acceptance_per_depth or []) + 1)
            ax.plot(list(n), s.acceptance_per_depth, marker="o", ls="-" if s.temperature == 0 else "--",
                    label=f"{s.method} T={s.temperature:g}")  # fmt: skip
        ax.set_xlabel("draft depth n")
        ax.set_ylabel("n-α (acceptance | previous accepted)")
        ax.set_ylim(0, 1)
        ax.legend()
        fig.tight_layout()
        written.append(out / "acceptance_per_depth.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    sweeps = sweep_table(summaries)
    for name, attr, label in (
        ("tau_vs_tree_size.png", "tau", "τ (tokens per target forward)"),
        ("tokps_vs_tree_size.png", "tokens_per_second", "tokens/s"),
    ):
        if not sweeps:
            break
        fig, ax = plt.subplots(figsize=(6, 4))
        for (method, t), sweep in sweeps.items():
            sizes = sorted(sweep["fixed"])
            line = ax.plot(sizes, [getattr(sweep["fixed"][m], attr) or 0 for m in sizes], marker="o",
                           label=f"{method} fixed, T={t:g}")  # fmt: skip
            ad = sweep["adaptive"]
            if ad is not None and ad.mean_tree_size is not None:
                ax.scatter([ad.mean_tree_size], [getattr(ad, attr) or 0], marker="*", s=200,
                           color=line[0].get_color(), label=f"{method} adaptive (mean size), T={t:g}")  # fmt: skip
        ax.set_xlabel("tree size (tokens, root included)")
        ax.set_ylabel(label)
        ax.legend()
        fig.tight_layout()
        written.append(out / name)
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written


def write_report(out_dir: str | Path, plots: bool = True) -> Path:
    """Write ``out_dir/results.md`` (and the PNGs); returns the markdown path."""
    out = Path(out_dir)
    rows = load_rows(out)
    runs = []
    runs_path = out / "runs.jsonl"
    if runs_path.is_file():
        for line in runs_path.read_text().splitlines():
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    path = out / "results.md"
    path.write_text(markdown(rows, runs))
    if plots:
        _plots(aggregate(rows), out)
    return path

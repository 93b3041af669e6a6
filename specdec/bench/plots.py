"""The report's figures: one function per figure, each returning a matplotlib ``Figure`` (saved by
:func:`write_plots`).

Every figure is titled with what it shows, the hardware of the latest run and the prompts measured, and tells its
series apart by colour *and* marker (lines) or colour *and* hatch (bars), so it still reads printed in greyscale.

* ``speedup.png``: bars of tokens/s × vanilla per row label, one bar series per temperature;
* ``acceptance_per_depth.png``: n-α per draft depth, one line per (row label, temperature);
* ``tau_vs_tree_size.png``, ``tokps_vs_tree_size.png`` (a tree-size sweep): one line per (swept method,
  temperature) over the fixed sizes, its adaptive row as one point at its mean tree size;
* ``family_speedup_T{T}.png`` (rows with task families): bars × vanilla per family, one series per row label.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec.assets import SPEC_BENCH_FAMILIES
from specdec.bench.report import (
    OVERALL,
    Summary,
    aggregate,
    family_prompt_counts,
    family_summaries,
    hardware_label,
    row_label,
    sweep_table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "acceptance_figure",
    "bar_style",
    "family_figures",
    "figures",
    "line_style",
    "speedup_figure",
    "sweep_figures",
    "write_plots",
]

#: Matplotlib's default colour cycle (tab10), by name.
COLORS = tuple(f"C{i}" for i in range(10))
#: Line markers; 9 against 10 colours, so no two of the first 90 series share both.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
#: Bar hatches ("" is a plain bar).
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--", "++", "**")


def line_style(i: int) -> dict[str, Any]:
    """The ``i``-th line series' colour and marker (both change from one series to the next)."""
    return {"color": COLORS[i % len(COLORS)], "marker": MARKERS[i % len(MARKERS)]}


def bar_style(i: int) -> dict[str, Any]:
    """The ``i``-th bar series' colour and hatch (both change from one series to the next; black edges carry the
    hatch)."""
    return {"color": COLORS[i % len(COLORS)], "hatch": HATCHES[i % len(HATCHES)], "edgecolor": "k", "linewidth": 0.5}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _subtitle(rows: Sequence[dict], runs: Sequence[dict]) -> str:
    """The hardware and the distinct prompts measured."""
    return f"{hardware_label(runs)}; {_count(family_prompt_counts(rows)[OVERALL], 'prompt')}"


def _per_family_label(counts: dict[str, int]) -> str:
    """``N prompts per family``, or the range where an interrupted run left the families uneven."""
    sizes = [n for f, n in counts.items() if f != OVERALL]
    low, high = min(sizes), max(sizes)
    return f"{_count(high, 'prompt')} per family" if low == high else f"{low}–{high} prompts per family"


def _figure(width: float, height: float) -> tuple[Figure, Any]:
    """A figure and its one axes, outside pyplot (no global state, nothing to close)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _speedup_or_zero(s: Summary | None) -> float:
    return 0.0 if s is None or s.speedup_vs_vanilla is None else s.speedup_vs_vanilla


def speedup_figure(summaries: Sequence[Summary], subtitle: str) -> Figure | None:
    """Bars of tokens/s × vanilla per row label (vanilla left out), one bar series per temperature."""
    methods = list(dict.fromkeys(s.method for s in summaries if s.method != "vanilla"))
    if not methods:
        return None
    temps = sorted({s.temperature for s in summaries})
    fig, ax = _figure(max(6, 1.1 * len(methods)), 4.5)
    width = 0.8 / len(temps)
    for j, t in enumerate(temps):
        by = {s.method: s for s in summaries if s.temperature == t}
        ys = [_speedup_or_zero(by.get(m)) for m in methods]
        ax.bar([i + j * width for i in range(len(methods))], ys, width, label=f"T={t:g}", **bar_style(j))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([i + width * (len(temps) - 1) / 2 for i in range(len(methods))], methods, rotation=30)
    ax.set_ylabel("speedup vs vanilla (tokens/s ratio)")
    ax.set_title(f"Speedup vs vanilla\n{subtitle}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


def acceptance_figure(summaries: Sequence[Summary], subtitle: str) -> Figure | None:
    """n-α per draft depth, one line per (row label, temperature) (the sweep's fixed sizes left out); dashed at
    T > 0."""
    shown = [s for s in summaries if s.acceptance_per_depth and "@" not in s.method]
    if not shown:
        return None
    fig, ax = _figure(6, 4.5)
    for i, s in enumerate(shown):
        rates = s.acceptance_per_depth or []
        ax.plot(range(1, len(rates) + 1), rates, ls="-" if s.temperature == 0 else "--",
                label=f"{s.method} T={s.temperature:g}", **line_style(i))  # fmt: skip
    ax.set_xlabel("draft depth n")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("n-α (acceptance | previous accepted)")
    ax.set_ylim(0, 1)
    ax.set_title(f"Acceptance per draft depth\n{subtitle}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


def sweep_figures(summaries: Sequence[Summary], subtitle: str) -> dict[str, Figure]:
    """From a tree-size sweep: τ and tokens/s against the tree size, by file name. Each (method, temperature) is a
    line over its fixed sizes and its adaptive row a point at its mean tree size, each a series of its own style."""
    sweeps = sweep_table(summaries)
    if not sweeps:
        return {}
    out = {}
    for name, attr, label, title in (
        ("tau_vs_tree_size.png", "tau", "τ (tokens per target forward)", "τ"),
        ("tokps_vs_tree_size.png", "tokens_per_second", "tokens/s", "Tokens/s"),
    ):
        fig, ax = _figure(6, 4.5)
        series = 0
        for (method, t), sweep in sweeps.items():
            sizes = sorted(sweep["fixed"])
            ys = [getattr(sweep["fixed"][m], attr) or 0 for m in sizes]
            ax.plot(sizes, ys, label=f"{method} fixed, T={t:g}", **line_style(series))
            series += 1
            ad = sweep["adaptive"]
            if ad is not None and ad.mean_tree_size is not None:
                ax.plot([ad.mean_tree_size], [getattr(ad, attr) or 0], ls="none", markersize=11,
                        label=f"{method} adaptive (mean size), T={t:g}", **line_style(series))  # fmt: skip
                series += 1
        ax.set_xlabel("tree size (tokens, root included)")
        ax.set_ylabel(label)
        ax.set_title(f"{title} vs tree size\n{subtitle}", fontsize=10)
        ax.legend()
        fig.tight_layout()
        out[name] = fig
    return out


def family_figures(rows: Sequence[dict], runs: Sequence[dict]) -> dict[str, Figure]:
    """Per temperature, by file name: families (and overall) on x, one bar series per row label (vanilla left
    out). Empty without task families."""
    by_family = family_summaries(rows)
    if not by_family:
        return {}
    columns = list(by_family)
    labels = [textwrap.fill(SPEC_BENCH_FAMILIES.get(f, f), 12, break_long_words=False) for f in columns]
    subtitle = f"{hardware_label(runs)}; {_per_family_label(family_prompt_counts(rows))}"
    out = {}
    for t in sorted({t for _, t in by_family[OVERALL]}):
        shown = [s for (m, tt), s in by_family[OVERALL].items() if tt == t and m != "vanilla"]
        if not shown:
            continue
        fig, ax = _figure(max(9, 0.3 * len(shown) * len(columns)), 4.5)
        width = 0.8 / len(shown)
        top = 1.0
        for j, s in enumerate(shown):
            ys = [_speedup_or_zero(by_family[f].get((s.method, t))) for f in columns]
            xs = [i + (j - (len(shown) - 1) / 2) * width for i in range(len(columns))]
            ax.bar(xs, ys, width, label=row_label(s), **bar_style(j))
            top = max(top, *ys)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylim(0, 1.3 * top)  # room for the legend above the bars
        ax.set_xticks(range(len(columns)), labels, fontsize=8)
        ax.set_ylabel("speedup vs vanilla (tokens/s ratio)")
        ax.set_title(f"Speedup per task family, T={t:g}\n{subtitle}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", ncols=min(4, len(shown)))
        fig.tight_layout()
        out[f"family_speedup_T{t:g}.png"] = fig
    return out


def figures(rows: Sequence[dict], runs: Sequence[dict]) -> dict[str, Figure]:
    """Every figure ``rows`` call for, by file name (``runs``: the ``runs.jsonl`` records, for the hardware)."""
    summaries = aggregate(rows)
    subtitle = _subtitle(rows, runs)
    out = {"speedup.png": speedup_figure(summaries, subtitle)}
    out["acceptance_per_depth.png"] = acceptance_figure(summaries, subtitle)
    out.update(sweep_figures(summaries, subtitle))
    out.update(family_figures(rows, runs))
    return {name: fig for name, fig in out.items() if fig is not None}


def write_plots(rows: Sequence[dict], runs: Sequence[dict], out: Path) -> list[Path]:
    """Save :func:`figures` as PNGs in ``out``; returns their paths."""
    written = []
    for name, fig in figures(rows, runs).items():
        written.append(out / name)
        fig.savefig(written[-1], dpi=120)
    return written

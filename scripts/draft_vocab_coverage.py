"""Coverage of EAGLE-3 draft vocabularies of several sizes: the share of tokens a draft could propose at all.

    python scripts/draft_vocab_coverage.py --data data/self-distilled/smollm2-135m-instruct \\
        --mtbench docs/results/2026-11-25-cpu-1m-compiled/zen5-t0/results.jsonl --out docs/results/DIR

Each vocabulary is the ``N`` most frequent response tokens of a slice of the self-distilled data
(:func:`specdec.train.draft_vocab.select_draft_vocab`, as ``specdec train`` builds it). Coverage is measured on
data the vocabulary was not built from: the target's greedy MT-bench answers (the ``vanilla`` rows of a
``specdec bench`` results file) and the self-distilled responses outside the slice. Writes
``draft_vocab_coverage.md`` and ``.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specdec.train.draft_vocab import select_draft_vocab, token_frequencies
from specdec.train.shards import load_regenerated

SIZES = (4096, 8192, 16384, 32768)


def coverage(vocab: torch.Tensor, counts: torch.Tensor) -> float:
    """Share of the tokens counted in ``counts [V]`` whose id is in ``vocab``."""
    return float(counts[vocab].sum()) / max(1, int(counts.sum()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="self-distilled data folder")
    p.add_argument("--mtbench", type=Path, required=True, help="a specdec bench results.jsonl with vanilla rows")
    p.add_argument(
        "--slices",
        default="1984:2368,0:3712",
        help="sequence ranges the vocabularies are built from (start:stop, comma separated)",
    )
    p.add_argument("--vocab-size", type=int, default=49152)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    data = load_regenerated(args.data, max_len=1024)
    pairs = [(e.input_ids, e.loss_mask) for e in data.examples]
    mt = torch.zeros(args.vocab_size, dtype=torch.int64)
    for line in args.mtbench.read_text().splitlines():
        row = json.loads(line)
        if row.get("method") == "vanilla" and row.get("status") == "ok":
            mt += torch.bincount(torch.tensor(row["tokens"]), minlength=args.vocab_size)[: args.vocab_size]
    rows = []
    for spec in args.slices.split(","):
        start, stop = (int(x) for x in spec.split(":"))
        inside = token_frequencies(pairs[start:stop], args.vocab_size)
        outside = token_frequencies(pairs[:start] + pairs[stop:], args.vocab_size)
        for size in SIZES:
            vocab = select_draft_vocab(inside, size)
            rows.append(
                {
                    "built_from": f"sequences {start}-{stop - 1}",
                    "built_from_tokens": int(inside.sum()),
                    "size": size,
                    "distinct_tokens_seen": int((inside > 0).sum()),
                    "mtbench_greedy": coverage(vocab, mt),
                    "other_self_distilled": coverage(vocab, outside) if int(outside.sum()) else None,
                }
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "draft_vocab_coverage.json").write_text(json.dumps(rows, indent=1))
    lines = [
        f"MT-bench greedy tokens: {int(mt.sum())}.",
        "",
        "| built from | its response tokens | distinct | size | MT-bench greedy | other self-distilled |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        other = "–" if r["other_self_distilled"] is None else f"{100 * r['other_self_distilled']:.1f} %"
        lines.append(
            f"| {r['built_from']} | {r['built_from_tokens']:,} | {r['distinct_tokens_seen']:,} | {r['size']:,} | "
            f"{100 * r['mtbench_greedy']:.1f} % | {other} |"
        )
    (args.out / "draft_vocab_coverage.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

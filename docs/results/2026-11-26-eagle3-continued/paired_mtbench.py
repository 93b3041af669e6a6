"""τ of one bench method on the MT-bench questions two bench runs share (old head's run vs new head's run).

    python docs/results/2026-11-26-eagle3-continued/paired_mtbench.py NEW/results.jsonl OLD/results.jsonl METHOD T

τ over the shared questions is summed new tokens / summed target forwards (each row's forwards = new_tokens / tau).
"""

from __future__ import annotations

import json
import sys


def rows(path: str, method: str, temperature: float) -> dict[str, dict]:
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r["method"] == method and r["temperature"] == temperature and r.get("status", "ok") == "ok":
                out[r["prompt_id"]] = r
    return out


def tau(rs: list[dict]) -> float:
    return sum(r["new_tokens"] for r in rs) / sum(r["new_tokens"] / r["tau"] for r in rs)


def main() -> None:
    new_path, old_path, method, temperature = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    new, old = rows(new_path, method, temperature), rows(old_path, method, temperature)
    ids = sorted(set(new) & set(old))
    print(
        f"{method} T={temperature:g}: {len(ids)} shared questions, "
        f"tau old {tau([old[i] for i in ids]):.3f}, new {tau([new[i] for i in ids]):.3f}"
    )


if __name__ == "__main__":
    main()

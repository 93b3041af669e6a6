"""Spec-Bench: the shipped questions and their families, ``--limit`` per family, the per-family report."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specdec.assets import SPEC_BENCH_FAMILIES, SPEC_BENCH_FILE, Prompt, load_prompts, select_prompts
from specdec.bench import BenchConfig, run_bench, write_report
from specdec.bench.report import OVERALL, _hardware_label, family_summaries, markdown
from specdec.methods import MethodOptions
from specdec.models import tiny_llama
from tests.test_bench import VOCAB, FakeTokenizer, row

FAMILIES = list(SPEC_BENCH_FAMILIES)


# ----------------------------------------------------------------------------------------------- prompts
def test_spec_bench_ships_480_first_turns_in_six_families():
    prompts = load_prompts("spec-bench")
    assert len(prompts) == 480 and len({p.id for p in prompts}) == 480
    assert Counter(p.family for p in prompts) == dict.fromkeys(FAMILIES, 80)
    assert all(p.chat for p in prompts)
    first = json.loads(SPEC_BENCH_FILE.read_text().splitlines()[0])
    assert prompts[0] == Prompt("spec-bench/81", first["turns"][0], family="conversation")  # MT-bench "writing"
    by_id = {p.id: p.family for p in prompts}
    assert [by_id[f"spec-bench/{q}"] for q in (160, 161, 241, 321, 401, 481)] == FAMILIES  # 160: MT-bench's last
    assert (SPEC_BENCH_FILE.parent / "LICENSE").read_text().startswith("Apache License")


def test_limit_takes_n_per_family_interleaved():
    prompts = load_prompts("spec-bench")
    two = select_prompts(prompts, 2)
    assert [p.family for p in two] == FAMILIES * 2  # round-robin: an interrupted run has covered every family
    for family in FAMILIES:
        assert [p for p in two if p.family == family] == [p for p in prompts if p.family == family][:2]
    assert select_prompts(prompts, 3)[:12] == two  # a larger limit extends the order: indices (seeds) are kept
    assert len(select_prompts(prompts)) == 480
    plain = [Prompt("a", "x"), Prompt("b", "y"), Prompt("c", "z")]
    assert select_prompts(plain, 2) == plain[:2] and select_prompts(plain) == plain  # no families: first N


# ----------------------------------------------------------------------------------------------- report
def family_rows() -> list[dict]:
    """Two families; qa listed first in the file, reported after translation (leaderboard order)."""
    rows = [
        row("vanilla", "c", 20, 4.0, equal=True),
        row("spec", "c", 20, 1.0, accept=[1], depths=[2], equal=True),
        row("hf-generate", "c", 20, 8.0, equal=True),
    ]
    for prompt, tokens, van, spec, hf, accept, equal in (
        ("a", 10, 2.0, 1.0, 4.0, [1, 3], True),
        ("b", 30, 3.0, 1.0, 6.0, [0, 2, 0], False),
    ):
        rows += [
            row("vanilla", prompt, tokens, van, equal=True),
            row("spec", prompt, tokens, spec, accept=accept, depths=[4] * len(accept), equal=equal),
            row("hf-generate", prompt, tokens, hf, equal=True),
        ]
    for r in rows:
        r["family"] = "qa" if r["prompt_id"] == "c" else "translation"
    return rows


def test_per_family_table_pools_each_family_like_the_main_table():
    rows = family_rows()
    by_family = family_summaries(rows)
    assert list(by_family) == ["translation", "qa", OVERALL]
    spec = {f: by_family[f][("spec", 0.0)] for f in by_family}
    # translation: spec (10+30)/(1+1) = 20 tok/s, vanilla 40/5 = 8, hf 40/10 = 4; τ over cycles (2+4+1+3+1)/5
    assert spec["translation"].speedup_vs_vanilla == pytest.approx(20 / 8)
    assert spec["translation"].speedup_vs_hf == pytest.approx(20 / 4)
    assert spec["translation"].tau == pytest.approx(11 / 5)
    # qa: spec 20/1, vanilla 20/4, hf 20/8; τ 2/1
    assert spec["qa"].speedup_vs_vanilla == pytest.approx(4.0) and spec["qa"].speedup_vs_hf == pytest.approx(8.0)
    # overall pools sums (60/3 vs 60/9), not the mean of the family ratios (3.25)
    assert spec[OVERALL].speedup_vs_vanilla == pytest.approx(3.0) and spec[OVERALL].tau == pytest.approx(13 / 6)
    text = markdown(rows)
    assert "| method | T | Translation (2) | Question answering (1) | overall (3) | greedy = vanilla |" in text
    assert "| spec | 0 | 2.50× (τ 2.20) | 4.00× (τ 2.00) | 3.00× (τ 2.17) | 2/3 |" in text
    assert "| hf-generate | 0 | 0.50× | 0.50× | 0.50× | 3/3 |" in text
    assert "| spec | 0 | 5.00× | 8.00× | 6.00× |" in text  # the × HF generate table
    assert "| vanilla | 0 | 2.00× | 2.00× | 2.00× |" in text
    assert "| vanilla | 0 | 1.00×" not in text  # no baseline row against itself


def test_rows_without_families_keep_the_old_report():
    rows = [{k: v for k, v in r.items() if k != "family"} for r in family_rows()]
    assert family_summaries(rows) == {}
    text = markdown(rows)
    assert "Per task family" not in text
    assert markdown([{**r, "family": None} for r in rows]) == text  # rows of other datasets: family null


def test_family_plot_per_temperature(tmp_path):
    rows = family_rows() + [{**r, "temperature": 1.0, "greedy_equal": None} for r in family_rows()]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = {"command": "specdec bench --dataset spec-bench", "hardware": {"device": "NVIDIA H100", "cpu": "x"}}
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    write_report(tmp_path)
    for t in ("0", "1"):
        assert (tmp_path / f"family_speedup_T{t}.png").stat().st_size > 1000
    assert _hardware_label([run]) == "NVIDIA H100"
    assert (
        _hardware_label([{"hardware": {"device": "cpu", "cpu": "EPYC", "torch_threads": 2}}]) == "EPYC, 2 torch threads"
    )


# ----------------------------------------------------------------------------------------------- end to end
def test_bench_spec_bench_end_to_end(tmp_path, monkeypatch):
    """One question per family through the runner on a tiny model: rows carry families, the report has the table."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    model = tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=1, seed=1, max_position_embeddings=4096)
    options = MethodOptions(topk=2, depth=2, max_total_tokens=8)
    config = BenchConfig(
        methods=("ngram", "hf-generate"), dataset="spec-bench", max_new_tokens=4, limit=1, out_dir=tmp_path,
        options=options,
    )  # fmt: skip
    run_bench(config, model=model, tokenizer=FakeTokenizer(), progress=False)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 18 and all(r["status"] == "ok" for r in rows)
    assert [r["family"] for r in rows if r["method"] == "vanilla"] == FAMILIES
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert runs[0]["dataset"] == "spec-bench" and runs[0]["prompts"] == 6 and runs[0]["limit"] == 1
    text = write_report(tmp_path).read_text()
    assert "| ngram (adaptive) | 0 | " in text and "overall (6)" in text and "tokens/s × HF `generate`" in text
    assert (tmp_path / "family_speedup_T0.png").stat().st_size > 1000

"""Several prompts from the command line: ``specdec generate --prompts-file`` and ``specdec bench --batch-sizes``, on
a tiny random Mistral-style model (sliding window 6) saved beside a word-level tokenizer (tests/test_cli_models.py)."""

from __future__ import annotations

import json

import pytest

from specdec.cli import main
from tests.test_cli_models import save_tiny

TEXTS = ["why is the sky blue", "explain the sky", "the sky is blue . why"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-mistral")
    save_tiny(folder)
    return folder


def test_generate_several_prompts_gives_each_its_answer_alone(tiny_dir, tmp_path, capsys):
    common = ["--model", str(tiny_dir), "--method", "ngram", "--max-new-tokens", "10"]
    alone = []
    for text in TEXTS:
        assert main(["generate", text, *common]) == 0
        alone.append(capsys.readouterr().out.strip("\n"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(TEXTS[:1] + [""] + TEXTS[1:]) + "\n")  # a blank line is skipped
    assert main(["generate", "--prompts-file", str(prompts), "--max-batch", "2", *common]) == 0
    captured = capsys.readouterr()
    answers = [block.split("\n", 1)[1].strip("\n") for block in captured.out.split("### prompt ")[1:]]
    assert answers == alone
    assert "3 prompts" in captured.err.strip().splitlines()[-1]
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text("\n".join(json.dumps({"prompt": t}) for t in TEXTS))
    assert main(["generate", "--prompts-file", str(jsonl), *common]) == 0
    assert [b.split("\n", 1)[1].strip("\n") for b in capsys.readouterr().out.split("### prompt ")[1:]] == alone


def test_a_bad_prompts_file_is_refused_by_name(tiny_dir, tmp_path, capsys):
    common = ["--model", str(tiny_dir), "--method", "ngram", "--max-new-tokens", "4"]
    assert main(["generate", "--prompts-file", str(tmp_path / "none.txt"), *common]) == 2
    assert "no prompts file at" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "hi"}))
    assert main(["generate", "--prompts-file", str(bad), *common]) == 2
    assert 'line 1 has no "prompt"' in capsys.readouterr().err


def test_bench_batch_sizes(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": i, "prompt": t}) for i, t in enumerate(TEXTS)))
    out = tmp_path / "out"
    argv = ["bench", "--model", str(tiny_dir), "--methods", "ngram", "hf-generate", "--dataset", str(prompts)]
    argv += ["--max-new-tokens", "8", "--out", str(out), "--no-progress", "--batch-sizes", "1", "2"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "batch.jsonl").read_text().splitlines()]
    assert {(r["method"], r["batch_size"]) for r in rows} == {
        (m, b) for m in ("vanilla", "ngram", "hf-generate") for b in (1, 2)
    }
    for r in rows:
        assert r["prompts"] == 3 and not r["errors"] and r["tokens_per_second"] > 0
        if r["method"] == "ngram":
            assert r["greedy_equal"] == 3  # every row = batched vanilla's tokens
    assert "| 0 | 2 | ngram |" in capsys.readouterr().out
    assert main([*argv, "--methods", "hf-prompt-lookup"]) == 2
    assert "leave out hf-prompt-lookup" in capsys.readouterr().err

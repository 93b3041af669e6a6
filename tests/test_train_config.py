"""The training config: sections and leaf names, recipe options declared once, documented ``--set`` keys, the
run-folder format, error classes, and no import circle in specdec.train."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest

from specdec.errors import SpecdecError
from specdec.train.config import (
    RECIPE_NAMES,
    LossConfig,
    TrainConfig,
    TTTConfig,
    UnknownOptionError,
    default_of,
    nest_options,
    valid_keys,
)
from specdec.train.recipes import RECIPES
from specdec.train.run_folder import RUN_FORMAT, RunFolderError, read_config, write_config

ROOT = Path(__file__).resolve().parents[1]


def loss_keywords(recipe: str) -> dict[str, object]:
    """The keyword-only arguments of a recipe's loss and their defaults."""
    params = inspect.signature(RECIPES[recipe]).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize("recipe", RECIPE_NAMES)
def test_each_loss_takes_exactly_its_recipe_options_with_the_configs_defaults(recipe: str) -> None:
    options = TrainConfig(recipe=recipe, out="x").loss_options()
    assert options == loss_keywords(recipe)


def test_every_loss_option_belongs_to_some_recipe() -> None:
    fields = set(LossConfig.model_fields) | set(TTTConfig.model_fields)
    assert set().union(*(loss_keywords(r) for r in RECIPE_NAMES)) == fields


def test_eagle3_defaults_to_the_measured_three_training_time_test_steps() -> None:
    assert TrainConfig(recipe="eagle3", out="x").ttt.steps == 3 == default_of("steps")
    assert "docs/results/2026-11-25-cpu-recipes" in TTTConfig.__doc__ and "3.8 vs 8.3 min" in TTTConfig.__doc__
    hass = TrainConfig(recipe="hass", out="x").loss  # EAGLE-1/HASS keep the reference's weights (ties measured)
    assert (hass.noise, hass.ce_weight, hass.topk, hass.topk_weight, hass.passes, hass.pass_decay) == (
        0.1, 0.1, 10, 1.0, 3, 1.0,
    )  # fmt: skip


def test_leaf_names_and_section_fields_fill_the_same_nested_config() -> None:
    flat = TrainConfig(recipe="hass", out="runs/h", max_len=64, passes=2, lr=1e-4, eval_steps=[0, 5])
    dotted = TrainConfig.model_validate(
        nest_options({"recipe": "hass", "out": "runs/h", "data.max_len": 64, "loss.passes": 2, "optim.lr": 1e-4,
                      "eval.eval_steps": [0, 5]})
    )  # fmt: skip
    nested = TrainConfig(recipe="hass", out="runs/h", data={"max_len": 64}, loss={"passes": 2}, optim={"lr": 1e-4},
                         eval={"eval_steps": (0, 5)})  # fmt: skip
    assert flat == dotted == nested
    assert (flat.data.max_len, flat.loss.passes, flat.optim.lr, flat.eval.eval_steps) == (64, 2, 1e-4, (0, 5))
    assert TrainConfig.model_validate(flat.model_dump(mode="json")) == flat


def test_an_unknown_option_is_refused_with_the_valid_keys() -> None:
    with pytest.raises(UnknownOptionError) as info:
        nest_options({"recipe": "eagle3", "stpes": 3})
    message = str(info.value)
    assert "unknown training option 'stpes'" in message and "did you mean steps" in message
    assert all(key in message for key in valid_keys())
    assert issubclass(UnknownOptionError, SpecdecError) and issubclass(UnknownOptionError, ValueError)
    with pytest.raises(UnknownOptionError, match="'ttt.passes'"):  # a field of another section
        nest_options({"ttt.passes": 3})
    with pytest.raises(ValueError, match="unknown training option 'stpes'"):  # the Python API refuses it too
        TrainConfig(recipe="eagle3", out="x", stpes=3)


def documented_set_keys() -> set[str]:
    """Every KEY of ``--set KEY=VALUE`` in the docs and the committed result commands."""
    files = [*(ROOT / "docs").rglob("*.md"), *(ROOT / "docs" / "results").rglob("commands.sh"), ROOT / "README.md"]
    pattern = re.compile(r"--set[ =]+['\"]?([A-Za-z_][\w.]*)=")
    return {key for f in files for key in pattern.findall(f.read_text())}


def test_documented_set_keys_are_accepted() -> None:
    keys = documented_set_keys()
    assert {"steps", "eval_tau_prompts", "seed", "topk_weight", "train_sequences", "eval_steps"} <= keys
    for key in keys:
        nest_options({key: 1})  # raises for a key no section has
    # control: the scan and the check see a key that is not an option
    with pytest.raises(UnknownOptionError):
        nest_options(dict.fromkeys({*keys, "not_an_option"}, 1))


def test_run_folder_round_trip_and_an_earlier_flat_config_is_refused(tmp_path) -> None:
    config = TrainConfig(recipe="eagle3", out=tmp_path, steps=5, data_dir="data/sd")
    write_config(tmp_path, config)
    assert json.loads((tmp_path / "train_config.json").read_text())["format"] == RUN_FORMAT
    assert read_config(tmp_path) == config
    flat = {"recipe": "eagle3", "out": str(tmp_path), "steps": 7, "max_len": 1024}  # specdec before the sections
    (tmp_path / "train_config.json").write_text(json.dumps(flat))
    with pytest.raises(RunFolderError, match=f"run-folder format 1 .*reads format {RUN_FORMAT} only"):
        read_config(tmp_path)
    with pytest.raises(RunFolderError, match="not a training run folder"):
        read_config(tmp_path / "nothing")


def error_classes() -> list[tuple[str, str, list[str]]]:
    """``(module, class, base names)`` of every exception class defined in specdec/train."""
    found = []
    for path in sorted((ROOT / "specdec" / "train").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                found.append((path.stem, node.name, [ast.unparse(b) for b in node.bases]))
    return found


def test_every_training_error_is_a_specdec_error_refining_a_builtin() -> None:
    import importlib

    found = error_classes()
    assert {name for _, name, _ in found} >= {"ShardError", "RunFolderError", "UnknownOptionError", "CaptureError"}
    for module, name, _ in found:
        cls = getattr(importlib.import_module(f"specdec.train.{module}"), name)
        builtin = [b for b in cls.__mro__[1:] if b.__module__ == "builtins" and b not in (Exception, BaseException)]
        assert issubclass(cls, SpecdecError) and builtin, (module, name)


def train_imports() -> dict[str, set[str]]:
    """Module → the specdec.train modules it imports anywhere (deferred imports included)."""
    modules = {p.stem for p in (ROOT / "specdec" / "train").glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        edges = set()
        for node in ast.walk(ast.parse((ROOT / "specdec" / "train" / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "specdec.train":
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdec.train."):
                edges.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                edges |= {a.name.split(".")[2] for a in node.names if a.name.startswith("specdec.train.")}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_circle_in_the_training_package() -> None:
    graph = train_imports()
    assert "run_folder" in graph["card"] and "card" in graph["trainer"] and "trainer" not in graph["card"]
    assert cycles(graph) == []
    # control: the check sees a circle when there is one (card -> trainer, as before the run-folder module)
    assert cycles({**graph, "card": graph["card"] | {"trainer"}})

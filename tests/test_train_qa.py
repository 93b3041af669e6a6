"""Training refuses what it would otherwise get silently wrong: starting over leaves nothing of the earlier run,
a resume keeps the run's settings, a diverged run ships no head, options merge and validate at the boundary, bad
command-line input is one line, the feature cache sees every target weight, damaged run folders and bad token data
are named."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError

from specdec.checkpoints import save_eagle_head
from specdec.cli import main as specdec_main
from specdec.models import tiny_llama
from specdec.train.config import (
    ConflictingOptionError,
    InvalidOptionError,
    OptimConfig,
    TrainConfig,
    nest_options,
)
from specdec.train.data import TokenDataError, TokenDataset
from specdec.train.features import _target_sample
from specdec.train.heads import InitHeadError, build_head, check_init_head
from specdec.train.inputs import feature_spec
from specdec.train.regenerate import regenerate
from specdec.train.run_folder import RunFolderError, checkpoint_path, prepare_run, read_config, read_log, write_config
from specdec.train.shards import ShardError, load_regenerated
from specdec.train.trainer import TrainingDivergedError, train
from tests.test_train_regenerate import CONFIG as REGENERATE_CONFIG
from tests.test_train_regenerate import StubTokenizer, prompts
from tests.test_train_regenerate import model as regenerate_model
from tests.test_train_trainer import config, greedy_data


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, logit_scale=3.0)


@pytest.fixture(scope="module")
def data(target) -> TokenDataset:
    return greedy_data(target, 8, length=16)


def run(target, data, out, recipe: str = "eagle1", **kw):
    """A tiny run: 8 sequences, batch 4 → 2 steps per epoch; no held-out data."""
    return train(config(out, recipe, **kw), target=target, train_data=data, heldout_data=TokenDataset([]))


def steps_of(out) -> list[int]:
    return [r["step"] for r in read_log(out)]


# ------------------------------------------------------------------------------------------------ 1. start over


def test_no_resume_removes_the_earlier_runs_checkpoints_and_log(target, data, tmp_path) -> None:
    """Guards --no-resume into a used run folder: the earlier run's newer step_*.pt used to survive, push the new
    run's checkpoints out (keep_checkpoints) and be what a later resume loaded and shipped."""
    out = tmp_path / "run"
    run(target, data, out, epochs=3, save_every=2, lr=3e-3)  # 6 steps: checkpoints 4 and 6
    run(target, data, out, epochs=3, save_every=2, lr=1e-3, max_steps=2, resume=False)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002.pt"]
    assert steps_of(out) == [1, 2] and read_config(out).optim.lr == 1e-3
    # resuming the new run continues it from its own step 2 (max_steps and save_every may change on resume)
    run(target, data, out, epochs=3, save_every=3, lr=1e-3)
    assert steps_of(out) == [1, 2, 3, 4, 5, 6]
    assert all(r["lr"] <= 1e-3 for r in read_log(out))


def test_starting_over_refuses_to_remove_its_own_init_head(target, data, tmp_path) -> None:
    """Guards the head a fresh start would delete: init_head inside the run folder's own head/."""
    out = tmp_path / "run"
    run(target, data, out, max_steps=1)
    with pytest.raises(RunFolderError, match="init_head .*head is inside .*head, which a run starting over"):
        prepare_run(out, config(out, "eagle1", init_head=out / "head", resume=False))
    assert (out / "head" / "config.json").is_file()


# ------------------------------------------------------------------------------------------------ 2. resume


def resumable(tmp_path, **kw) -> TrainConfig:
    """A run folder holding ``config(**kw)`` and a checkpoint (its content is not read by the settings check)."""
    cfg = config(tmp_path, "eagle1", **kw)
    write_config(tmp_path, cfg)
    checkpoint_path(tmp_path, 1).parent.mkdir(parents=True)
    checkpoint_path(tmp_path, 1).write_bytes(b"")
    return cfg


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"lr": 0.1}, "optim.lr 0.003 -> 0.1"),
        ({"seed": 5}, "optim.seed"),
        ({"batch_size": 2}, "optim.batch_size"),
        ({"epochs": 3}, "optim.epochs"),
        ({"recipe": "hass"}, "recipe 'eagle1' -> 'hass'"),
        ({"intermediate_size": 16}, "head.intermediate_size"),
        ({"target": "other"}, "target"),
        ({"data_dir": "data/sd"}, "data.data_dir"),
    ],
)
def test_a_resume_with_other_settings_is_refused_naming_them(tmp_path, change, named) -> None:
    """Guards a resume that silently trained on with other settings and rewrote train_config.json to match them
    (a changed recipe or head width ended in a raw load_state_dict error)."""
    saved = resumable(tmp_path)
    new = config(tmp_path, change.pop("recipe", "eagle1"), **change)
    with pytest.raises(RunFolderError, match=f"{named}.*same settings to resume it, or with --no-resume"):
        prepare_run(tmp_path, new)
    assert read_config(tmp_path) == saved


def test_a_resume_may_change_where_it_stops_and_its_bookkeeping(tmp_path) -> None:
    """The options a resume may change (RESUMABLE) pass, and nothing of the run is removed."""
    resumable(tmp_path)
    same = config(tmp_path, "eagle1", max_steps=9, save_every=7, keep_checkpoints=5, eval_steps=(3,), progress=True)
    assert prepare_run(tmp_path, same) is True
    assert checkpoint_path(tmp_path, 1).is_file()


def test_a_resume_with_another_recipe_is_refused_before_the_checkpoint_is_loaded(target, data, tmp_path) -> None:
    """Guards the raw load_state_dict RuntimeError of a resume with another recipe's head."""
    run(target, data, tmp_path, max_steps=1, save_every=1)
    with pytest.raises(RunFolderError, match="recipe 'eagle1' -> 'eagle3'"):
        run(target, data, tmp_path, recipe="eagle3", max_steps=2)


# ------------------------------------------------------------------------------------------------ 3. divergence


def test_a_diverging_run_stops_without_saving_a_head(target, data, tmp_path) -> None:
    """Guards a run at a huge lr that logged NaN losses, saved a NaN head and returned as if it had trained (lr 30
    diverged on AMD Zen 3, not on an Intel Xeon, family 6 model 106: 1e30 overflows float32 on any CPU)."""
    with pytest.raises(TrainingDivergedError, match=r"loss of step \d+ is not finite .*no head was saved.*lower lr"):
        run(target, data, tmp_path, lr=1e30, grad_clip_value=None, epochs=20)  # overflows on any CPU
    assert not (tmp_path / "head").exists()
    assert all(r["loss"] == r["loss"] for r in read_log(tmp_path))  # no NaN reached the log


def test_a_head_with_non_finite_weights_is_not_saved(target, data, tmp_path, monkeypatch) -> None:
    """Guards the last step: a finite loss whose update leaves non-finite weights is caught before the head ships."""
    import specdec.train.trainer as trainer

    take_step = trainer.take_step

    def poisoned(loop):
        result = take_step(loop)
        if loop.step == loop.stop:
            with torch.no_grad():
                next(loop.recipe.head.parameters()).fill_(float("inf"))
        return result

    monkeypatch.setattr(trainer, "take_step", poisoned)
    with pytest.raises(TrainingDivergedError, match="after step 2 the head's .* are not finite"):
        run(target, data, tmp_path, max_steps=2)
    assert not (tmp_path / "head").exists()


@pytest.mark.parametrize("option", ["lr", "ce_weight", "topk_weight", "decay", "noise", "grad_clip_value", "betas"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_float_options_must_be_finite(option, value) -> None:
    """Guards lr=inf (and the like) passing validation and writing Infinity into log.jsonl."""
    given = (value, 0.9) if option == "betas" else value
    with pytest.raises(ValueError, match="finite number"):
        TrainConfig(recipe="hass", out="x", **{option: given})


# ------------------------------------------------------------------------------------------------ 4. sections


def test_a_section_object_keeps_the_leaves_given_beside_it() -> None:
    """Guards ``lr=1e-3, optim=OptimConfig(epochs=5)`` resetting lr to its default (the section's defaults were
    merged over the leaf)."""
    cfg = TrainConfig(recipe="hass", out="r", lr=1e-3, optim=OptimConfig(epochs=5))
    assert (cfg.optim.lr, cfg.optim.epochs) == (1e-3, 5)
    assert TrainConfig(recipe="hass", out="r", optim=OptimConfig(epochs=5), lr=1e-3).optim.lr == 1e-3
    assert TrainConfig(recipe="hass", out="r", lr=1e-3, optim=OptimConfig(lr=1e-3)).optim.lr == 1e-3  # same value


@pytest.mark.parametrize(
    "fields",
    [
        {"lr": 1e-3, "optim": OptimConfig(lr=2e-3)},
        {"optim": {"lr": 2e-3}, "lr": 1e-3},
        {"lr": 1e-3, "optim.lr": 2e-3},
    ],
)
def test_one_option_given_twice_with_different_values_is_refused(fields) -> None:
    with pytest.raises(ConflictingOptionError, match="optim.lr is given twice: .* give it once"):
        nest_options(fields)
    with pytest.raises(ValueError, match="optim.lr is given twice"):
        TrainConfig(recipe="hass", out="r", **fields)


# ------------------------------------------------------------------------------------------------ 5. command line


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--lr", "-1"], "invalid training option optim.lr=-1.0: input should be greater than 0"),
        (["--set", "betas=[1.5,0.9]"], "betas (1.5, 0.9) must each lie in [0, 1)"),
        (["--lr", "1e-3", "--set", "optim.lr=2e-3"], "optim.lr is given twice"),
    ],
)
def test_bad_training_options_are_one_line_before_anything_loads(tmp_path, capsys, args, line) -> None:
    """Guards pydantic tracebacks (and failures only after feature extraction) for ordinary bad options."""
    assert specdec_main(["train", "eagle1", "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec: error: ") and line in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_the_accelerate_entry_point_prints_the_same_one_line(tmp_path, capsys) -> None:
    """``python -m specdec.train.cli`` (what ``accelerate launch`` runs) printed a traceback for the same options."""
    from specdec.train.cli import main as train_main

    assert train_main(["eagle1", "--out", str(tmp_path / "r"), "--lr", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec: error: invalid training option optim.lr=-1.0") and err.count("\n") == 1


def test_eagle3_layers_the_target_lacks_are_refused_before_extraction(tmp_path) -> None:
    """Guards eagle3_layers=[0,1,99] failing only inside the feature extraction."""
    for layers in ([0, 1, 99], [-1, 1, 2], []):
        with pytest.raises(InvalidOptionError, match=r"eagle3_layers .* must name some of the target's layers 0 … 3"):
            feature_spec(config(tmp_path, "eagle3", eagle3_layers=layers), 4)


def test_an_init_head_of_another_kind_is_refused_before_extraction(target, data, tmp_path) -> None:
    """Guards --init-head of the wrong kind failing with a raw ValueError after the features were extracted."""
    head = save_eagle_head(build_head("eagle1", target.config), tmp_path / "e1")
    with pytest.raises(InitHeadError, match="is a eagle1 head; the eagle3 recipe trains a eagle3 head"):
        check_init_head(config(tmp_path, "eagle3", init_head=head).head, "eagle3", target, (1, 2, 3))
    with pytest.raises(InitHeadError):
        run(target, data, tmp_path / "run", recipe="eagle3", init_head=head)
    assert not (tmp_path / "run" / "features").exists()


def test_a_run_folder_under_a_file_is_named(target, data, tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunFolderError, match="cannot create the run folder .*file/run .*choose another --out"):
        run(target, data, tmp_path / "file" / "run")


@pytest.mark.parametrize(
    ("manifest", "named"),
    [('{"format": 3, "sha', "is damaged"), ("[]", "not a data manifest"), (None, "lists no shards")],
)
def test_a_damaged_or_empty_data_manifest_is_named(tmp_path, manifest, named) -> None:
    """Guards a truncated or ``[]`` manifest (raw JSON errors) and one with no shards (blamed on skip_sequences)."""
    regenerate(regenerate_model(), StubTokenizer(), tmp_path, 4, REGENERATE_CONFIG, prompts=prompts(4), progress=False)
    path = tmp_path / "manifest.json"
    if manifest is None:
        manifest = json.dumps({**json.loads(path.read_text()), "shards": []})
    path.write_text(manifest)
    with pytest.raises(ShardError, match=named):
        load_regenerated(tmp_path)


# ------------------------------------------------------------------------------------------------ 6. feature cache


def test_the_feature_cache_fingerprint_sees_every_weight(target) -> None:
    """Guards stale features: the fingerprint sampled only the embedding and lm_head, so a fine-tuned layer reused
    the old cache."""
    changed = tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, logit_scale=3.0)
    changed.load_state_dict(target.state_dict())
    assert _target_sample(changed) == _target_sample(target)
    with torch.no_grad():
        changed.model.layers[2].mlp.down_proj.weight[3, 5] += 1e-3  # one value of a middle layer
    assert _target_sample(changed) != _target_sample(target)


# ------------------------------------------------------------------------------------------------ 7. damaged run folder


def damage_checkpoint(out, how: str) -> None:
    path = sorted((out / "checkpoints").glob("step_*.pt"))[-1]
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    elif how == "no rng":
        state = torch.load(path, weights_only=True)
        del state["rng"]
        torch.save(state, path)
    elif how == "stray":
        (out / "checkpoints" / "step_abc.pt").write_bytes(b"x")
    elif how == "log":
        log = out / "log.jsonl"
        log.write_text(log.read_text()[:-30])


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("truncated", r"checkpoint .*step_00000002.pt is damaged"),
        ("empty", r"checkpoint .*step_00000002.pt is damaged"),
        ("garbage", r"checkpoint .*step_00000002.pt is damaged"),
        ("no rng", r"checkpoint .*step_00000002.pt lacks rng"),
        ("stray", r"step_abc.pt is not a checkpoint a run writes"),
        ("log", r"log.jsonl line 2 is damaged"),
    ],
)
def test_a_damaged_run_folder_names_the_file(target, data, tmp_path, how, named) -> None:
    """Guards raw EOFError/RuntimeError/KeyError/ValueError/JSONDecodeError on resuming a damaged run folder."""
    run(target, data, tmp_path, epochs=2, max_steps=2, save_every=2)
    damage_checkpoint(tmp_path, how)
    with pytest.raises(RunFolderError, match=f"{named}.*--no-resume"):
        run(target, data, tmp_path, epochs=2, save_every=2)
    run(target, data, tmp_path, epochs=2, save_every=2, resume=False)  # the way out the message names
    assert steps_of(tmp_path) == [1, 2, 3, 4]


# ------------------------------------------------------------------------------------------------ 8. token data


@pytest.mark.parametrize(
    ("ids", "mask", "named"),
    [
        ([[1, 2, 40]], [[0, 1, 1]], "sequence 0: token id 40 is outside the vocabulary"),
        ([[1, 2], [1, -1]], [[0, 1], [0, 1]], "sequence 1: token id -1 is outside the vocabulary"),
        ([[1.5, 2.7]], [[1, 1]], "token ids must be integers"),
        ([[1, 2]], [[2, 0]], "loss_mask values must be 0 or 1"),
        ([[], [1, 2]], [[], [1, 1]], "sequence 0 is empty"),
        ([[1, 2, 3]], [[1, 1]], "differ in length"),
    ],
)
def test_bad_token_sequences_are_refused(ids, mask, named) -> None:
    """Guards out-of-vocabulary, negative or float ids, non-0/1 masks and empty sequences being accepted."""
    with pytest.raises(TokenDataError, match=named):
        TokenDataset.from_sequences(ids, mask, vocab_size=32)


def test_training_refuses_ids_outside_the_targets_vocabulary(target, tmp_path) -> None:
    bad = TokenDataset.from_sequences([[1, 2, 3, 40] * 4] * 4, [[0, 1, 1, 1] * 4] * 4)  # no vocab_size: accepted
    with pytest.raises(TokenDataError, match="training sequence 0: token id 40 is outside the vocabulary"):
        run(target, bad, tmp_path)


def test_self_distilled_data_of_another_model_is_refused(tmp_path) -> None:
    """Guards training on data another model generated (its manifest names the model and vocabulary)."""
    regenerate(regenerate_model(), StubTokenizer(), tmp_path, 4, REGENERATE_CONFIG, prompts=prompts(4), progress=False)
    assert len(load_regenerated(tmp_path, target=regenerate_model())) == 4
    other = tiny_llama(vocab_size=64, hidden_size=32, num_layers=2, seed=9)
    with pytest.raises(ShardError, match="was generated by model .*not by this run's target"):
        load_regenerated(tmp_path, target=other)


def test_a_draft_vocabulary_past_the_targets_is_refused_before_extraction(target, tmp_path) -> None:
    """Guards draft_vocab_size=40 for a 32-token target: clamped silently (the config said 40, the head had 32)."""
    check_init_head(config(tmp_path, "eagle3", draft_vocab_size=32).head, "eagle3", target, (1, 2, 3))
    with pytest.raises(InvalidOptionError, match="draft_vocab_size 40 exceeds the target's vocabulary of 32"):
        check_init_head(config(tmp_path, "eagle3", draft_vocab_size=40).head, "eagle3", target, (1, 2, 3))


@pytest.mark.parametrize(
    "fields", [{"feature_weight": -1.0}, {"ce_weight": -0.1}, {"topk_weight": -1.0}, {"eval_steps": (-5, 3)}]
)
def test_negative_loss_weights_and_eval_steps_are_refused(fields) -> None:
    """A negative loss weight trains the head away from its target; a negative evaluation step was ignored."""
    with pytest.raises(ValidationError):
        TrainConfig(recipe="hass", out="r", **fields)

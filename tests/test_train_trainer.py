"""End-to-end training on a tiny target: resumable + deterministic, saved head loads, a trained head beats a
random one on held-out greedy-chain acceptance, CLI argument mapping."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest
import torch

from specdec.checkpoints import load_eagle_head
from specdec.models import tiny_llama
from specdec.train.cli import _config_from_args, add_train_parser
from specdec.train.config import TrainConfig, UnknownOptionError
from specdec.train.data import TokenDataset
from specdec.train.evaluate import chain_acceptance
from specdec.train.features import FeatureStore, eagle3_layers
from specdec.train.heads import build_head
from specdec.train.run_folder import read_log
from specdec.train.tau import dynamic_tree_tau, heldout_prompts, tree_tau_counts
from specdec.train.trainer import lr_lambda, train
from specdec.trees import DynamicTreePolicy


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, logit_scale=3.0)


def greedy_data(target, n: int, length: int = 32, prompt: int = 4, seed: int = 0) -> TokenDataset:
    """Self-distilled data: random prompts continued greedily by the target; loss on the continuation."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.config.vocab_size, (n, prompt), generator=g)
    with torch.no_grad():
        for _ in range(length - prompt):
            ids = torch.cat([ids, target(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, :prompt] = False
    return TokenDataset.from_sequences(list(ids), list(mask))


def config(tmp_path, recipe: str, **kw) -> TrainConfig:
    base = dict(
        recipe=recipe,
        out=tmp_path,
        batch_size=4,
        lr=3e-3,
        warmup_steps=3,
        progress=False,
        eval_depth=3,
        eval_max_sequences=4,
        draft_vocab_size=24,
        steps=3,
        save_every=100,
    )
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("recipe", ["hass", "eagle3"])
def test_resume_continues_identically(target, tmp_path, recipe: str) -> None:
    train_data, heldout = greedy_data(target, 12), greedy_data(target, 2, seed=1)
    straight = tmp_path / "straight"
    train(
        config(straight, recipe, epochs=2, eval_steps=(2, 4, 6)),
        target=target,
        train_data=train_data,
        heldout_data=heldout,
    )
    resumed = tmp_path / "resumed"
    train(config(resumed, recipe, epochs=2, max_steps=4), target=target, train_data=train_data, heldout_data=heldout)
    assert len(read_log(resumed)) == 4
    assert (resumed / "checkpoints" / "step_00000004.pt").is_file()
    train(config(resumed, recipe, epochs=2), target=target, train_data=train_data, heldout_data=heldout)
    a, b = read_log(straight), read_log(resumed)
    assert [r["step"] for r in a] == list(range(1, 7))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    assert len({r["loss"] for r in a}) > 1
    head_a, head_b = load_eagle_head(straight / "head"), load_eagle_head(resumed / "head")
    for (name, p), q in zip(head_a.state_dict().items(), head_b.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    report = json.loads((straight / "eval.json").read_text())
    assert report["step"] == 6 and len(report["alpha"]) == 3
    # the curve: one evaluation after each listed mid-run step (the last step is eval.json), tokens growing
    curve = [json.loads(line) for line in (straight / "curve.jsonl").read_text().splitlines()]
    assert [c["step"] for c in curve] == [2, 4]
    seen = [c["trained_tokens"] for c in curve] + [report["trained_tokens"]]
    assert 0 < seen[0] < seen[1] < seen[2] == sum(r["tokens"] for r in a)


def test_seed_changes_the_run(target, tmp_path) -> None:
    data = greedy_data(target, 8)
    train(config(tmp_path / "s0", "eagle1", seed=0), target=target, train_data=data, heldout_data=TokenDataset([]))
    train(config(tmp_path / "s1", "eagle1", seed=1), target=target, train_data=data, heldout_data=TokenDataset([]))
    assert [r["loss"] for r in read_log(tmp_path / "s0")] != [r["loss"] for r in read_log(tmp_path / "s1")]


# eagle3 learns slower here: a 4-layer target's fused inputs (layers 2, 2, 1) are far from its output
@pytest.mark.parametrize(
    ("recipe", "epochs", "margin"),
    [("eagle1", 2, 0.08), pytest.param("eagle3", 4, 0.04, marks=pytest.mark.heavy)],  # eagle3: 13 s, CI's heavy step
)
def test_trained_head_accepts_more_than_random(target, tmp_path, recipe: str, epochs: int, margin: float) -> None:
    train_data, heldout = greedy_data(target, 192, seed=0), greedy_data(target, 12, seed=1)
    cfg = config(tmp_path, recipe, epochs=epochs, eval_max_sequences=None, eval_depth=3)
    head_dir = train(cfg, target=target, train_data=train_data, heldout_data=heldout)
    trained = load_eagle_head(head_dir, target_model=target)
    if recipe == "eagle3":
        assert trained.config.draft_vocab_size == 24 and trained.config.aux_layer_ids == eagle3_layers(4)
    torch.manual_seed(1234)
    random_head = build_head(recipe, target.config, eagle3_layers(4), 24)
    random_head.attach_target_embedding(target.get_input_embeddings().weight)
    if recipe == "eagle3":
        random_head.load_state_dict({"d2t": trained.d2t, "t2d": trained.t2d}, strict=False)
    store = FeatureStore(tmp_path / "features" / "heldout")
    lm_head = target.lm_head.weight.detach()
    got = chain_acceptance(trained, store, lm_head, depth=3)
    base = chain_acceptance(random_head, store, lm_head, depth=3)
    assert got.tried[0] == base.tried[0] == int(sum(e.loss_mask[1:].sum() for e in heldout))
    assert got.alpha[0] > base.alpha[0] + margin, (got, base)
    assert got.chain_tau > base.chain_tau
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["alpha"] == pytest.approx(got.alpha)
    # Dynamic-tree τ through the real decoding loop (default hook): at least the bonus token per forward.
    assert report["tau"] is not None and report["tau"] >= 1.0


def test_tree_tau_counts_per_prompt(target) -> None:
    """Per-prompt (tokens, forwards) of held-out τ: every forward emits at least the bonus token, each prompt gets
    its new tokens, and dynamic_tree_tau is the ratio of the sums (so paired comparisons add up to it)."""
    torch.manual_seed(0)
    head = build_head("eagle3", target.config, eagle3_layers(4), 24)
    head.attach_target_embedding(target.get_input_embeddings().weight)
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6, 7, 8]), torch.tensor([9])]
    policy = DynamicTreePolicy(topk=2, depth=3, total_tokens=6)
    counts = tree_tau_counts(head.eval(), target, prompts, max_new_tokens=10, policy=policy)
    assert len(counts) == 3
    # the prefill emits the first new token; the cycles emit the other 9 (or more, the last cycle may overshoot)
    assert all(tokens >= max(forwards, 9) and forwards >= 1 for tokens, forwards in counts), counts
    tau = dynamic_tree_tau(head, target, prompts, max_new_tokens=10, policy=policy)
    assert tau == sum(t for t, _ in counts) / sum(f for _, f in counts)
    rows = [
        {"input_ids": torch.arange(5), "loss_mask": torch.arange(5) >= 2},
        {"input_ids": torch.arange(3), "loss_mask": torch.zeros(3, dtype=torch.bool)},  # no assistant token: skipped
    ]
    got = heldout_prompts(rows, 5)
    assert len(got) == 1 and torch.equal(got[0], torch.arange(2))


def test_warmup_then_linear_decay() -> None:
    f = lr_lambda(4, 10)
    assert [round(f(s), 3) for s in range(11)] == [0.25, 0.5, 0.75, 1.0, 1.0, 0.833, 0.667, 0.5, 0.333, 0.167, 0.0]


def test_cli_maps_arguments_to_config(tmp_path) -> None:
    parser = argparse.ArgumentParser(prog="specdec")
    add_train_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["train", "hass", "--out", str(tmp_path), "--max-conversations", "7", "--max-len", "64", "--epochs", "3",
         "--lr", "1e-4", "--seed", "5", "--set", "passes=2", "--set", "noise=0.05", "--no-progress",
         "--skip-sequences", "3", "--captured-features", str(tmp_path / "cap")]
    )  # fmt: skip
    assert args.func.__name__ == "run_train"
    cfg = _config_from_args(args)
    data = cfg.data
    assert (cfg.recipe, cfg.out, data.max_conversations, data.max_len, cfg.optim.epochs) == ("hass", tmp_path, 7, 64, 3)
    assert (cfg.optim.lr, cfg.optim.seed, cfg.loss.passes, cfg.loss.noise) == (1e-4, 5, 2, 0.05)
    assert cfg.run.progress is False and cfg.run.resume is True  # a switch not given keeps the config's default
    assert data.skip_sequences == 3 and data.captured_features == tmp_path / "cap"
    assert cfg.data.heldout_fraction == TrainConfig(recipe="hass", out="x").data.heldout_fraction  # not given: default
    with pytest.raises(UnknownOptionError, match="unknown training option 'no_such_field'.*valid keys: .*steps"):
        _config_from_args(parser.parse_args(["train", "eagle1", "--out", "x", "--set", "no_such_field=1"]))


def test_ship_head_writes_card_from_the_run(target, tmp_path) -> None:
    from specdec.train.card import ship_head

    run = tmp_path / "run"
    data, heldout = greedy_data(target, 8), greedy_data(target, 2, seed=1)
    # train on a prefix of 6 of the 8 cached sequences: 2 steps of batch 4
    cfg = config(run, "eagle1", eval_steps=(1,), train_sequences=6, eval_tau_prompts=5)
    train(cfg, target=target, train_data=data, heldout_data=heldout)
    dest = ship_head(run, tmp_path / "shipped", hardware="test cpu", title="tiny head", notes="a note")
    facts = json.loads((dest / "training.json").read_text())
    log = read_log(run)
    assert facts["steps"] == len(log) == 2 and facts["scored_tokens"] == sum(r["tokens"] for r in log)
    assert facts["data"]["train_sequences"] == 6 and facts["data"]["tokens"] == 6 * 32
    assert facts["wall_seconds"] == log[-1]["wall_s"] > 0
    assert [p["step"] for p in facts["curve"]] == [1]
    card = (dest / "README.md").read_text()
    assert "# tiny head" in card and "test cpu" in card and "a note" in card
    assert f"{facts['evaluation']['chain_tau']:.3f}" in card
    assert "over the first 2 held-out prompts" in card  # eval_tau_prompts=5, but only 2 held-out rows exist
    copied = load_eagle_head(dest, target_model=target)  # the copied head still loads
    small = load_eagle_head(ship_head(run, tmp_path / "bf16", "cpu", "t", dtype=torch.bfloat16), target_model=target)
    assert small.fc.weight.dtype == torch.bfloat16
    torch.testing.assert_close(small.fc.weight.float(), copied.fc.weight, atol=1e-2, rtol=1e-2)
    # A shipped shortlist survives a re-ship of a run that brings none; a run's own shortlist replaces it.
    from specdec.checkpoints import load_draft_vocab, save_draft_vocab

    vocab = target.config.vocab_size
    save_draft_vocab(torch.arange(0, vocab, 2), dest, vocab)
    for dtype in (None, torch.bfloat16):
        assert load_draft_vocab(ship_head(run, dest, "cpu", "t", dtype=dtype), vocab).tolist() == list(
            range(0, vocab, 2)
        )
    save_draft_vocab(torch.arange(1, vocab, 2), run / "head", vocab)
    for dtype in (None, torch.bfloat16):
        assert load_draft_vocab(ship_head(run, dest, "cpu", "t", dtype=dtype), vocab).tolist() == list(
            range(1, vocab, 2)
        )


def test_trains_on_regenerated_data(target, tmp_path) -> None:
    """``data_dir``: the trainer reads `specdec data regenerate` shards (loss on the responses only)."""
    from specdec.train.regenerate import Prompt, RegenerateConfig, regenerate
    from specdec.train.shards import load_regenerated

    class Tok:
        eos_token_id, pad_token_id = 1, 0

    g = torch.Generator().manual_seed(5)
    prompts = [Prompt(i, torch.randint(2, 32, (4,), generator=g).tolist()) for i in range(8)]
    data_dir = tmp_path / "data"
    regen = RegenerateConfig(max_new_tokens=12, temperatures=(0.0,), shard_size=4, batch_size=4)
    regenerate(target, Tok(), data_dir, 8, regen, prompts=prompts, progress=False)
    cfg = config(tmp_path / "run", "eagle1", data_dir=data_dir, max_conversations=6, max_steps=2)
    train(cfg, target=target, heldout_data=TokenDataset([]))
    log = read_log(tmp_path / "run")
    assert log and sum(r["tokens"] for r in log) > 0
    expected = load_regenerated(data_dir).examples[:6]
    scored = sum(int(e.loss_mask[1:].sum()) for e in expected)  # slots whose next token is a response token
    assert sum(r["tokens"] for r in log) == scored  # one epoch over the first 6 sequences, in 2 steps of 4
    # skip_sequences: a continuing run trains on the sequences after the ones the first run saw
    rest = tmp_path / "rest"
    train(config(rest, "eagle1", data_dir=data_dir, skip_sequences=6), target=target, heldout_data=TokenDataset([]))
    unseen = load_regenerated(data_dir).examples[6:]
    assert sum(r["tokens"] for r in read_log(rest)) == sum(int(e.loss_mask[1:].sum()) for e in unseen)
    with pytest.raises(ValueError, match="skip_sequences=8 leaves none of the 8"):
        train(config(tmp_path / "none", "eagle1", data_dir=data_dir, skip_sequences=8), target=target)


def test_trains_on_features_captured_during_generation(target, tmp_path) -> None:
    """``captured_features``: the training split takes the features regenerate captured, the rest is extracted."""
    from specdec.train.captured import CaptureSettings
    from specdec.train.features import FeatureSpec
    from specdec.train.regenerate import Prompt, RegenerateConfig, regenerate

    class Tok:
        eos_token_id, pad_token_id = 1, 0

    g = torch.Generator().manual_seed(5)
    prompts = [Prompt(i, torch.randint(2, 32, (4,), generator=g).tolist()) for i in range(8)]
    layers = eagle3_layers(target.config.num_hidden_layers)
    capture = CaptureSettings(tmp_path / "cap", target, FeatureSpec(final=True, layers=layers))
    regen = RegenerateConfig(max_new_tokens=12, temperatures=(0.0,), shard_size=4, batch_size=4)
    regenerate(target, Tok(), tmp_path / "data", 4, regen, prompts=prompts, progress=False, capture=capture)
    regenerate(target, Tok(), tmp_path / "data", 8, regen, prompts=prompts, progress=False)  # shard 1: no capture
    for recipe in ("eagle1", "eagle3"):  # EAGLE-1 reads only the final features of the capture
        run = tmp_path / recipe
        cfg = config(run, recipe, data_dir=tmp_path / "data", captured_features=tmp_path / "cap", max_steps=2)
        train(cfg, target=target, heldout_data=TokenDataset([]))
        index = json.loads((run / "features" / "train" / "index.json").read_text())
        assert index["captured_sequences"] == 4 and sum(s["num_sequences"] for s in index["shards"]) == 8


def test_training_continues_from_a_trained_head(target, tmp_path) -> None:
    """``init_head``: a run starts from a saved head (weights, EAGLE-3 draft vocabulary and fused layers kept), its
    card records the lineage, and a head of the wrong kind or with other fused layers is refused."""
    from specdec.train.card import ship_head

    first = tmp_path / "first"
    train(
        config(first, "eagle3", epochs=2),
        target=target,
        train_data=greedy_data(target, 16),
        heldout_data=greedy_data(target, 2, seed=1),
    )
    parent = ship_head(first, tmp_path / "parent", hardware="test cpu", title="parent")
    start = load_eagle_head(parent, target_model=target)
    # other data, whose own draft vocabulary would differ: the continued head keeps the parent's
    other, none = greedy_data(target, 8, seed=7), TokenDataset([])
    fresh = train(config(tmp_path / "fresh", "eagle3", max_steps=1), target=target, train_data=other, heldout_data=none)
    assert not torch.equal(load_eagle_head(fresh).d2t, start.d2t)
    cont = tmp_path / "continued"
    train(
        config(
            cont,
            "eagle3",
            init_head=parent,
            draft_vocab_size=None,
            lr=1e-12,
            max_steps=1,
            warmup_steps=0,
            eval_steps=(0,),
        ),
        target=target,
        train_data=other,
        heldout_data=greedy_data(target, 2, seed=1),
    )
    # step 0 of the curve scores the head it started from, on this run's held-out data (the parent's own)
    start_point = json.loads((cont / "curve.jsonl").read_text().splitlines()[0])
    assert start_point["step"] == 0 and start_point["trained_tokens"] == 0
    assert start_point["alpha"] == pytest.approx(json.loads((first / "eval.json").read_text())["alpha"])
    continued = load_eagle_head(cont / "head")
    for (name, p), q in zip(start.state_dict().items(), continued.state_dict().values(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=0, msg=name)
    # the learned head starts ahead of a fresh one on the same first batch
    assert read_log(cont)[0]["loss"] < read_log(tmp_path / "fresh")[0]["loss"]
    # the parent folder is shipped over (another run) before the child ships: the lineage stays the one it started from
    ship_head(tmp_path / "fresh", parent, hardware="test cpu", title="another")
    assert json.loads((parent / "training.json").read_text())["steps"] == 1 != len(read_log(first))
    facts = json.loads((ship_head(cont, tmp_path / "child", "test cpu", "child") / "training.json").read_text())
    assert facts["init_head"]["path"] == str(parent) and facts["init_head"]["steps"] == len(read_log(first))
    assert "initialised from" in (tmp_path / "child" / "README.md").read_text()

    with pytest.raises(ValueError, match="eagle3 head; the eagle1 recipe"):
        train(config(tmp_path / "kind", "eagle1", init_head=parent), target=target, train_data=other, heldout_data=none)
    with pytest.raises(ValueError, match="fuses target layers"):
        train(
            config(tmp_path / "layers", "eagle3", init_head=parent, eagle3_layers=(0, 1, 2)),
            target=target,
            train_data=other,
            heldout_data=none,
        )


def test_continued_eagle3_head_can_move_to_a_new_draft_vocabulary(target, tmp_path) -> None:
    """A ``draft_vocab_size`` given with ``init_head`` rebuilds the vocabulary from the run's data: shared tokens keep
    their trained lm_head rows, new ones start from the target's rows, every other weight is the parent's."""
    from specdec.train.draft_vocab import select_draft_vocab, token_frequencies

    none = TokenDataset([])
    parent_run = tmp_path / "parent"
    train(
        config(parent_run, "eagle3", max_steps=2), target=target, train_data=greedy_data(target, 8), heldout_data=none
    )
    parent = load_eagle_head(parent_run / "head")
    other = greedy_data(target, 8, seed=7)
    run = tmp_path / "moved"
    cfg = config(run, "eagle3", init_head=parent_run / "head", draft_vocab_size=20, lr=1e-12, max_steps=1)
    moved = load_eagle_head(train(cfg, target=target, train_data=other, heldout_data=none))
    counts = token_frequencies(((e.input_ids, e.loss_mask) for e in other), target.config.vocab_size)
    want = select_draft_vocab(counts, 20)
    new_ids = moved.to_target_ids(torch.arange(20))
    assert torch.equal(new_ids, want) and moved.config.draft_vocab_size == 20
    parent_ids = parent.to_target_ids(torch.arange(parent.config.draft_vocab_size)).tolist()
    shared = [i for i, t in enumerate(new_ids.tolist()) if t in parent_ids]
    fresh = [i for i, t in enumerate(new_ids.tolist()) if t not in parent_ids]
    assert shared and fresh
    rows = [parent_ids.index(t) for t in new_ids[shared].tolist()]
    torch.testing.assert_close(moved.lm_head.weight[shared], parent.lm_head.weight[rows], atol=1e-6, rtol=0)
    mean_row = parent.lm_head.weight.mean(0).expand(len(fresh), -1)
    torch.testing.assert_close(moved.lm_head.weight[fresh], mean_row, atol=1e-6, rtol=0)
    torch.testing.assert_close(moved.fc.weight, parent.fc.weight, atol=1e-6, rtol=0)


def test_a_run_continued_from_an_unshipped_run_keeps_its_lineage(target, tmp_path) -> None:
    """``init_head`` = another run's ``head/`` folder (never shipped, so no ``training.json``): the child keeps that
    run's facts, and its card names them; when they cannot be read (feature cache deleted) it warns and keeps none."""
    from specdec.train.card import UNSHIPPED, ship_head

    none, data = TokenDataset([]), greedy_data(target, 8)
    parent = tmp_path / "parent"
    train(config(parent, "eagle1", max_steps=2), target=target, train_data=data, heldout_data=none)
    child = tmp_path / "child"
    train(
        config(child, "eagle1", init_head=parent / "head", max_steps=1),
        target=target,
        train_data=data,
        heldout_data=none,
    )
    kept = json.loads((child / "init_head_training.json").read_text())
    assert kept["steps"] == 2 and kept["hardware"] == UNSHIPPED and kept["data"]["train_sequences"] == 8
    facts = json.loads((ship_head(child, tmp_path / "shipped", "test cpu", "child") / "training.json").read_text())
    assert facts["init_head"]["path"] == str(parent / "head") and facts["init_head"]["steps"] == 2

    # control: the same parent without its feature cache has no readable facts; the run warns and records none
    shutil.rmtree(parent / "features")
    orphan = tmp_path / "orphan"
    with pytest.warns(UserWarning, match="lineage of .*parent/head is not recorded"):
        train(
            config(orphan, "eagle1", init_head=parent / "head", max_steps=1),
            target=target,
            train_data=data,
            heldout_data=none,
        )
    assert not (orphan / "init_head_training.json").exists()


def test_a_new_draft_vocabulary_keeps_the_heads_predictions() -> None:
    """Moving a trained head onto a larger vocabulary leaves its argmax on every row where the old argmax survives
    (new tokens start at an average logit, never on top)."""
    from specdec.train.heads import with_draft_vocab

    torch.manual_seed(0)
    cfg = tiny_llama(vocab_size=64, hidden_size=32, num_layers=4).config
    head = build_head("eagle3", cfg, (1, 2, 3), draft_vocab_size=32)
    head.set_vocab_map(torch.arange(0, 64, 2))  # even tokens
    with torch.no_grad():
        head.lm_head.weight.copy_(torch.randn(32, 32) * 0.1)
    moved = with_draft_vocab(head, torch.arange(0, 48))  # keeps the even tokens below 48, adds odd ones
    out = torch.randn(200, 32)
    old = head.to_target_ids(head.logits(out).argmax(-1))
    new = moved.to_target_ids(moved.logits(out).argmax(-1))
    survives = old < 48
    assert survives.sum() > 50 and torch.equal(new[survives], old[survives])


def test_checkpoint_state_loads_weights_only(tmp_path) -> None:
    """RNG states are stored as tensors and plain values: a weights-only load restores every generator."""
    import random

    import numpy as np

    from specdec.train.run_folder import RUN_FORMAT
    from specdec.train.state import load_checkpoint, rng_state, set_rng_state

    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    random.gauss(0, 1), np.random.standard_normal()  # leave a cached gaussian behind in both
    path = tmp_path / "step_00000001.pt"
    torch.save({"format": RUN_FORMAT, "rng": rng_state(), "step": 1}, path)
    expected = (random.random(), random.gauss(0, 1), np.random.standard_normal(), torch.rand(2))
    set_rng_state(load_checkpoint(path)["rng"])
    got = (random.random(), random.gauss(0, 1), np.random.standard_normal(), torch.rand(2))
    assert got[:3] == expected[:3] and torch.equal(got[3], expected[3])


def test_checkpoint_with_pickled_objects_or_of_an_earlier_format_is_refused(tmp_path) -> None:
    import numpy as np

    from specdec.errors import SpecdecError
    from specdec.train.run_folder import RUN_FORMAT, RunFolderError
    from specdec.train.state import load_checkpoint, rng_state

    path = tmp_path / "step_00000001.pt"
    torch.save({"rng": {"numpy": np.random.get_state()}}, path)
    with pytest.raises(RunFolderError, match="weights-only"):
        load_checkpoint(path)
    torch.save({"rng": rng_state(), "step": 1}, path)  # no format: an earlier specdec's checkpoint
    with pytest.raises(RunFolderError, match=f"format 1, this version resumes format {RUN_FORMAT}.*--no-resume"):
        load_checkpoint(path)
    assert issubclass(RunFolderError, SpecdecError) and issubclass(RunFolderError, ValueError)


@pytest.mark.parametrize("recipe", ["eagle1", "eagle3"])
def test_init_from_target_copies_the_last_layer(target, recipe: str) -> None:
    from specdec.train.head_init import init_from_target_layer

    torch.manual_seed(0)
    head = build_head(recipe, target.config, eagle3_layers(4), 24)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    init_from_target_layer(head, target)
    last, h = target.model.layers[-1], target.config.hidden_size
    if recipe == "eagle3":
        layer = head.midlayer
        assert torch.equal(layer.self_attn.q_proj.weight[:, h:], last.self_attn.q_proj.weight)
        assert torch.equal(layer.self_attn.q_proj.weight[:, :h], before["midlayer.self_attn.q_proj.weight"][:, :h])
        assert torch.equal(layer.hidden_norm.weight, last.input_layernorm.weight)
        assert torch.equal(head.norm.weight, target.model.norm.weight)
    else:
        layer = head.layers[0]
        folded = last.self_attn.k_proj.weight * last.input_layernorm.weight
        torch.testing.assert_close(layer.self_attn.k_proj.weight, folded)
    assert torch.equal(layer.mlp.down_proj.weight, last.mlp.down_proj.weight)
    assert torch.equal(layer.self_attn.o_proj.weight, last.self_attn.o_proj.weight)
    assert torch.equal(head.fc.weight, before["fc.weight"])  # fc keeps its fresh init


def test_init_from_target_refuses_mismatch(target) -> None:
    from specdec.train.head_init import init_from_target_layer

    head = build_head("eagle1", target.config, (), 24, intermediate_size=target.config.intermediate_size * 2)
    with pytest.raises(ValueError, match="gate_proj"):
        init_from_target_layer(head, target)
    with pytest.raises(ValueError, match="init_head"):
        TrainConfig(recipe="eagle1", out="x", init_from_target=True, init_head="some/head")


def test_init_from_target_refuses_biases_the_head_cannot_hold() -> None:
    from specdec.train.head_init import init_from_target_layer

    biased = tiny_llama(vocab_size=32, hidden_size=32, num_layers=2)
    q_proj = biased.model.layers[-1].self_attn.q_proj
    q_proj.bias = torch.nn.Parameter(torch.ones(q_proj.out_features))
    head = build_head("eagle1", biased.config, (), 24)  # built without q/k/v biases
    with pytest.raises(ValueError, match="q_proj has a bias"):
        init_from_target_layer(head, biased)


def test_card_names_a_parent_head_relative_to_the_checkout(tmp_path, monkeypatch) -> None:
    from specdec.train.card import _parent_facts, head_facts
    from specdec.train.run_folder import write_parent_facts

    parent = tmp_path / "specdec" / "heads" / "h"
    parent.mkdir(parents=True)
    (parent / "training.json").write_text(json.dumps({"recipe": "eagle3", "steps": 7}))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    write_parent_facts(run, head_facts(parent))  # what the trainer keeps when the run starts
    assert _parent_facts(parent, run) == {"path": "specdec/heads/h", "recipe": "eagle3", "steps": 7}
    elsewhere = tmp_path.parent / "not-under-cwd"
    assert _parent_facts(elsewhere, run)["path"] == str(elsewhere)  # outside the checkout: kept as given
    # a run that kept no facts (its parent had none) records the parent's path only
    assert _parent_facts(parent, tmp_path / "no-facts") == {"path": "specdec/heads/h"}


def card_gaps(config: TrainConfig, facts: dict, card: str) -> set[str]:
    """The recipe options of ``config`` that a shipped head's ``training.json`` facts or its card text leave out."""
    listed = facts["recipe_options"]
    return {k for k, v in config.recipe_options().items() if listed.get(k, object()) != v or f'"{k}"' not in card}


@pytest.mark.parametrize(("recipe", "head_options"), [
    ("hass", {"init_from_target", "intermediate_size"}),
    ("eagle3", {"init_from_target", "intermediate_size", "draft_vocab_size", "eagle3_layers"}),
])  # fmt: skip
def test_model_card_lists_every_recipe_option(target, tmp_path, recipe: str, head_options: set[str]) -> None:
    """The card's recipe options are every option of the run's recipe: its loss's keyword arguments (read from the
    loss itself) and the head's options; a card that drops one is caught (control)."""
    import inspect

    from specdec.train.card import model_card, ship_head
    from specdec.train.recipes import RECIPES

    run = tmp_path / "run"
    cfg = config(run, recipe, max_steps=1, eval_tau_prompts=0, pass_decay=0.5, detach_hidden=True)
    train(cfg, target=target, train_data=greedy_data(target, 4), heldout_data=TokenDataset([]))
    dest = ship_head(run, tmp_path / "shipped", hardware="test cpu", title="t")
    facts, card = json.loads((dest / "training.json").read_text()), (dest / "README.md").read_text()
    loss = inspect.signature(RECIPES[recipe]).parameters.values()
    keywords = {p.name for p in loss if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(cfg.recipe_options()) == keywords | head_options
    assert card_gaps(cfg, facts, card) == set()
    dropped = "pass_decay" if recipe == "hass" else "detach_hidden"  # the two the cards used to leave out
    assert facts["recipe_options"][dropped] == (0.5 if recipe == "hass" else True)
    # control: a card written without one of the options is caught
    partial = {**facts, "recipe_options": {k: v for k, v in facts["recipe_options"].items() if k != dropped}}
    assert card_gaps(cfg, partial, model_card(partial, "t")) == {dropped}

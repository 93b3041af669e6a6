"""Self-distilled data: batched responses equal one-by-one decoding, shards resume, corruption is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specdec.errors import SpecdecError
from specdec.generate import StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.train.loops import ends_in_loop
from specdec.train.regenerate import Prompt, RegenerateConfig, first_turn_prompts, regenerate
from specdec.train.shards import ShardError, load_regenerated, read_manifest, read_shard

VOCAB, EOS, PAD = 64, 1, 0


class StubTokenizer:
    eos_token_id = EOS
    pad_token_id = PAD


def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=2, seed=3, logit_scale=0.5)


def prompts(n: int, vocab: int = VOCAB) -> list[Prompt]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        length = int(torch.randint(2, 9, (1,), generator=g))
        out.append(Prompt(100 + i, torch.randint(2, vocab, (length,), generator=g).tolist()))
    return out


CONFIG = RegenerateConfig(max_new_tokens=7, temperatures=(0.0, 0.7), shard_size=4, batch_size=3, loop_window=0)


def test_batched_greedy_responses_equal_one_by_one_decoding(tmp_path):
    m = model()
    manifest = regenerate(m, StubTokenizer(), tmp_path, 10, CONFIG, prompts=prompts(10), progress=False)
    assert [s["temperature"] for s in manifest["shards"]] == [0.0, 0.7, 0.0]
    assert [s["sequences"] for s in manifest["shards"]] == [4, 4, 2]
    card = (tmp_path / "README.md").read_text()
    assert "| all | 3 | 10 |" in card and manifest["shards"][2]["sha256"] in card
    data = load_regenerated(tmp_path)
    assert len(data) == 10
    target = HFTarget(m, max_len=32)
    by_record = {p.record_index: p for p in prompts(10)}
    shard0 = read_shard(tmp_path / manifest["shards"][0]["file"])
    for i, record in enumerate(shard0["record_index"].tolist()):  # a greedy shard: check every response
        prompt = by_record[record]
        example = data[i]
        assert example.input_ids[: len(prompt.ids)].tolist() == prompt.ids
        assert not example.loss_mask[: len(prompt.ids)].any() and example.loss_mask[len(prompt.ids) :].all()
        response = example.input_ids[len(prompt.ids) :].tolist()
        stop = StopCondition(max_new_tokens=CONFIG.max_new_tokens, eos_token_ids=[EOS])
        alone = VanillaGenerator(target).generate(torch.tensor(prompt.ids), SamplingParams(), stop).tokens
        assert response == alone  # left padding and batching change nothing
        assert bool(shard0["finished"][i]) == (response[-1] == EOS)


def test_resume_adds_shards_without_touching_earlier_ones(tmp_path):
    m = model()
    first = regenerate(m, StubTokenizer(), tmp_path, 4, CONFIG, prompts=prompts(12), progress=False)
    sha = first["shards"][0]["sha256"]
    (tmp_path / "shard-00001.safetensors.tmp").write_bytes(b"half-written")  # a run killed mid-write
    second = regenerate(m, StubTokenizer(), tmp_path, 12, CONFIG, prompts=prompts(12), progress=False)
    assert len(second["shards"]) == 3 and second["shards"][0]["sha256"] == sha
    records = [r for s in second["shards"] for r in read_shard(tmp_path / s["file"])["record_index"].tolist()]
    assert sorted(records) == [100 + i for i in range(12)]  # none duplicated, none lost
    again = regenerate(m, StubTokenizer(), tmp_path, 12, CONFIG, prompts=prompts(12), progress=False)
    assert again["shards"] == second["shards"]  # complete: nothing to do


def test_corrupt_or_missing_shard_is_named(tmp_path):
    m = model()
    regenerate(m, StubTokenizer(), tmp_path, 8, CONFIG, prompts=prompts(8), progress=False)
    path = tmp_path / "shard-00001.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ShardError, match="shard-00001.safetensors does not match its sha256"):
        load_regenerated(tmp_path)
    with pytest.raises(ShardError, match="shard-00001"):
        regenerate(m, StubTokenizer(), tmp_path, 12, CONFIG, prompts=prompts(12), progress=False)
    path.unlink()
    with pytest.raises(ShardError, match="shard-00001.safetensors is missing"):
        load_regenerated(tmp_path)


def test_other_settings_or_model_are_refused(tmp_path):
    regenerate(model(), StubTokenizer(), tmp_path, 4, CONFIG, prompts=prompts(4), progress=False)
    other = RegenerateConfig(max_new_tokens=7, temperatures=(0.7, 0.0), shard_size=4, batch_size=3)
    with pytest.raises(ValueError, match="other settings"):
        regenerate(model(), StubTokenizer(), tmp_path, 8, other, prompts=prompts(8), progress=False)
    different = tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=2, seed=4)
    with pytest.raises(ValueError, match="other settings"):
        regenerate(different, StubTokenizer(), tmp_path, 8, CONFIG, prompts=prompts(8), progress=False)
    assert len(read_manifest(tmp_path)["shards"]) == 1


def test_generation_settings_may_change_between_runs_and_are_recorded_per_shard(tmp_path):
    regenerate(model(), StubTokenizer(), tmp_path, 4, CONFIG, prompts=prompts(12), progress=False)
    faster = RegenerateConfig(max_new_tokens=9, temperatures=(0.0, 0.7), shard_size=4, batch_size=4, loop_window=6)
    manifest = regenerate(model(), StubTokenizer(), tmp_path, 12, faster, prompts=prompts(12), progress=False)
    generations = [s["generation"] for s in manifest["shards"]]
    assert generations[0] == {"max_new_tokens": 7, "batch_size": 3, "loop_window": 0, "batching": "continuous"}
    assert (
        generations[1]
        == generations[2]
        == {
            "max_new_tokens": 9,
            "batch_size": 4,
            "loop_window": 6,
            "batching": "continuous",
        }
    )
    card = (tmp_path / "README.md").read_text()
    assert "batch 3 (continuous), at most 7 new tokens, loop cut off" in card
    assert "loop cut at 6 repeated tokens" in card


def test_a_manifest_from_before_per_shard_settings_is_refused(tmp_path):
    regenerate(model(), StubTokenizer(), tmp_path, 4, CONFIG, prompts=prompts(8), progress=False)
    old = read_manifest(tmp_path)
    old["config"].update(old["shards"][0].pop("generation"))  # the first format: all settings in "config"
    del old["config"]["loop_window"], old["config"]["batching"], old["shards"][0]["looped"]
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    with pytest.raises(ShardError, match=r"manifest from before per-shard generation settings.*shard-00000"):
        regenerate(model(), StubTokenizer(), tmp_path, 8, CONFIG, prompts=prompts(8), progress=False)
    with pytest.raises(ShardError, match="before per-shard generation settings"):
        load_regenerated(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({**old, "format": 0}))
    with pytest.raises(ShardError, match="has format 0; this version reads format 1"):
        read_manifest(tmp_path)
    assert issubclass(ShardError, SpecdecError) and issubclass(ShardError, ValueError)


def test_the_committed_self_distilled_manifest_is_of_the_current_format():
    """The data in data/ (shards made per batch and continuously) reads without any upgrade."""
    folder = Path(__file__).resolve().parents[1] / "data" / "self-distilled" / "smollm2-135m-instruct"
    manifest = read_manifest(folder)
    assert manifest is not None and len(manifest["shards"]) > 100
    assert {s["generation"]["batching"] for s in manifest["shards"]} == {"per batch", "continuous"}
    first = manifest["shards"][0]
    assert read_shard(folder / first["file"], first["sha256"])["offsets"].shape[0] == first["sequences"] + 1


def looped(response: list[int] | torch.Tensor, window: int = 4) -> bool:
    response = torch.as_tensor(response, dtype=torch.long)
    return bool(ends_in_loop(response[None], torch.tensor([response.shape[0]]), window)[0])


def test_loop_detection():
    assert looped([9, 5, 6, 5, 6, 5, 6])  # period 2: the last 4 equal the 4 two positions before
    assert looped([9, 7, 7, 7, 7, 7])  # period 1
    assert not looped([9, 5, 6, 5, 6, 5])  # the loop must fill window + period tokens
    assert not looped([5, 6, 7, 5, 6, 7, 5])  # period 3 > window // 2
    assert not looped([7, 7, 7, 7])  # too short to show a loop
    assert looped([1, 2, 3, 5, 6, 7, 5, 6, 7, 5, 6, 7], window=6)
    # rows of different lengths in one call: entries past a row's length are ignored
    rows = torch.tensor([[9, 7, 7, 7, 7, 7, 3], [5, 6, 5, 6, 5, 6, 5]])
    assert ends_in_loop(rows, torch.tensor([6, 7]), 4).tolist() == [True, True]
    assert ends_in_loop(rows, torch.tensor([7, 5]), 4).tolist() == [False, False]


def test_a_looping_response_is_cut_after_the_loop_shows(tmp_path):
    config = RegenerateConfig(max_new_tokens=64, temperatures=(0.0,), shard_size=8, batch_size=8, loop_window=4)
    looper = tiny_llama(vocab_size=16, hidden_size=32, num_layers=2, seed=8, logit_scale=0.5)  # loops on 2 of 8
    manifest = regenerate(looper, StubTokenizer(), tmp_path, 8, config, prompts=prompts(8, vocab=16), progress=False)
    data = read_shard(tmp_path / manifest["shards"][0]["file"])
    status = data["finished"].tolist()
    assert 2 in status, "the tiny model never looped: the test cannot see the cut"
    assert manifest["shards"][0]["looped"] == status.count(2)
    offsets = data["offsets"].tolist()
    for i, flag in enumerate(status):
        response = data["tokens"][offsets[i] + int(data["prompt_lens"][i]) : offsets[i + 1]].to(torch.int64)
        shorter_does = any(looped(response[:n]) for n in range(5, response.shape[0]))
        assert looped(response) == (flag == 2) and not shorter_does  # cut exactly where the loop first shows


def test_compact_token_storage(tmp_path):
    regenerate(model(), StubTokenizer(), tmp_path, 4, CONFIG, prompts=prompts(4), progress=False)
    data = read_shard(tmp_path / "shard-00000.safetensors")
    assert data["tokens"].dtype == torch.uint16
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["shards"][0]["tokens"] == data["tokens"].shape[0]


@pytest.mark.parametrize("kwargs", [{"temperatures": ()}, {"temperatures": (-1.0,)}, {"top_p": 0.0}, {"shard_size": 0}])
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        RegenerateConfig(**kwargs)


@pytest.mark.slow
def test_first_turn_prompts_with_the_real_template():
    from transformers import AutoTokenizer

    from specdec.models import cache_dir, load_smollm2

    load_smollm2()  # makes sure the converted folder with the tokenizer exists
    tok = AutoTokenizer.from_pretrained(cache_dir() / "smollm2-135m-instruct")
    records = [
        {"id": "a_0", "conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello"}]},
        {"id": "b_0", "conversations": [{"from": "gpt", "value": "orphan answer"}]},  # no user turn
        {"id": "c_0", "conversations": [{"from": "human", "value": "word " * 400}, {"from": "gpt", "value": "ok"}]},
        {
            "id": "d_0",
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "Why?"},
                {"from": "gpt", "value": "Because."},
                {"from": "human", "value": "second turn, not used"},
            ],
        },
    ]
    out = list(first_turn_prompts(tok, iter(records), RegenerateConfig(heldout_fraction=0.0)))
    assert [p.record_index for p in out] == [0, 3]  # b has no user turn, c is too long
    text = tok.decode(out[1].ids)
    assert "Be brief." in text and "Why?" in text and "second turn" not in text
    assert text.rstrip().endswith("assistant")  # ends with the generation prompt

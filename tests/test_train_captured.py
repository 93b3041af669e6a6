"""Features captured during generation serve extraction: same features, no target forward for what was captured."""

from __future__ import annotations

import json

import pytest
import torch

from specdec.models import tiny_llama
from specdec.train.captured import CapturedFeatures, CaptureSettings
from specdec.train.features import FeatureSpec, extract_features
from specdec.train.regenerate import Prompt, RegenerateConfig, regenerate
from specdec.train.shards import load_regenerated

VOCAB, EOS, PAD = 64, 1, 0
SPEC = FeatureSpec(final=True, layers=(0, 2, 3))
CONFIG = RegenerateConfig(max_new_tokens=9, temperatures=(0.0, 0.7), shard_size=4, batch_size=3, loop_window=0)


class StubTokenizer:
    eos_token_id = EOS
    pad_token_id = PAD


def model(seed: int = 3):
    return tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=4, seed=seed, logit_scale=0.5)


def prompts(n: int) -> list[Prompt]:
    g = torch.Generator().manual_seed(0)
    return [
        Prompt(i, torch.randint(2, VOCAB, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist())
        for i in range(n)
    ]


class CountingTarget(torch.nn.Module):
    """The target, counting the sequences its extraction forwards see."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config, self.sequences = inner, inner.config, 0

    def model(self, input_ids, **kwargs):
        self.sequences += input_ids.shape[0]
        return self.inner.model(input_ids=input_ids, **kwargs)

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()


def test_extraction_takes_captured_features_and_runs_the_target_for_the_rest(tmp_path):
    m = model()
    capture = CaptureSettings(tmp_path / "cap", m, SPEC)
    regenerate(m, StubTokenizer(), tmp_path / "data", 8, CONFIG, prompts=prompts(8), progress=False, capture=capture)
    regenerate(m, StubTokenizer(), tmp_path / "data", 12, CONFIG, prompts=prompts(12), progress=False)  # no capture
    data = load_regenerated(tmp_path / "data")
    assert len(data) == 12 and len(list((tmp_path / "cap").glob("shard-*.safetensors"))) == 2
    counting = CountingTarget(m)
    captured = CapturedFeatures(tmp_path / "cap", counting, SPEC, torch.bfloat16)
    assert len(captured) == 8
    fast = extract_features(counting, data, tmp_path / "fast", SPEC, progress=False, captured=captured)
    assert counting.sequences == 4  # only the shard generated without capture ran through the target
    assert json.loads((tmp_path / "fast" / "index.json").read_text())["captured_sequences"] == 8
    slow = extract_features(m, data, tmp_path / "slow", SPEC, progress=False)
    for i in range(len(data)):
        for key in ("final", "fused"):
            a, b = fast[i][key].float(), slow[i][key].float()
            assert a.shape == b.shape
            assert float((a - b).norm(dim=-1).max() / b.norm(dim=-1).min()) < 2e-2  # bf16 storage, batched forward
        assert torch.equal(fast[i]["input_ids"], slow[i]["input_ids"])


def test_captured_features_are_refused_for_another_target_dtype_or_spec(tmp_path):
    m = model()
    capture = CaptureSettings(tmp_path / "cap", m, SPEC)
    regenerate(m, StubTokenizer(), tmp_path / "data", 4, CONFIG, prompts=prompts(4), progress=False, capture=capture)
    with pytest.raises(ValueError, match="another target"):
        CapturedFeatures(tmp_path / "cap", model(seed=4), SPEC, torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16"):
        CapturedFeatures(tmp_path / "cap", m, SPEC, torch.float32)
    with pytest.raises(ValueError, match="does not cover"):
        CapturedFeatures(tmp_path / "cap", m, FeatureSpec(final=True, layers=(1, 2, 3)), torch.bfloat16)
    with pytest.raises(ValueError, match="captured with"):
        CaptureSettings(tmp_path / "cap", m, FeatureSpec(final=True, layers=(1,)))
    with pytest.raises(ValueError, match="not a capture folder"):
        CapturedFeatures(tmp_path / "data", m, SPEC, torch.bfloat16)


def test_a_sequence_truncated_for_training_is_found_by_its_prefix(tmp_path):
    m = model()
    capture = CaptureSettings(tmp_path / "cap", m, SPEC)
    regenerate(m, StubTokenizer(), tmp_path / "data", 4, CONFIG, prompts=prompts(4), progress=False, capture=capture)
    cut = 6
    data = load_regenerated(tmp_path / "data", max_len=cut)
    assert any(len(e.input_ids) == cut for e in data)
    whole = CapturedFeatures(tmp_path / "cap", m, SPEC, torch.bfloat16)
    assert all(whole.get(e.input_ids) is None for e in data if len(e.input_ids) == cut)  # control: not by content
    prefix = CapturedFeatures(tmp_path / "cap", m, SPEC, torch.bfloat16, max_len=cut)
    full = load_regenerated(tmp_path / "data")
    for short, long in zip(data, full, strict=True):
        final, fused = prefix.get(short.input_ids)
        assert final.shape[0] == len(short.input_ids)
        assert torch.equal(final, whole.get(long.input_ids)[0][: len(short.input_ids)])


def test_a_capture_file_from_other_settings_or_a_bf16_target_is_refused(tmp_path):
    m = model()
    regen = dict(prompts=prompts(4), progress=False)
    regenerate(
        m, StubTokenizer(), tmp_path / "a", 4, CONFIG, capture=CaptureSettings(tmp_path / "ca", m, SPEC), **regen
    )
    other = FeatureSpec(final=True, layers=(1, 2, 3))
    regenerate(
        m, StubTokenizer(), tmp_path / "b", 4, CONFIG, capture=CaptureSettings(tmp_path / "cb", m, other), **regen
    )
    (tmp_path / "cb" / "shard-00000.safetensors").replace(tmp_path / "ca" / "shard-00001.safetensors")
    with pytest.raises(ValueError, match="shard-00001.safetensors was written with other settings"):
        CapturedFeatures(tmp_path / "ca", m, SPEC, torch.bfloat16)
    (tmp_path / "ca" / "shard-00001.safetensors").unlink()
    assert len(CapturedFeatures(tmp_path / "ca", m, SPEC, torch.bfloat16)) == 4
    with pytest.raises(ValueError, match="captured from the target in float32, extraction runs it in bfloat16"):
        CapturedFeatures(tmp_path / "ca", model().to(torch.bfloat16), SPEC, torch.bfloat16)

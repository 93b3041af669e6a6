"""Target feature extraction: the right tensors (post-norm feature, inputs of the fused layers), sharded cache,
reuse and resume, batching with padding, collation."""

from __future__ import annotations

import json

import pytest
import torch

from specdec.models import tiny_llama
from specdec.train.data import TokenDataset
from specdec.train.features import FeatureSpec, FeatureStore, collate, eagle3_layers, extract_features


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=32, hidden_size=32, num_layers=6)


def dataset(n: int = 5, seed: int = 0) -> TokenDataset:
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, 32, (int(torch.randint(5, 14, (1,), generator=g)),), generator=g) for _ in range(n)]
    masks = [torch.arange(len(x)) % 3 != 0 for x in ids]
    return TokenDataset.from_sequences(ids, masks)


def layer_inputs(target, ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """Inputs of every decoder layer, captured with forward pre-hooks (independent of ``hidden_states``)."""
    seen: dict[int, torch.Tensor] = {}
    hooks = []
    for i, layer in enumerate(target.model.layers):

        def hook(module, args, kwargs, i=i):
            seen[i] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

        hooks.append(layer.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            logits = target(ids[None]).logits[0]
    finally:
        for h in hooks:
            h.remove()
    seen[-1] = logits
    return seen


def test_features_are_post_norm_final_and_fused_layer_inputs(target, tmp_path) -> None:
    data = dataset()
    layers = eagle3_layers(6)
    assert layers == (2, 3, 3)
    store = extract_features(target, data, tmp_path, FeatureSpec(True, layers), dtype=torch.float32, progress=False)
    assert len(store) == len(data) and store.num_tokens == data.num_tokens
    for i, example in enumerate(data):
        item = store[i]
        assert torch.equal(item["input_ids"], example.input_ids)
        assert torch.equal(item["loss_mask"], example.loss_mask)
        ref = layer_inputs(target, example.input_ids)
        # lm_head(final) reproduces the target logits: final is the post-norm feature
        torch.testing.assert_close(target.lm_head(item["final"]), ref[-1], atol=1e-5, rtol=1e-5)
        expected = torch.cat([ref[i] for i in layers], -1)[0]
        torch.testing.assert_close(item["fused"], expected, atol=1e-6, rtol=1e-6)


def test_sharding_reuse_resume_and_padding(target, tmp_path) -> None:
    data = dataset(9, seed=1)
    spec = FeatureSpec(True, ())
    full = extract_features(target, data, tmp_path / "a", spec, dtype=torch.float32, shard_tokens=20, progress=False)
    shards = sorted((tmp_path / "a").glob("shard_*.safetensors"))
    assert len(shards) > 2
    reference = [full[i]["final"].clone() for i in range(len(data))]  # in memory, before the files change
    # a complete folder with the same fingerprint is reused untouched
    stamp = [s.stat().st_mtime_ns for s in shards]
    extract_features(target, data, tmp_path / "a", spec, dtype=torch.float32, shard_tokens=20, progress=False)
    assert [s.stat().st_mtime_ns for s in shards] == stamp
    # interrupted run: drop the last shard and mark incomplete -> resumes and ends identical
    index = json.loads((tmp_path / "a" / "index.json").read_text())
    last = index["shards"].pop()
    (tmp_path / "a" / last["file"]).unlink()
    index["complete"] = False
    (tmp_path / "a" / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError):
        FeatureStore(tmp_path / "a")
    resumed = extract_features(target, data, tmp_path / "a", spec, dtype=torch.float32, shard_tokens=20, progress=False)
    assert len(list((tmp_path / "a").glob("shard_*.safetensors"))) == len(shards)
    # batched with right padding (and bf16 storage) gives the same features
    padded = extract_features(target, data, tmp_path / "b", spec, batch_size=4, progress=False)
    for i in range(len(data)):
        assert torch.equal(resumed[i]["final"], reference[i])
        assert padded[i]["final"].dtype == torch.bfloat16
        torch.testing.assert_close(padded[i]["final"].float(), reference[i], atol=3e-2, rtol=2e-2)
    # different data -> different fingerprint -> recomputed
    other = extract_features(target, dataset(3, seed=2), tmp_path / "a", spec, dtype=torch.float32, progress=False)
    assert len(other) == 3


def test_collate_pads_right(target, tmp_path) -> None:
    data = TokenDataset.from_sequences([[1, 2, 3], [4, 5]], [[0, 1, 1], [1, 1]])
    store = extract_features(target, data, tmp_path, FeatureSpec(True, (2,)), progress=False)
    batch = collate([store[0], store[1]], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 5, 0]]
    assert batch["loss_mask"].tolist() == [[False, True, True], [True, True, False]]
    assert batch["valid"].tolist() == [[True, True, True], [True, True, False]]
    assert batch["final"].dtype == torch.float32 and batch["final"].shape == (2, 3, 32)
    assert batch["fused"].shape == (2, 3, 32) and float(batch["fused"][1, 2].abs().sum()) == 0.0


def test_superset_cache_serves_a_smaller_spec(target, tmp_path) -> None:
    data = dataset(4, seed=3)
    full = extract_features(target, data, tmp_path, FeatureSpec(True, (0, 2)), dtype=torch.float32, progress=False)
    shards = sorted(tmp_path.glob("shard_*.safetensors"))
    stamp = [s.stat().st_mtime_ns for s in shards]
    # EAGLE-1 asks for the final features only: the EAGLE-3 cache is reused as is and reads "final" only
    small = extract_features(target, data, tmp_path, FeatureSpec(True, ()), dtype=torch.float32, progress=False)
    assert [s.stat().st_mtime_ns for s in shards] == stamp
    assert set(small[0]) == {"input_ids", "loss_mask", "final"}
    assert torch.equal(small[1]["final"], full[1]["final"])
    # other layers are not covered: a store cannot be opened with them, and extraction recomputes
    with pytest.raises(ValueError, match="does not cover"):
        FeatureStore(tmp_path, FeatureSpec(True, (1,)))
    other = extract_features(target, data, tmp_path, FeatureSpec(True, (1,)), dtype=torch.float32, progress=False)
    assert other.spec.layers == (1,)

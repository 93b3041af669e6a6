"""Official-format EAGLE checkpoints: key layouts, round trips, vLLM layout, safe pickles, strict errors, quirks."""

from __future__ import annotations

import json
import pathlib
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from specdec.checkpoints import CheckpointError, export_eagle3, load_eagle_head, read_weights, save_eagle_head
from specdec.drafters.eagle_modules import (
    Eagle1Head,
    Eagle3Head,
    EagleConfig,
    MissingEmbeddingError,
    causal_bias,
)
from specdec.interfaces import VocabMismatchError
from specdec.models import tiny_llama

V, H, INTER = 16, 32, 48

# The official key lists (EAGLE-1/2/HASS: SafeAILab/EAGLE; EAGLE-3: the SGLang / SpecForge layout).
EAGLE1_KEYS = {
    "fc.weight",
    "fc.bias",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "layers.0.post_attention_layernorm.weight",
}
EAGLE3_KEYS = {
    "fc.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.post_attention_layernorm.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
}
VLLM_KEYS = {k.replace("midlayer.", "layers.0.") for k in EAGLE3_KEYS - {"d2t", "t2d"}} | {"draft_id_to_target_id"}


def official_config(**kw) -> dict:
    """A config.json as the reference releases write it (no bias / rope_theta fields)."""
    raw = {
        "architectures": ["LlamaForCausalLM"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 2048,
        "model_type": "llama",
        "num_attention_heads": 4,
        "num_hidden_layers": 1,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "float32",
        "vocab_size": V,
    }
    raw.update(kw)
    return raw


def randomize(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.3 * noise if "norm" in name else 0.15 * noise)


def eagle1_head(seed: int = 0, **kw) -> Eagle1Head:
    head = Eagle1Head(EagleConfig.from_hf(official_config(**kw))).eval()
    randomize(head, seed)
    return head


def eagle3_head(seed: int = 0, draft_vocab: int = 10, **kw) -> Eagle3Head:
    cfg = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=draft_vocab, **kw)
    head = Eagle3Head(EagleConfig.from_hf(cfg)).eval()
    randomize(head, seed)
    if draft_vocab < V:
        head.set_vocab_map(torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:draft_vocab].sort().values)
    return head


def write_checkpoint(folder: pathlib.Path, config: dict, state: dict, fmt: str = "safetensors") -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    else:
        torch.save(state, folder / "pytorch_model.bin")
    return folder


def eagle1_outputs(head: Eagle1Head, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    emb, feat = torch.randn(1, 5, H, generator=g), torch.randn(1, 5, H, generator=g)
    with torch.no_grad():
        return head(emb, feat, torch.arange(5)[None], causal_bias(5))[0]


def eagle3_logits(head: Eagle3Head, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    emb, fused = torch.randn(1, 5, H, generator=g), torch.randn(1, 5, 3 * H, generator=g)
    with torch.no_grad():
        out, _ = head(emb, head.project(fused), torch.arange(5)[None], causal_bias(5))
        return head.target_logits(head.logits(out))


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=V, hidden_size=H, num_layers=4)


# ----------------------------------------------------------------------------------------------- key layouts


def test_saved_eagle1_has_the_official_keys(tmp_path):
    save_eagle_head(eagle1_head(), tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == EAGLE1_KEYS
    assert state["fc.weight"].shape == (H, 2 * H)
    assert state["layers.0.self_attn.k_proj.weight"].shape == (2 * H // 4, H)  # GQA: 2 kv heads of dim 8
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["bias"] is True and config["rope_theta"] == 10000.0


def test_saved_eagle3_has_the_official_keys(tmp_path):
    save_eagle_head(eagle3_head(), tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == EAGLE3_KEYS
    assert state["fc.weight"].shape == (H, 3 * H)
    assert state["midlayer.self_attn.q_proj.weight"].shape == (H, 2 * H)
    assert state["midlayer.self_attn.o_proj.weight"].shape == (H, H)
    assert state["lm_head.weight"].shape == (10, H)
    assert state["d2t"].dtype == torch.int64 and state["d2t"].shape == (10,)
    assert state["t2d"].dtype == torch.bool and state["t2d"].shape == (V,) and int(state["t2d"].sum()) == 10
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["draft_vocab_size"] == 10 and config["vocab_size"] == V
    # Equal widths: no target_hidden_size, which the official EAGLE code reads as "embedding in the file".
    assert "target_hidden_size" not in config and config["tie_word_embeddings"] is False


def test_eagle3_export_with_a_wider_target_carries_the_embedding(tmp_path):
    """The official EAGLE loader: ``target_hidden_size`` present -> the head's own ``embed_tokens.weight`` is used
    (a random one if the file has none, silently). So an export that must write the field also writes the
    embedding, or refuses."""
    head = eagle3_head(target_hidden_size=2 * H)
    with pytest.raises(ValueError, match="attach the target's embedding"):
        save_eagle_head(head, tmp_path / "refused")
    embedding = torch.randn(V, H)
    head.attach_target_embedding(embedding)
    save_eagle_head(head, tmp_path / "ok")
    config = json.loads((tmp_path / "ok" / "config.json").read_text())
    state = load_file(str(tmp_path / "ok" / "model.safetensors"))
    assert config["target_hidden_size"] == 2 * H
    assert torch.equal(state["embed_tokens.weight"], embedding)


# ------------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("bias", [True, False])
def test_eagle1_round_trip(tmp_path, bias):
    head = eagle1_head(1, bias=bias, qkv_bias=True)
    save_eagle_head(head, tmp_path)
    loaded = load_eagle_head(tmp_path)
    assert isinstance(loaded, Eagle1Head)
    assert loaded.config.bias is bias and (loaded.fc.bias is not None) is bias
    assert loaded.layers[0].self_attn.q_proj.bias is not None
    torch.testing.assert_close(eagle1_outputs(loaded), eagle1_outputs(head), rtol=0, atol=0)


def test_eagle3_round_trip_and_aux_ids(tmp_path):
    head = eagle3_head(2)
    head_cfg = head.config.model_copy(update={"aux_layer_ids": (1, 2, 3)})
    head.config = head_cfg
    save_eagle_head(head, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    # vLLM convention (input of layer i) at the top level, SGLang/SpecForge convention (output of layer i) nested
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    loaded = load_eagle_head(tmp_path)
    assert isinstance(loaded, Eagle3Head)
    assert loaded.config.aux_layer_ids == (1, 2, 3)
    assert torch.equal(loaded.d2t, head.d2t) and torch.equal(loaded.t2d, head.t2d)
    torch.testing.assert_close(eagle3_logits(loaded), eagle3_logits(head), rtol=0, atol=0)


def test_sglang_only_aux_ids_are_shifted_to_layer_inputs(tmp_path):
    head = eagle3_head(3)
    state = head.state_dict()
    config = official_config(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=10,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
    )
    loaded = load_eagle_head(write_checkpoint(tmp_path, config, state))
    assert loaded.config.aux_layer_ids == (2, 16, 29)


def test_vllm_export_layout_loads_back(tmp_path):
    head = eagle3_head(4)
    export_eagle3(head, tmp_path, layout="vllm", aux_layer_ids=(2, 2, 1))
    state = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == VLLM_KEYS
    assert torch.equal(state["draft_id_to_target_id"], head.d2t)  # offsets, like d2t
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 2, 1]
    loaded = load_eagle_head(tmp_path)
    assert isinstance(loaded, Eagle3Head)
    assert torch.equal(loaded.d2t, head.d2t)
    assert torch.equal(loaded.t2d, head.t2d)  # rebuilt from d2t
    torch.testing.assert_close(eagle3_logits(loaded), eagle3_logits(head), rtol=0, atol=0)
    with pytest.raises(ValueError, match="layout"):
        export_eagle3(head, tmp_path / "x", layout="trt")


# ----------------------------------------------------------------------------------------------- safe pickles


class _Payload:
    """Unpickling this creates a file: proof that code ran."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_bin_checkpoint_loads_with_weights_only(tmp_path):
    head = eagle1_head(5)
    loaded = load_eagle_head(write_checkpoint(tmp_path, official_config(), head.state_dict(), fmt="bin"))
    torch.testing.assert_close(eagle1_outputs(loaded), eagle1_outputs(head), rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_malicious_pickle_is_refused_without_running(tmp_path, writer):
    marker = tmp_path / "pwned"
    # The payload really executes when unpickled without protection (so the check below can fail).
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()
    marker.unlink()

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(official_config()))
    state = dict(eagle1_head().state_dict())
    state["evil"] = _Payload(marker)
    if writer == "pickle":
        with open(folder / "pytorch_model.bin", "wb") as f:
            pickle.dump(state, f)
    else:
        torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="cannot read weights"):
        load_eagle_head(folder)
    with pytest.raises(CheckpointError):
        read_weights(folder / "pytorch_model.bin")
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------- strict errors


def test_missing_unexpected_and_shape_errors_are_reported_together(tmp_path):
    state = dict(eagle1_head().state_dict())
    del state["layers.0.mlp.up_proj.weight"]
    state["layers.0.input_layernorm.weight"] = torch.ones(H)  # EAGLE-1 layer 0 has no input norm
    state["layers.0.self_attn.o_proj.weight"] = torch.zeros(H, H + 1)
    with pytest.raises(CheckpointError) as err:
        load_eagle_head(write_checkpoint(tmp_path, official_config(), state))
    msg = str(err.value)
    assert "missing keys (1): layers.0.mlp.up_proj.weight" in msg
    assert "unexpected keys (1): layers.0.input_layernorm.weight" in msg
    assert "layers.0.self_attn.o_proj.weight: checkpoint (32, 33) vs expected (32, 32)" in msg


def test_eagle3_extra_layer_and_missing_lm_head_are_reported(tmp_path):
    state = dict(eagle3_head().state_dict())
    del state["lm_head.weight"]
    state["layers.1.mlp.up_proj.weight"] = torch.zeros(INTER, H)
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10)
    with pytest.raises(CheckpointError) as err:
        load_eagle_head(write_checkpoint(tmp_path, config, state))
    assert "lm_head.weight" in str(err.value) and "layers.1.mlp.up_proj.weight" in str(err.value)


def test_target_mismatch_on_load(tmp_path):
    save_eagle_head(eagle1_head(), tmp_path)
    with pytest.raises(VocabMismatchError):
        load_eagle_head(tmp_path, target_model=tiny_llama(vocab_size=V + 2, hidden_size=H, num_layers=2))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_eagle_head(tmp_path / "nope.d")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="neither"):
        load_eagle_head(tmp_path / "empty")


# ---------------------------------------------------------------------------------------------- config quirks


def test_fc_bias_absent_in_config_means_true(tmp_path):
    with_bias = eagle1_head(6, bias=True).state_dict()
    loaded = load_eagle_head(write_checkpoint(tmp_path / "a", official_config(), with_bias))
    assert loaded.fc.bias is not None and loaded.config.bias is True
    # without the bias weight, a config that does not say bias=false is a missing key ...
    no_bias = {k: v for k, v in with_bias.items() if k != "fc.bias"}
    with pytest.raises(CheckpointError, match="missing keys.*fc.bias"):
        load_eagle_head(write_checkpoint(tmp_path / "b", official_config(), no_bias))
    # ... and loads once the config says so (LLaMA-3 heads)
    loaded = load_eagle_head(write_checkpoint(tmp_path / "c", official_config(bias=False), no_bias))
    assert loaded.fc.bias is None


def test_eagle3_layer_count_claim_is_corrected_from_weights(tmp_path):
    head = eagle3_head(7)
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10, num_hidden_layers=32)
    loaded = load_eagle_head(write_checkpoint(tmp_path, config, head.state_dict()))
    assert loaded.config.num_hidden_layers == 1
    torch.testing.assert_close(eagle3_logits(loaded), eagle3_logits(head), rtol=0, atol=0)


def test_identity_vocab_map_when_d2t_absent(tmp_path):
    head = eagle3_head(8, draft_vocab=V)
    state = {k: v for k, v in head.state_dict().items() if k not in ("d2t", "t2d")}
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=V)
    loaded = load_eagle_head(write_checkpoint(tmp_path / "a", config, state))
    assert torch.equal(loaded.to_target_ids(torch.arange(V)), torch.arange(V))
    assert loaded.t2d.all()
    logits = eagle3_logits(loaded)
    assert torch.isfinite(logits).all()
    # a reduced draft vocab without d2t cannot be mapped: reported as missing
    small = eagle3_head(8, draft_vocab=10)
    state = {k: v for k, v in small.state_dict().items() if k not in ("d2t", "t2d")}
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10)
    with pytest.raises(CheckpointError, match="missing keys.*d2t"):
        load_eagle_head(write_checkpoint(tmp_path / "b", config, state))


def test_d2t_out_of_range_is_refused(tmp_path):
    state = dict(eagle3_head(9).state_dict())
    state["d2t"] = torch.full((10,), V, dtype=torch.long)
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10)
    with pytest.raises(CheckpointError, match="outside"):
        load_eagle_head(write_checkpoint(tmp_path, config, state))


def test_absent_embedding_comes_from_the_target(tmp_path, target):
    save_eagle_head(eagle1_head(10), tmp_path)
    alone = load_eagle_head(tmp_path)
    assert alone.embed_tokens is None
    with pytest.raises(MissingEmbeddingError):
        alone.embed(torch.tensor([1, 2]))
    attached = load_eagle_head(tmp_path, target_model=target)
    ids = torch.tensor([1, 2, 3])
    assert torch.equal(attached.embed(ids), target.get_input_embeddings()(ids))
    assert "embed_tokens.weight" not in attached.state_dict()  # the shared embedding is never saved with the head


def test_present_embedding_is_loaded(tmp_path, target):
    head = Eagle1Head(EagleConfig.from_hf(official_config()), with_embedding=True)
    randomize(head, 11)
    save_eagle_head(head, tmp_path)
    assert set(load_file(str(tmp_path / "model.safetensors"))) == EAGLE1_KEYS | {"embed_tokens.weight"}
    loaded = load_eagle_head(tmp_path, target_model=target)
    ids = torch.tensor([3, 4])
    assert torch.equal(loaded.embed(ids), head.embed_tokens(ids))
    assert not torch.equal(loaded.embed(ids), target.get_input_embeddings()(ids))


def test_kind_detection_and_dtype(tmp_path):
    head = eagle3_head(12).to(torch.bfloat16)
    save_eagle_head(head, tmp_path)
    loaded = load_eagle_head(tmp_path)
    assert isinstance(loaded, Eagle3Head) and loaded.fc.weight.dtype == torch.bfloat16
    assert loaded.d2t.dtype == torch.int64
    assert load_eagle_head(tmp_path, dtype=torch.float32).fc.weight.dtype == torch.float32

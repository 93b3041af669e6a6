"""Official-format EAGLE checkpoints: key layouts, round trips, vLLM layout, sharded weights, the speculators format,
safe pickles, strict errors, quirks. (What each server reads from an export: tests/test_checkpoint_consumers.py.)"""

from __future__ import annotations

import json
import pathlib
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from specdec.checkpoints import (
    CheckpointError,
    export_eagle3,
    export_speculators,
    load_eagle_head,
    read_weights,
    save_eagle_head,
)
from specdec.eagle.config import EagleConfig
from specdec.eagle.heads import Eagle1Head, Eagle3Head, MissingEmbeddingError
from specdec.eagle.layers import causal_bias
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
# vLLM renames d2t to draft_id_to_target_id itself; a file key of that name is skipped (identity map), so: d2t.
VLLM_KEYS = {k.replace("midlayer.", "layers.0.") for k in EAGLE3_KEYS - {"t2d"}}
SPECULATORS_EAGLE3_KEYS = {k.replace("midlayer.", "layers.0.") for k in EAGLE3_KEYS}
SPECULATORS_EAGLE1_KEYS = {
    k.replace("fc.", "fusion_fc.", 1) if k.startswith("fc.") else k.replace("layers.0.", "transformer.")
    for k in EAGLE1_KEYS
}


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
    assert torch.equal(state["d2t"], head.d2t)
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


def test_vllm_internal_key_draft_id_to_target_id_is_refused(tmp_path):
    """vLLM's in-memory name for d2t is no file key any reader takes (vLLM skips it): refused, naming the key."""
    head = eagle3_head(13)
    state = {k.replace("midlayer.", "layers.0."): v for k, v in head.state_dict().items() if k != "t2d"}
    state["draft_id_to_target_id"] = state.pop("d2t")
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10)
    with pytest.raises(CheckpointError, match="draft_id_to_target_id.*rename the tensor to d2t"):
        load_eagle_head(write_checkpoint(tmp_path, config, state))


def test_servers_would_misread_qkv_biases_so_export_refuses(tmp_path):
    head = eagle3_head(14, qkv_bias=True)
    for layout in ("sglang", "vllm", "speculators"):
        with pytest.raises(ValueError, match="q/k/v biases"):
            export_eagle3(head, tmp_path / layout, layout=layout)
    save_eagle_head(head, tmp_path / "ours")  # our own loader reads it back
    torch.testing.assert_close(eagle3_logits(load_eagle_head(tmp_path / "ours")), eagle3_logits(head), rtol=0, atol=0)


# -------------------------------------------------------------------------------------------- sharded weights


def write_sharded(folder: pathlib.Path, config: dict, state: dict, fmt: str = "safetensors", shards: int = 3) -> dict:
    """Split ``state`` over ``shards`` files plus an index, as transformers' ``save_pretrained`` does."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    ext, index_name = (
        ("safetensors", "model.safetensors.index.json")
        if fmt == "safetensors"
        else ("bin", "pytorch_model.bin.index.json")
    )
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.{ext}"
        part = {k: state[k].contiguous() for k in names[i::shards]}
        if fmt == "safetensors":
            save_file(part, str(folder / shard))
        else:
            torch.save(part, folder / shard)
        weight_map.update(dict.fromkeys(part, shard))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / index_name).write_text(json.dumps(index))
    return index


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_sharded_heads_load(tmp_path, fmt):
    head3 = eagle3_head(15)
    config3 = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10)
    write_sharded(tmp_path / "e3", config3, head3.state_dict(), fmt)
    assert not (tmp_path / "e3" / "model.safetensors").exists()
    loaded = load_eagle_head(tmp_path / "e3")
    assert isinstance(loaded, Eagle3Head) and torch.equal(loaded.d2t, head3.d2t)
    torch.testing.assert_close(eagle3_logits(loaded), eagle3_logits(head3), rtol=0, atol=0)
    head1 = eagle1_head(16)
    write_sharded(tmp_path / "e1", official_config(), head1.state_dict(), fmt, shards=2)
    torch.testing.assert_close(eagle1_outputs(load_eagle_head(tmp_path / "e1")), eagle1_outputs(head1), rtol=0, atol=0)


def test_sharded_errors_name_the_file(tmp_path):
    state = eagle1_head(17).state_dict()
    index_path = tmp_path / "model.safetensors.index.json"

    index = write_sharded(tmp_path, official_config(), state)
    index_path.write_text(json.dumps({"weight_map": []}))
    with pytest.raises(CheckpointError, match=r"malformed shard index .*model.safetensors.index.json"):
        load_eagle_head(tmp_path)
    index_path.write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot read shard index"):
        load_eagle_head(tmp_path)
    index_path.write_text(json.dumps({"weight_map": {"fc.weight": "../elsewhere.safetensors"}}))
    with pytest.raises(CheckpointError, match="is not a file name"):
        load_eagle_head(tmp_path)

    missing = dict(index["weight_map"], **{"fc.weight": "model-00009-of-00009.safetensors"})
    index_path.write_text(json.dumps({"weight_map": missing}))
    with pytest.raises(CheckpointError, match="names shard model-00009-of-00009.safetensors, which is missing"):
        load_eagle_head(tmp_path)

    promised = dict(index["weight_map"], **{"layers.0.extra.weight": index["weight_map"]["fc.weight"]})
    index_path.write_text(json.dumps({"weight_map": promised}))
    with pytest.raises(CheckpointError, match=r"model-0000\d-of-00003.safetensors lacks layers.0.extra.weight"):
        load_eagle_head(tmp_path)

    unlisted = {k: v for k, v in index["weight_map"].items() if k != "fc.weight"}
    index_path.write_text(json.dumps({"weight_map": unlisted}))
    with pytest.raises(CheckpointError, match="holds fc.weight, which model.safetensors.index.json does not list"):
        load_eagle_head(tmp_path)

    # a consistent shard set that lacks a key the head needs: the usual key report, naming the index
    no_bias = {k: v for k, v in state.items() if k != "fc.bias"}
    write_sharded(tmp_path / "b", official_config(), no_bias)
    with pytest.raises(CheckpointError, match=r"(?s)index.json does not match .*missing keys \(1\): fc.bias"):
        load_eagle_head(tmp_path / "b")


# ------------------------------------------------------------------------------------------ speculators format


def test_speculators_eagle3_round_trip(tmp_path):
    head = eagle3_head(18)
    head.config = head.config.model_copy(update={"aux_layer_ids": (1, 2, 3)})
    export_eagle3(head, tmp_path, layout="speculators", verifier="org/target", speculative_tokens=4)
    state = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == SPECULATORS_EAGLE3_KEYS
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["draft_vocab_size"] == 10
    assert config["norm_before_residual"] is False and config["target_hidden_size"] is None
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    layer = config["transformer_layer_config"]
    assert layer["hidden_size"] == H and layer["vocab_size"] == V and layer["num_key_value_heads"] == 2
    assert layer["tie_word_embeddings"] is False and layer["num_hidden_layers"] == 1
    spec = config["speculators_config"]
    assert spec["verifier"]["name_or_path"] == "org/target"
    assert spec["proposal_methods"][0]["speculative_tokens"] == 4 and spec["default_proposal_method"] == "greedy"
    loaded = load_eagle_head(tmp_path)
    assert isinstance(loaded, Eagle3Head) and loaded.config.aux_layer_ids == (1, 2, 3)
    for key, value in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    torch.testing.assert_close(eagle3_logits(loaded), eagle3_logits(head), rtol=0, atol=0)


@pytest.mark.parametrize("bias", [True, False])
def test_speculators_eagle1_round_trip(tmp_path, bias):
    head = eagle1_head(19, bias=bias)
    export_speculators(head, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == (SPECULATORS_EAGLE1_KEYS if bias else SPECULATORS_EAGLE1_KEYS - {"fusion_fc.bias"})
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle" and config["fusion_bias"] is bias
    assert config["layernorms"] is False and config["transformer_layer_architecture"] == "LlamaDecoderLayer"
    loaded = load_eagle_head(tmp_path)
    assert isinstance(loaded, Eagle1Head) and loaded.config.bias is bias
    for key, value in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    torch.testing.assert_close(eagle1_outputs(loaded), eagle1_outputs(head), rtol=0, atol=0)


def test_speculators_export_with_a_wider_target_carries_the_embedding(tmp_path):
    head = eagle3_head(20, target_hidden_size=2 * H)
    with pytest.raises(ValueError, match="attach the target's embedding"):
        export_speculators(head, tmp_path / "refused")
    head.attach_target_embedding(torch.randn(V, H))
    export_speculators(head, tmp_path / "ok")
    config = json.loads((tmp_path / "ok" / "config.json").read_text())
    assert config["target_hidden_size"] == 2 * H
    loaded = load_eagle_head(tmp_path / "ok")
    assert torch.equal(loaded.embed_tokens.weight, head.target_embedding)
    assert loaded.fc.weight.shape == (H, 3 * 2 * H)


def test_speculators_export_refuses_what_the_format_cannot_carry(tmp_path):
    with pytest.raises(ValueError, match="has no embedding"):
        export_speculators(Eagle1Head(EagleConfig.from_hf(official_config()), with_embedding=True), tmp_path / "a")
    with pytest.raises(ValueError, match="o_proj"):
        export_speculators(eagle1_head(qkv_bias=True), tmp_path / "b")


def speculators_eagle3_config(**kw) -> dict:
    """A speculators config.json as speculators writes it: ``transformer_layer_config`` is a diff against
    ``LlamaConfig()``, so fields at Llama's defaults are absent."""
    layer = {"model_type": "llama", "hidden_size": H, "intermediate_size": INTER, "num_attention_heads": 4}
    layer.update({"num_key_value_heads": 2, "vocab_size": V, "num_hidden_layers": 1})
    raw = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0",
        "draft_vocab_size": 10,
        "norm_before_residual": False,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": None,
        "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "org/target"},
        },
    }
    raw.update(kw)
    return raw


def test_speculators_written_by_speculators_loads(tmp_path):
    """Keys as speculators writes them (``layers.0.*``, the verifier's ``embed_tokens.weight``), diff-style layer
    config; the default ``rope_theta`` / ``rms_norm_eps`` / ``head_dim`` come from Llama's defaults."""
    head = eagle3_head(21)
    embedding = torch.randn(V, H)
    state = {k.replace("midlayer.", "layers.0."): v for k, v in head.state_dict().items()}
    state["embed_tokens.weight"] = embedding
    loaded = load_eagle_head(write_checkpoint(tmp_path, speculators_eagle3_config(), state))
    assert loaded.config.rope_theta == 10000.0 and loaded.config.head_dim == H // 4
    assert torch.equal(loaded.embed_tokens.weight, embedding)
    assert torch.equal(loaded.d2t, head.d2t)
    # same layer weights: identical logits when both use the same embedding
    head.attach_target_embedding(embedding)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(loaded.embed(ids), head.embed(ids))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"norm_before_residual": True}, "norm_before_residual is true"),
        ({"norm_before_fc": True}, "norm_before_fc is true"),
        ({"speculators_model_type": "mlp_speculator"}, "speculators_model_type 'mlp_speculator' is not supported"),
        ({"transformer_layer_config": None}, "transformer_layer_config is missing"),
        ({"transformer_layer_config": {"model_type": "qwen3"}}, "transformer_layer_config.model_type 'qwen3' is not"),
    ],
)
def test_speculators_variants_we_cannot_represent_are_refused(tmp_path, change, message):
    state = {k.replace("midlayer.", "layers.0."): v for k, v in eagle3_head(22).state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"invalid .*config.json: {message}"):
        load_eagle_head(write_checkpoint(tmp_path, speculators_eagle3_config(**change), state))


def test_speculators_eagle1_layernorms_refused_and_extra_layers_reported(tmp_path):
    raw = {
        "speculators_model_type": "eagle",
        "layernorms": True,
        "fusion_bias": False,
        "transformer_layer_config": {
            "hidden_size": H,
            "intermediate_size": INTER,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": V,
        },
    }
    state = {
        k.replace("layers.0.", "transformer.").replace("fc.", "fusion_fc."): v
        for k, v in eagle1_head(23, bias=False).state_dict().items()
    }
    with pytest.raises(CheckpointError, match="layernorms is true"):
        load_eagle_head(write_checkpoint(tmp_path / "a", raw, state))
    raw["layernorms"] = False
    state["transformer.input_layernorm.weight"] = torch.ones(H)  # a non-identity input norm we cannot run
    with pytest.raises(CheckpointError, match=r"unexpected keys \(1\): layers.0.input_layernorm.weight"):
        load_eagle_head(write_checkpoint(tmp_path / "b", raw, state))


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


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_weights_are_refused(tmp_path, value):
    """A head with the right keys and shapes but NaN/inf weights would draft garbage (the int8 kernel even crashes on
    it): refused at load, naming the tensor. Negative control: the same head with finite weights loads."""
    state = dict(eagle1_head().state_dict())
    load_eagle_head(write_checkpoint(tmp_path / "ok", official_config(), state))
    state["fc.weight"] = state["fc.weight"].clone()
    state["fc.weight"][0, 0] = value
    with pytest.raises(CheckpointError, match=r"NaN or infinite values in 1 tensor\(s\): fc.weight"):
        load_eagle_head(write_checkpoint(tmp_path / "bad", official_config(), state))


def test_long_key_lists_are_cut(tmp_path):
    """A whole model's keys given as a head: the error lists the first few and counts the rest."""
    state = dict(eagle1_head().state_dict())
    state.update({f"model.layers.{i}.extra.weight": torch.zeros(1) for i in range(30)})
    with pytest.raises(CheckpointError, match=r"unexpected keys \(30\): .*\.\.\. and 18 more"):
        load_eagle_head(write_checkpoint(tmp_path, official_config(), state))


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
    with pytest.raises(CheckpointError, match="neither.*shard index"):
        load_eagle_head(tmp_path / "empty")


def test_a_head_loads_for_a_target_on_another_device(tmp_path):
    """Loading checks a head against the target's shapes, not its device: the head is moved afterwards (the GPU
    bench loads the shipped head on the CPU for a CUDA target; the drafter checks the devices). The meta device
    stands in for the GPU."""
    save_eagle_head(eagle1_head(), tmp_path)
    target = tiny_llama(vocab_size=V, hidden_size=H, num_layers=2).to("meta")
    assert load_eagle_head(tmp_path, target_model=target).fc.weight.device.type == "cpu"


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


def test_d2t_mapping_two_draft_ids_to_one_token_is_refused(tmp_path):
    state = dict(eagle3_head(9).state_dict())
    state["d2t"] = torch.zeros(10, dtype=torch.long)
    state["d2t"][1] = -1  # draft ids 0 and 1 both map to target token 0
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10)
    with pytest.raises(CheckpointError, match="same target token"):
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


def test_a_t2d_that_disagrees_with_d2t_is_refused(tmp_path):
    """t2d picks the draft vocabulary's slots in EAGLE-3 training; an inverted one was accepted and scored 2 tokens
    per step instead of 14 (QA). Negative control: the head as saved loads."""
    state = dict(eagle3_head(15).state_dict())
    config = official_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=10)
    load_eagle_head(write_checkpoint(tmp_path / "ok", config, state))
    state["t2d"] = ~state["t2d"]
    with pytest.raises(CheckpointError, match="t2d disagrees with d2t"):
        load_eagle_head(write_checkpoint(tmp_path / "bad", config, state))


def test_integer_weights_are_refused_by_name(tmp_path):
    """An fc.weight stored as int32 ended in a raw TypeError inside nn.Module.to."""
    state = dict(eagle1_head().state_dict())
    state["fc.weight"] = state["fc.weight"].to(torch.int32)
    with pytest.raises(CheckpointError, match=r"not floating point: fc.weight \(torch.int32\)"):
        load_eagle_head(write_checkpoint(tmp_path, official_config(), state))

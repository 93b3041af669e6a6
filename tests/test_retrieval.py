"""Retrieval drafter: the suffix automaton and the drafter's proposals against brute-force searches of the text."""

from __future__ import annotations

import random
from itertools import pairwise
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file

from specdec.drafters import RetrievalDrafter
from specdec.drafters.retrieval import CorpusError, RetrievalCorpus, SuffixAutomaton, TokenIdError
from specdec.interfaces import Continuation, TargetHidden
from specdec.sampling import SamplingParams
from specdec.tree import PartialTree
from specdec.trees import StaticTreePolicy

NO_HIDDEN = TargetHidden()
VOCAB = 3  # a small alphabet makes long repeats common
texts = st.lists(st.integers(0, VOCAB - 1), max_size=40)
roots = st.integers(0, VOCAB - 1)
SETTINGS = settings(max_examples=150, deadline=None)
CORPUS = RetrievalCorpus.from_sequences([[0, 1, 2, 0, 2, 2], [2, 2, 1, 0, 1, 1], [1, 2]], "test-tokenizer")


def overlapped(context: list[int], end: int, limit: int) -> tuple[int, ...]:
    """Brute force: the ``limit`` tokens after ``end``, copying the copy itself past the context's end (LZ77)."""
    out: list[int] = []
    for j in range(limit):
        i = end + 1 + j
        out.append(context[i] if i < len(context) else out[i - len(context)])
    return tuple(out)


def earlier_ends(text: list[int], length: int) -> list[int]:
    """End positions ``e < len(text) - 1`` where the suffix of ``text`` of ``length`` tokens also occurs."""
    suffix = text[len(text) - length :]
    return [e for e in range(length - 1, len(text) - 1) if text[e - length + 1 : e + 1] == suffix]


def longest_earlier_suffix(text: list[int]) -> int:
    """Brute force: the length of the longest suffix of ``text`` that also ends at an earlier position."""
    return next((n for n in range(len(text) - 1, 0, -1) if earlier_ends(text, n)), 0)


def drafter_on(text: list[int], **options) -> RetrievalDrafter:
    drafter = RetrievalDrafter(VOCAB, **options)
    drafter.prefill(torch.tensor(text, dtype=torch.long), NO_HIDDEN)
    return drafter


def snapshot(drafter: RetrievalDrafter) -> tuple:
    a = drafter.automaton
    fields = (a.tokens, a.transitions, a.link, a.length, a.first_end, a.last_end)
    return (drafter.history.tolist(), a.last, drafter.corpus_match, *(repr(field) for field in fields))


def path_rows(drafter: RetrievalDrafter, tree: PartialTree) -> torch.Tensor:
    rows = drafter.expand(tree, torch.arange(tree.size))
    assert rows.shape == (tree.size, drafter.vocab_size) and rows.dtype == torch.float32
    return rows


def expected_row(continuations: list[Continuation], vocab: int, miss_logit: float = -20.0) -> torch.Tensor:
    row = torch.full((vocab,), miss_logit)
    for rank, continuation in enumerate(continuations):
        row[continuation.tokens[0]] = -rank
    return row


# ----------------------------------------------------------------------------------------------------------------
# The automaton


@SETTINGS
@given(texts)
def test_automaton_match_state_and_occurrences_against_brute_force(text):
    automaton = SuffixAutomaton()
    for n, token in enumerate(text, start=1):
        automaton.extend(token)
        length = longest_earlier_suffix(text[:n])
        assert automaton.match_length == length
        if length:
            assert automaton.first_end[automaton.match_state] == earlier_ends(text[:n], length)[0]
    for state in range(1, automaton.num_states):  # every state's recorded ends hold its longest string
        size, first, last = automaton.length[state], automaton.first_end[state], automaton.last_end[state]
        string = text[first - size + 1 : first + 1]
        assert first <= last and text[last - size + 1 : last + 1] == string
        first_occurrence = next(e for e in range(len(text)) if text[max(e - size + 1, 0) : e + 1] == string)
        assert first == first_occurrence


@SETTINGS
@given(texts, st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6))
def test_a_transient_section_leaves_the_automaton_as_it_was(text, extra):
    drafter = drafter_on(text)
    before = snapshot(drafter)
    with drafter.automaton.transient():
        for token in extra:
            drafter.automaton.extend(token)
        with pytest.raises(RuntimeError, match="do not nest"), drafter.automaton.transient():
            pass
    assert snapshot(drafter) == before


# ----------------------------------------------------------------------------------------------------------------
# Proposals


@SETTINGS
@given(texts, roots, st.integers(1, 3), st.integers(1, 5))
def test_propose_continues_the_longest_earlier_suffix(text, root, min_match, max_draft):
    drafter = drafter_on(text, min_match=min_match, max_draft=max_draft)
    before = snapshot(drafter)
    found = drafter.propose(root)
    assert snapshot(drafter) == before  # the root is transient
    context = [*text, root]
    length = longest_earlier_suffix(context)
    if length < min_match:
        assert found == []
        return
    (best,) = found
    assert best.match_length == length
    followed = [overlapped(context, e, max_draft) for e in earlier_ends(context, length)]
    assert best.tokens in followed  # what followed an earlier occurrence, repeating past the context's end


@SETTINGS
@given(texts, roots, st.integers(1, 2))
def test_branches_have_distinct_first_tokens_and_shorter_matches(text, root, min_match):
    context = [*text, root]
    found = drafter_on(text, min_match=min_match, num_branches=3, max_draft=4).propose(root)
    assert found[:1] == drafter_on(text, min_match=min_match, max_draft=4).propose(root)
    assert len({continuation.tokens[0] for continuation in found}) == len(found) <= 3
    lengths = [continuation.match_length for continuation in found]
    assert lengths == sorted(set(lengths), reverse=True) and all(n >= min_match for n in lengths)
    for continuation in found:
        followed = [overlapped(context, e, 4) for e in earlier_ends(context, continuation.match_length)]
        assert continuation.tokens in followed


def test_propose_prefers_the_most_recent_match_of_a_state():
    # "1 2" was followed by 3, then by 4: the second time the match state was "1 2" it recorded that occurrence.
    drafter = RetrievalDrafter(10, max_draft=3)
    drafter.prefill(torch.tensor([1, 2, 3, 1, 2, 4, 0, 1]), NO_HIDDEN)
    assert drafter.propose(2) == [Continuation((4, 0, 1), 2)]
    automaton = drafter.automaton
    state, _ = automaton.step(automaton.match_state, automaton.match_length, 2)
    assert (automaton.first_end[state], automaton.last_end[state]) == (1, 4)  # the first occurrence is kept too
    assert drafter.propose(5) == []  # "1 5" never occurred; "5" alone would be below min_match anyway


def test_a_continuation_repeats_with_the_matchs_period_past_the_context():
    drafter = RetrievalDrafter(10, max_draft=8, min_match=1)
    drafter.prefill(torch.tensor([7, 7, 7]), NO_HIDDEN)
    assert drafter.propose(7) == [Continuation((7,) * 8, 3)]  # "7 7 7" ends at 2: the root, then the loop goes on
    drafter.prefill(torch.tensor([5, 6, 5]), NO_HIDDEN)
    assert drafter.propose(6) == [Continuation((5, 6, 5, 6, 5, 6, 5, 6), 2)]  # period 2


@SETTINGS
@given(texts, st.lists(st.integers(0, 40), max_size=4))
def test_incremental_commits_equal_one_prefill(text, cuts):
    points = sorted({min(cut, len(text)) for cut in cuts} | {len(text)})  # prefill up to the first, then commits
    whole = drafter_on(text, num_branches=2, corpus=CORPUS)
    pieces = drafter_on(text[: points[0]], num_branches=2, corpus=CORPUS)
    for start, stop in pairwise(points):
        pieces.commit(torch.tensor(text[start:stop], dtype=torch.long), NO_HIDDEN)
    assert snapshot(pieces) == snapshot(whole)
    assert all(pieces.propose(root) == whole.propose(root) for root in range(VOCAB))


def test_propose_does_not_scan_the_history():
    """Count the automaton reads of one proposal: bounded by the options, not by the 20,000-token history."""

    class Counted(list):
        reads = 0

        def __getitem__(self, index):
            Counted.reads += 1
            return super().__getitem__(index)

    rng = random.Random(0)
    block = [rng.randrange(50) for _ in range(30)]
    history = [rng.randrange(50) for _ in range(20_000)] + block + [rng.randrange(50) for _ in range(100)] + block
    after = 20_000 + len(block)  # the position after the block's first occurrence
    drafter = RetrievalDrafter(50, max_draft=8, num_branches=2)
    drafter.prefill(torch.tensor(history), NO_HIDDEN)
    automaton = drafter.automaton
    for name in ("tokens", "transitions", "link", "length", "last_end"):
        setattr(automaton, name, Counted(getattr(automaton, name)))
    (best, *_) = drafter.propose(history[after])
    assert best == Continuation(tuple(history[after + 1 : after + 9]), len(block) + 1)
    assert Counted.reads <= 4 * drafter.max_draft * drafter.num_branches


# ----------------------------------------------------------------------------------------------------------------
# expand: any tree policy


@pytest.mark.parametrize("corpus", [None, CORPUS], ids=["context", "corpus"])
@SETTINGS
@given(texts, st.lists(st.tuples(st.integers(0, 20), st.integers(0, VOCAB - 1)), min_size=1, max_size=7), roots)
def test_expand_rows_are_the_proposals_with_the_path_committed(corpus, text, nodes, root):
    options = {"num_branches": 2, "min_match": 2, "max_draft": 3, "corpus": corpus}
    drafter = drafter_on(text, **options)
    tree = PartialTree(torch.tensor(root), len(nodes) + 1)
    for parent, token in nodes:
        tree.add(torch.tensor([parent % tree.size]), torch.tensor([token]), torch.zeros(1))
    before = snapshot(drafter)
    rows = path_rows(drafter, tree)
    assert snapshot(drafter) == before
    assert torch.equal(rows[0], expected_row(drafter.propose(root), VOCAB))  # the root node
    for node in range(tree.size):
        path = tree.tokens[: tree.size][tree.ancestor_mask(torch.tensor([node]))[0]].tolist()
        committed = drafter_on([*text, *path[:-1]], **options)
        assert torch.equal(rows[node], expected_row(committed.propose(path[-1]), VOCAB))


def test_a_chain_policy_drafts_the_continuation():
    drafter = RetrievalDrafter(12, max_draft=4)
    drafter.prefill(torch.tensor([9, 1, 2, 3, 4, 5, 6, 0, 8, 1]), NO_HIDDEN)
    assert drafter.propose(2) == [Continuation((3, 4, 5, 6), 2)]
    tree = StaticTreePolicy.chain(4).grow(drafter, torch.tensor(2), SamplingParams(), None)
    assert tree.tokens.tolist() == [2, 3, 4, 5, 6]
    drafter.commit(torch.tensor([2, 3, 4]), NO_HIDDEN)  # the root and two accepted tokens
    assert drafter.propose(5) == [Continuation((6, 0, 8, 1), 5)]


# ----------------------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"vocab_size": 0}, "vocab_size must be at least 1, got 0"),
        ({"max_draft": 0}, "max_draft must be at least 1, got 0"),
        ({"min_match": 0}, "min_match must be at least 1, got 0"),
        ({"num_branches": 0}, "num_branches must be at least 1, got 0"),
        ({"num_branches": 4, "miss_logit": -3.0}, r"miss_logit=-3.0 must be below the last branch's logit -3"),
    ],
)
def test_bad_arguments_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        RetrievalDrafter(**{"vocab_size": 8, **bad})


def test_from_target_takes_the_vocabulary():
    drafter = RetrievalDrafter.from_target(SimpleNamespace(vocab_size=32), max_draft=3)
    assert (drafter.vocab_size, drafter.max_draft, drafter.propose(1)) == (32, 3, [])


def test_bad_token_ids_are_refused_before_any_state_changes():
    drafter = drafter_on([0, 1, 2, 0, 1])
    before = snapshot(drafter)
    for bad in ([0, 3], [-1]):
        with pytest.raises(TokenIdError, match=rf"token id {bad[-1]} is outside the vocabulary \[0, 3\)"):
            drafter.commit(torch.tensor(bad), NO_HIDDEN)
        with pytest.raises(ValueError, match=f"token id {bad[-1]}"):
            drafter.prefill(torch.tensor(bad), NO_HIDDEN)
        with pytest.raises(ValueError, match=f"token id {bad[-1]}"):
            drafter.propose(bad[-1])
    assert snapshot(drafter) == before


# ----------------------------------------------------------------------------------------------------------------
# Corpus


def corpus_occurrences(context: list[int], length: int) -> list[tuple[list[int], int]]:
    """``(sequence, end)`` for every occurrence of the context's suffix of ``length`` tokens in a corpus sequence."""
    suffix = context[len(context) - length :]
    sequences = [[0, 1, 2, 0, 2, 2], [2, 2, 1, 0, 1, 1], [1, 2]]  # CORPUS's
    return [(seq, e) for seq in sequences for e in range(length - 1, len(seq)) if seq[e - length + 1 : e + 1] == suffix]


@SETTINGS
@given(texts, roots, st.integers(1, 2))
def test_the_corpus_is_the_fallback_when_the_context_has_no_match(text, root, min_match):
    options = {"min_match": min_match, "max_draft": 3, "num_branches": 2}
    own = drafter_on(text, **options).propose(root)
    found = drafter_on(text, corpus=CORPUS, **options).propose(root)
    if own:
        assert found == own
        return
    context = [*text, root]
    longest = next((n for n in range(len(context), 0, -1) if corpus_occurrences(context, n)), 0)
    assert len({continuation.tokens[0] for continuation in found}) == len(found)
    for continuation in found:
        assert min_match <= continuation.match_length <= longest
        followed = [tuple(seq[e + 1 : e + 4]) for seq, e in corpus_occurrences(context, continuation.match_length)]
        assert continuation.tokens in followed  # cut where its sequence ends


def test_a_corpus_file_round_trip_and_its_refusals(tmp_path):
    path = tmp_path / "corpus.safetensors"
    built = RetrievalCorpus.build([[5, 6, 7, 8], [1, 2, 3]], "tok-a", path)
    loaded = RetrievalCorpus.load(path, "tok-a")
    assert loaded.automaton.tokens == built.automaton.tokens == [5, 6, 7, 8, -1, 1, 2, 3, -1]
    drafter = RetrievalDrafter(10, max_draft=4, corpus=loaded)
    drafter.prefill(torch.tensor([0, 9, 5]), NO_HIDDEN)
    assert drafter.propose(6) == [Continuation((7, 8), 2)]  # cut where the sequence ends
    assert drafter.propose(4) == []
    drafter.commit(torch.tensor([6, 7, 8, 0, 9]), NO_HIDDEN)  # now the context itself repeats "0 9 5"
    assert drafter.propose(5) == [Continuation((6, 7, 8, 0), 3)]

    with pytest.raises(CorpusError, match=rf"{path} was built for tokenizer 'tok-a', not 'tok-b'"):
        RetrievalCorpus.load(path, "tok-b")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a safetensors file at all")
    with pytest.raises(CorpusError, match=rf"{garbage}: cannot read a retrieval corpus"):
        RetrievalCorpus.load(garbage, "tok-a")
    tampered = tmp_path / "tampered.safetensors"
    with safe_open(str(path), framework="pt") as handle:
        save_file({"tokens": handle.get_tensor("tokens") + 1}, str(tampered), metadata=handle.metadata())
    with pytest.raises(CorpusError, match=rf"{tampered} is corrupt"):
        RetrievalCorpus.load(tampered, "tok-a")
    other = tmp_path / "other.safetensors"
    save_file({"tokens": torch.zeros(3, dtype=torch.long)}, str(other))
    with pytest.raises(CorpusError, match=rf"{other} is not a retrieval corpus"):
        RetrievalCorpus.load(other, "tok-a")
    with pytest.raises(CorpusError, match=rf"{path} holds token id 8, outside the vocabulary \[0, 8\)"):
        RetrievalDrafter(8, corpus=loaded)
    with pytest.raises(CorpusError, match="sequence 1 has a negative token id"):
        RetrievalCorpus.from_sequences([[1], [2, -3]], "tok-a")

"""Retrieval drafting: propose the text that followed the longest earlier occurrence of the context's ending.

Prompt lookup (:mod:`specdec.drafters.ngram`) re-scans the context for a few fixed n-gram lengths on every call.
This drafter keeps an index instead, a *suffix automaton* of the committed text, so that it finds the **longest**
repeated suffix of any length, and copies up to ``max_draft`` tokens of what followed it, in time independent of
the history's length.

The automaton and its match state: :mod:`specdec.drafters.suffix_automaton`.

The root step. A cycle proposes for ``T + [root]`` with the root not yet committed. A suffix ``s + root`` of it
that ends at an earlier position ends inside ``T``, so ``s`` ends before ``n - 1``: ``s`` is on the suffix-link
chain of the match state. :meth:`SuffixAutomaton.step` walks that chain from the match state to the first state
with a ``root`` transition (pattern matching against the automaton) and mutates nothing. The walk is part of the
walk the next :meth:`~SuffixAutomaton.extend` makes when the root is committed (``last``, then the same chain;
every commit starts with the root), so it is paid for by the construction's amortisation.

Which occurrence. A state keeps two end positions of its strings: ``first_end`` (the smallest, exact) and
``last_end``: where the strings ended the last time the state was the text's match state (or when it was
created), a genuine earlier occurrence, never older than the first. The drafter continues from ``last_end``,
because recent text predicts an LLM's next tokens better than old text. It is not always the *most recent*
occurrence: that would need every state on the new state's suffix-link chain updated per token (the
rightmost-occurrence problem has no O(1) online solution); a state that gained positions while a longer match
was the match state keeps the end of its own last match.

Branches. Further continuations come from shorter matches up the suffix-link chain (states whose recorded
occurrence was followed by a different token), kept while their length is at least ``min_match``.

Cost of :meth:`RetrievalDrafter.propose`: the root step (amortised O(1), above), at most ``max_draft *
num_branches`` suffix links for branches, and ``O(max_draft)`` per continuation copied: independent of the
history's length. :meth:`RetrievalDrafter.expand` serves any tree policy: for a node at depth ``d`` it extends
the automaton by the node's path transiently (undone on exit), so its rows are exactly what :meth:`propose`
would give had the path been committed. That is ``d`` extensions per node, whose suffix-link walks are not
amortised across nodes (each is undone): short in practice, but not bounded independently of the history.

Corpus (optional). A :class:`RetrievalCorpus` is a fixed body of token sequences (earlier outputs, documents) with
its own automaton, saved as one safetensors file tied to a tokenizer. The drafter keeps the history's match in it,
``(state, length)`` of the longest suffix of the history that occurs in the corpus, advanced by
:meth:`SuffixAutomaton.step` per committed token (amortised O(1): the length grows by at most one per token and
every suffix link followed shortens it). When the context has no match of ``min_match`` tokens of its own, the
proposals come from the corpus, chosen the same way and cut where a corpus sequence ends.

The proposals are a deterministic function of the context (and the corpus), so a deterministic tree policy plus a
deterministic-candidate verifier is lossless at any temperature.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from specdec.drafters.suffix_automaton import ROOT, SuffixAutomaton
from specdec.errors import SpecdecError
from specdec.interfaces import Continuation, Drafter, Target, TargetHidden
from specdec.tree import PartialTree

__all__ = ["Continuation", "CorpusError", "RetrievalCorpus", "RetrievalDrafter", "SuffixAutomaton", "TokenIdError"]


class TokenIdError(SpecdecError, ValueError):
    """A token id outside the drafter's vocabulary."""


class CorpusError(SpecdecError, ValueError):
    """A retrieval corpus file cannot be read, is corrupt, or was built for another tokenizer or vocabulary."""


class RetrievalCorpus:
    """A fixed body of token sequences the drafter retrieves from when the context itself has no match.

    The sequences are stored joined by :attr:`SEPARATOR` (``-1``, never a token id, so no match spans two
    sequences and no continuation runs into the next one) in one safetensors file: ``tokens`` ``[N]`` int32 (int64
    read too), with metadata naming the format, the tokenizer the ids belong to, the vocabulary size when known and
    a SHA-256 of the stored tokens. The suffix automaton is rebuilt on load (``O(N)``: 3-6 s and about 0.8 GB for
    the 1.4 M tokens of SmolLM2's greedy self-distilled responses), so the file holds no derived data that could
    disagree with the text.

    Args:
        tokens: the joined text (sequences separated by ``SEPARATOR``).
        tokenizer_name: the tokenizer whose ids these are.
        source: where it came from, for error messages.
    """

    SEPARATOR = -1
    FORMAT = "specdec.retrieval-corpus/1"

    def __init__(self, tokens: list[int], tokenizer_name: str, source: str = "<memory>") -> None:
        self.tokenizer_name = tokenizer_name
        self.source = source
        self.automaton = SuffixAutomaton()
        for token in tokens:
            self.automaton.extend(token)

    @property
    def max_token(self) -> int:
        """The largest token id in the corpus (``-1`` if it has none)."""
        return max(self.automaton.tokens, default=self.SEPARATOR)

    @classmethod
    def _joined(cls, token_sequences: Iterable[Sequence[int]]) -> list[int]:
        """The sequences (non-negative ids) joined, each followed by :attr:`SEPARATOR`."""
        tokens: list[int] = []
        for index, sequence in enumerate(token_sequences):
            if any(int(token) < 0 for token in sequence):
                raise CorpusError(f"sequence {index} has a negative token id; corpus token ids must be >= 0")
            tokens.extend(int(token) for token in sequence)
            tokens.append(cls.SEPARATOR)
        return tokens

    @classmethod
    def from_sequences(cls, token_sequences: Iterable[Sequence[int]], tokenizer_name: str) -> RetrievalCorpus:
        """A corpus of ``token_sequences`` (non-negative ids), in memory."""
        return cls(cls._joined(token_sequences), tokenizer_name)

    @classmethod
    def write(
        cls,
        token_sequences: Iterable[Sequence[int]],
        tokenizer_name: str,
        path: str | Path,
        vocab_size: int | None = None,
        notes: dict[str, str] | None = None,
    ) -> int:
        """Save ``token_sequences`` (non-negative ids) as a corpus file (see :meth:`load`) without indexing them;
        ``vocab_size`` (recorded, checked on load) and ``notes`` (provenance, kept in the metadata) are optional.
        Returns the tokens written, separators included."""
        ids = torch.tensor(cls._joined(token_sequences), dtype=torch.int32)
        top = int(ids.max()) if ids.numel() else cls.SEPARATOR
        if vocab_size is not None and top >= vocab_size:
            raise CorpusError(f"token id {top} is outside the vocabulary [0, {vocab_size})")
        metadata = {**(notes or {}), "format": cls.FORMAT, "tokenizer": tokenizer_name, "sha256": _digest(ids)}
        if vocab_size is not None:
            metadata["vocab_size"] = str(vocab_size)
        save_file({"tokens": ids}, str(path), metadata=metadata)
        return ids.numel()

    @classmethod
    def build(
        cls,
        token_sequences: Iterable[Sequence[int]],
        tokenizer_name: str,
        path: str | Path,
        vocab_size: int | None = None,
        notes: dict[str, str] | None = None,
    ) -> RetrievalCorpus:
        """:meth:`write`, then the corpus of the file, indexed."""
        cls.write(token_sequences, tokenizer_name, path, vocab_size, notes)
        return cls.load(path, tokenizer_name, vocab_size)

    @classmethod
    def read(cls, path: str | Path) -> tuple[torch.Tensor, dict[str, str]]:
        """A corpus file's checked tokens ``[N]`` (int32 or int64) and metadata, without building the automaton.

        Raises:
            CorpusError: an unreadable file, one that is not a corpus, or tokens that fail their checksum.
        """
        try:
            with safe_open(str(path), framework="pt") as handle:
                metadata = handle.metadata() or {}
                names = handle.keys()
                ids = handle.get_tensor("tokens") if "tokens" in names else None
        except (OSError, SafetensorError) as exc:
            raise CorpusError(f"{path}: cannot read a retrieval corpus ({exc})") from exc
        if metadata.get("format") != cls.FORMAT or ids is None:
            found = metadata.get("format")
            raise CorpusError(f"{path} is not a retrieval corpus (format {found!r}, need {cls.FORMAT!r})")
        ok_type = ids.dtype in (torch.int32, torch.long) and ids.dim() == 1
        if not ok_type or metadata.get("sha256") != _digest(ids):
            raise CorpusError(f"{path} is corrupt: its tokens do not match the checksum it was saved with")
        return ids, metadata

    @classmethod
    def load(
        cls, path: str | Path, tokenizer_name: str | None = None, vocab_size: int | None = None
    ) -> RetrievalCorpus:
        """Read a corpus saved by :meth:`build`; refuses a corrupt file, one built for another tokenizer (when
        ``tokenizer_name`` is given) or for another vocabulary size (when both it and the file record one)."""
        ids, metadata = cls.read(path)
        built_for = metadata.get("tokenizer", "")
        if tokenizer_name is not None and built_for != tokenizer_name:
            raise CorpusError(f"{path} was built for tokenizer {built_for!r}, not {tokenizer_name!r}")
        recorded = metadata.get("vocab_size")
        if vocab_size is not None and recorded is not None and int(recorded) != vocab_size:
            raise CorpusError(
                f"{path} was built for a vocabulary of {recorded} tokens ({built_for}), not {vocab_size}: its ids "
                "would name other tokens"
            )
        return cls(ids.tolist(), built_for, str(path))

    def following(self, end: int, limit: int) -> tuple[int, ...]:
        """Up to ``limit`` tokens after position ``end``, cut at the end of its sequence (possibly empty)."""
        tokens = self.automaton.tokens[end + 1 : end + 1 + limit]
        return tuple(tokens[: tokens.index(self.SEPARATOR)] if self.SEPARATOR in tokens else tokens)


def _digest(ids: torch.Tensor) -> str:
    """SHA-256 (hex) of ``ids [N]``'s bytes as stored (int32, or int64 in older files): the corpus file's checksum."""
    return hashlib.sha256(ids.contiguous().numpy().tobytes()).hexdigest()


class RetrievalDrafter(Drafter):
    """Training-free drafter that continues the context's longest repeated suffix, found in a suffix automaton.

    Args:
        vocab_size: the target's vocabulary size (rows of the returned logits).
        max_draft: most tokens per continuation (at least 1).
        min_match: shortest matched suffix worth proposing from (at least 1).
        num_branches: most continuations per call, with distinct first tokens.
        miss_logit: logit of tokens that are not proposals; must be below ``-(num_branches - 1)``.
        corpus: where to retrieve from when the context has no match of ``min_match`` tokens (optional).

    State: :attr:`history` (as the base class keeps it) and :attr:`automaton`, the suffix automaton of the same
    tokens, both updated by :meth:`prefill` / :meth:`commit` (amortised O(1) per token for the automaton). With a
    corpus, also the history's match in it: ``(state, length)`` of its longest suffix that occurs in the corpus,
    advanced by :meth:`SuffixAutomaton.step` per committed token (amortised O(1) as well).
    """

    automaton: SuffixAutomaton

    def __init__(
        self,
        vocab_size: int,
        max_draft: int = 8,
        min_match: int = 2,
        num_branches: int = 1,
        miss_logit: float = -20.0,
        corpus: RetrievalCorpus | None = None,
    ) -> None:
        for name, value in (("vocab_size", vocab_size), ("max_draft", max_draft), ("min_match", min_match)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if num_branches < 1:
            raise ValueError(f"num_branches must be at least 1, got {num_branches}")
        if not miss_logit < -(num_branches - 1):
            last = -(num_branches - 1)
            raise ValueError(f"miss_logit={miss_logit} must be below the last branch's logit {last}")
        if corpus is not None and corpus.max_token >= vocab_size:
            raise CorpusError(
                f"{corpus.source} holds token id {corpus.max_token}, outside the vocabulary [0, {vocab_size})"
            )
        self.vocab_size = vocab_size
        self.max_draft = max_draft
        self.min_match = min_match
        self.num_branches = num_branches
        self.miss_logit = miss_logit
        self.corpus = corpus
        self.reset()

    @classmethod
    def from_target(cls, target: Target, **options: Any) -> RetrievalDrafter:
        """A drafter over ``target``'s vocabulary (``options``: the constructor's keyword arguments)."""
        return cls(target.vocab_size, **options)

    # -- lifecycle: the history (base class), the automaton and the corpus match, kept in step ----------------

    def reset(self) -> None:
        super().reset()
        self.automaton = SuffixAutomaton()
        self.corpus_match = (ROOT, 0)

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        """Start a generation from the prompt ``[L]``: a fresh automaton of it (``hidden`` unused)."""
        tokens = self._checked(input_ids)
        self.reset()
        super().prefill(input_ids, hidden)
        self._append(tokens)

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        """Append ``[k]`` committed tokens (the root, then the accepted ones) to the history and the automaton."""
        checked = self._checked(tokens)
        super().commit(tokens, hidden)
        self._append(checked)

    def _append(self, tokens: list[int]) -> None:
        for token in tokens:
            self.automaton.extend(token)
        if self.corpus is not None:
            self.corpus_match = self._corpus_step(self.corpus_match, tokens)

    def _corpus_step(self, match: tuple[int, int], tokens: list[int]) -> tuple[int, int]:
        """The corpus match ``(state, length)`` after the context grows by ``tokens``; mutates nothing."""
        assert self.corpus is not None
        for token in tokens:
            match = self.corpus.automaton.step(*match, token)
        return match

    def _checked(self, tokens: torch.Tensor) -> list[int]:
        """``tokens`` as a list of ints; raises :class:`TokenIdError` before any state changes if one is bad."""
        ids = tokens.reshape(-1).to("cpu", torch.long)
        bad = (ids < 0) | (ids >= self.vocab_size)
        if bool(bad.any()):
            raise TokenIdError(f"token id {int(ids[bad][0])} is outside the vocabulary [0, {self.vocab_size})")
        return ids.tolist()

    # -- drafting ------------------------------------------------------------------------------------------

    def proposals(self, root: int) -> list[Continuation]:
        """:meth:`propose`'s continuations: a retrieval drafter alone fills a tree of proposals under
        :class:`~specdec.trees.composite.CompositeTreePolicy` ``(None)``."""
        return self.propose(root)

    def propose(self, root: int) -> list[Continuation]:
        """Draft continuations for the context ``history + [root]`` (the root is not committed; nothing changes).

        Returns:
            At most ``num_branches`` continuations with distinct first tokens, longest match first: the first
            continues the longest suffix of the context that ends at an earlier position, the others shorter
            suffixes up its suffix-link chain. Only matches of length ``>= min_match``; ``[]`` if there are none.
            Each continuation is what followed the match's recorded occurrence (``last_end``), at most
            ``max_draft`` tokens, repeating with the match's period past the context's end (:meth:`_following`). If
            the context has no such match and there is a corpus, the same from the corpus (cut where a sequence ends).
        """
        root = int(root)
        if not 0 <= root < self.vocab_size:
            raise TokenIdError(f"token id {root} is outside the vocabulary [0, {self.vocab_size})")
        return self._propose(root, self.corpus_match)

    def _propose(self, root: int, corpus_match: tuple[int, int]) -> list[Continuation]:
        """:meth:`propose` for a context whose corpus match (before the root) is ``corpus_match``."""
        automaton = self.automaton
        state, length = automaton.step(automaton.match_state, automaton.match_length, root)
        found = self._branches(automaton, state, length, partial(self._following, root=root))
        if found or self.corpus is None:
            return found
        state, length = self._corpus_step(corpus_match, [root])
        following = partial(self.corpus.following, limit=self.max_draft)
        return self._branches(self.corpus.automaton, state, length, following)

    def _branches(
        self, automaton: SuffixAutomaton, state: int, length: int, following: Callable[[int], tuple[int, ...]]
    ) -> list[Continuation]:
        """Continuations from the match ``(state, length)`` and up its suffix-link chain, distinct first tokens.

        ``following(end)``: the tokens after end position ``end`` of the automaton's text; an empty one (a corpus
        occurrence that ends its sequence) is skipped. At most ``max_draft * num_branches`` suffix links are
        followed, whatever the history.
        """
        found: list[Continuation] = []
        first_tokens: set[int] = set()
        links_left = self.max_draft * self.num_branches
        while length >= self.min_match:
            tokens = following(automaton.last_end[state])
            if tokens and tokens[0] not in first_tokens:
                first_tokens.add(tokens[0])
                found.append(Continuation(tokens, length))
                if len(found) == self.num_branches:
                    break
            if links_left == 0:
                break
            links_left -= 1
            state = automaton.link[state]
            length = automaton.length[state]
        return found

    def _following(self, end: int, root: int) -> tuple[int, ...]:
        """The ``max_draft`` tokens after position ``end`` of the context ``automaton.tokens + [root]``.

        Past the context's end the copy overlaps itself (as in LZ77): an occurrence ending ``k`` tokens before the
        context's end says the text repeats with period ``k``, so token ``j`` of the continuation is the context's
        token at ``end + 1 + j`` or, beyond the context, the continuation's own token ``k`` places earlier. (A loop
        of one token, ``5 5 5 5``, predicts more fives instead of stopping at the root.)

        Contract: ``end < len(automaton.tokens)``, so the period is at least 1.
        """
        text = self.automaton.tokens
        n = len(text) + 1  # the context's length, root included
        out = text[end + 1 : end + 1 + self.max_draft]
        while len(out) < self.max_draft:
            i = end + 1 + len(out)
            out.append(root if i == n - 1 else out[i - n])
        return tuple(out)

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """``[F, V]`` float32 logits: the first tokens of each node's continuations at ``0, -1, ...``, ``miss_logit``
        elsewhere.

        A node's context is :meth:`contexts` ``[row]``, the history followed by the node's root path ``(root, ...,
        node)``. Its row is the :meth:`propose` of the node's token with the path's earlier tokens committed:
        they are extended into the automaton inside :meth:`SuffixAutomaton.transient`, so nothing persists.
        """
        logits = torch.full((frontier.shape[0], self.vocab_size), self.miss_logit, dtype=torch.float32)
        for row, path in enumerate(self._paths(tree, frontier)):
            *committed, node = path
            corpus_match = self.corpus_match if self.corpus is None else self._corpus_step(self.corpus_match, committed)
            with self.automaton.transient():
                for token in committed:
                    self.automaton.extend(token)
                first_tokens = [continuation.tokens[0] for continuation in self._propose(node, corpus_match)]
            if first_tokens:
                logits[row, first_tokens] = -torch.arange(len(first_tokens), dtype=torch.float32)
        return logits.to(tree.device)

    @staticmethod
    def _paths(tree: PartialTree, frontier: torch.Tensor) -> list[list[int]]:
        """Each frontier node's root path ``(root, ..., node)``: :meth:`contexts` without the history."""
        on_path = tree.ancestor_mask(frontier).cpu()  # [F, size]
        tokens = tree.tokens[: tree.size].cpu()
        return [tokens[on_path[row]].tolist() for row in range(frontier.shape[0])]

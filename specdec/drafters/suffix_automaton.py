"""A suffix automaton over token ids: the index behind :class:`~specdec.drafters.retrieval.RetrievalDrafter`.

Suffix automaton (Blumer et al. 1985), for a text ``T`` of ``n`` tokens. Every substring ``s`` of ``T`` has an
end-position set ``endpos(s)`` (the indices of its last token over all its occurrences). Substrings with equal
sets form one *state*; a state's strings are suffixes of its longest one, with lengths ``(length[link[v]],
length[v]]``, and the suffix link ``link[v]`` names the state of the next shorter suffix. ``transitions[v][t]``
is the state of ``s + t`` for the strings ``s`` of ``v``. Appending a token (:meth:`SuffixAutomaton.extend`)
adds one state, at most one clone and some transitions: amortised O(1).

The match state. After ``T`` is extended, ``last`` is the state of ``T`` itself (its endpos is ``{n - 1}``: the
whole text ends only there), and ``link[last]`` is the state of the longest suffix of ``T`` whose endpos is
larger, i.e. the **longest suffix of T that also ends at an earlier position**, of length
``length[link[last]]``. So the extension maintains the match state for free; nothing re-scans the history.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ROOT", "SuffixAutomaton"]

ROOT = 0  # the automaton's initial state: the empty string


class SuffixAutomaton:
    """Incremental suffix automaton over int token ids, one dict of transitions per state.

    Attributes (indexed by state; state 0 is the empty string):
        tokens: the text, in order.
        transitions: ``{token: state}`` per state.
        link: suffix link (``-1`` for state 0).
        length: length of the state's longest string.
        first_end: end position (index of the last token) of the first occurrence of the state's strings.
        last_end: end position of a recent occurrence (see the module docstring); ``first_end <= last_end``.
        last: the state of the whole text.

    Invariant used by the drafter: ``first_end[v]`` and ``last_end[v]`` are in ``endpos(v)``, for every state.
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.transitions: list[dict[int, int]] = [{}]
        self.link: list[int] = [-1]
        self.length: list[int] = [0]
        self.first_end: list[int] = [-1]
        self.last_end: list[int] = [-1]
        self.last = ROOT
        #: (table, key, old value or None if absent) per write to undo, while a transient() section is open.
        self._journal: list[tuple[dict[int, int] | list[int], int, int | None]] | None = None
        self._kept_states = 0  # states older than the transient section (only their writes are journaled)

    @property
    def num_states(self) -> int:
        return len(self.length)

    @property
    def match_state(self) -> int:
        """The state of the longest suffix of the text that also ends at an earlier position (0: none)."""
        return max(self.link[self.last], ROOT)

    @property
    def match_length(self) -> int:
        """Length of that suffix (the longest string of :attr:`match_state`)."""
        return self.length[self.match_state]

    def extend(self, token: int) -> None:
        """Append ``token`` to the text (amortised O(1); the classic online construction).

        Afterwards :attr:`match_state` is the new text's match state, and its ``last_end`` is refreshed to the new
        position (which is in its endpos): the next time it matches, it continues from here.
        """
        position = len(self.tokens)
        self.tokens.append(token)
        cur = self._new_state(self.length[self.last] + 1, {}, position, position)
        p = self.last
        while p != -1 and token not in self.transitions[p]:
            self._write(self.transitions[p], token, cur, p)
            p = self.link[p]
        if p == -1:
            self.link[cur] = ROOT
        else:
            q = self.transitions[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                self.link[cur] = self._split(p, q, token)
        self.last = cur
        self._write(self.last_end, self.link[cur], position, self.link[cur])

    def _split(self, p: int, q: int, token: int) -> int:
        """Clone ``q`` for its strings of length ``<= length[p] + 1``, which now also end at the new position.

        The clone takes ``q``'s transitions and recorded occurrences (its endpos is ``q``'s plus the new position),
        becomes ``q``'s suffix link, and takes over the ``token`` transitions into ``q`` on ``p``'s chain.
        """
        clone = self._new_state(self.length[p] + 1, dict(self.transitions[q]), self.first_end[q], self.last_end[q])
        self.link[clone] = self.link[q]
        while p != -1 and self.transitions[p].get(token) == q:
            self._write(self.transitions[p], token, clone, p)
            p = self.link[p]
        self._write(self.link, q, clone, q)
        return clone

    def _new_state(self, length: int, transitions: dict[int, int], first_end: int, last_end: int) -> int:
        self.transitions.append(transitions)
        self.link.append(ROOT)
        self.length.append(length)
        self.first_end.append(first_end)
        self.last_end.append(last_end)
        return len(self.length) - 1

    def _write(self, table: dict[int, int] | list[int], key: int, value: int, state: int) -> None:
        """``table[key] = value`` for a field of ``state``, journaled if the state predates the transient section
        (newer states are dropped whole on rollback)."""
        if self._journal is not None and state < self._kept_states:
            self._journal.append((table, key, table.get(key) if isinstance(table, dict) else table[key]))
        table[key] = value

    def step(self, state: int, length: int, token: int) -> tuple[int, int]:
        """Pattern-matching step: the match after appending ``token``; mutates nothing.

        Args:
            state, length: a suffix ``s`` of some text ``X`` that occurs in this automaton's text, given as its
                state and its length (``length[link[state]] < length <= length[state]``).
            token: the token appended to ``X``.

        Returns:
            ``(state', length')``: the longest suffix of ``s + [token]`` that occurs in the text (``(0, 0)``: none).
            Only the suffix-link chain of ``state`` is visited, up to the first state with a ``token`` transition.
        """
        while state != ROOT and token not in self.transitions[state]:
            state = self.link[state]
            length = self.length[state]
        if token in self.transitions[state]:
            return self.transitions[state][token], length + 1
        return ROOT, 0

    @contextmanager
    def transient(self) -> Iterator[None]:
        """A section whose extensions are undone on exit: the automaton is left exactly as it was.

        Writes to states that existed on entry are journaled and replayed backwards; newer states and tokens are
        dropped. Sections do not nest.
        """
        if self._journal is not None:
            raise RuntimeError("SuffixAutomaton.transient sections do not nest")
        num_tokens, num_states, last = len(self.tokens), self.num_states, self.last
        self._journal, self._kept_states = [], num_states
        try:
            yield
        finally:
            journal, self._journal = self._journal, None
            for table, key, old in reversed(journal):
                if old is None:  # a transition that did not exist
                    del table[key]
                else:
                    table[key] = old
            for table in (self.transitions, self.link, self.length, self.first_end, self.last_end):
                del table[num_states:]
            del self.tokens[num_tokens:]
            self.last = last

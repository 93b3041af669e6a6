"""Speculate or step: a decoding loop's choice each cycle, from what each mode has paid so far.

The batched loop makes it for the whole batch (``generate_batch``, ``speculate="auto"`` by default), the one-sequence
loop where asked (``generate(..., speculate="auto")`` or a :class:`Pace` kept across calls). A speculative cycle of
``B`` rows costs every row's drafting and a forward of every row's tree; a plain step costs a forward of ``B``
tokens. Which emits more tokens per second depends on the machine, the backend, the batch size and the drafter's
acceptance (on a 2-core CPU a batch of 8 runs its plain steps ~1.6x faster than its speculative cycles; one sequence
on an ahead-of-time package steps faster than EAGLE-3 speculates, whose trees are compute-bound there), so it is
measured: :class:`Pace` keeps, for each mode, the tokens the batch emitted per second
of its cycles (decayed sums), runs the better one, and runs the other one cycle in ``explore_every`` to keep its
figure current.

Contract (exactness): the choice reads only the timings and token counts of finished cycles, never the current
cycle's draws, and both modes emit each row's next tokens from its own target law (a step samples ``warp`` of the
target's logits as vanilla decoding does; a cycle verifies its tree). With greedy rows both give the same tokens; at
T > 0 a seed fixes each row's law but, as with any timing-sized tree, not its exact tokens.
"""

from __future__ import annotations

__all__ = ["Always", "Pace"]


class Pace:
    """Chooses, cycle by cycle, whether the batch speculates or steps.

    Args:
        explore_every: one cycle in this many runs the mode not chosen (>= 2).
        warm: cycles of each mode run before choosing (speculation first, then steps).
        decay: weight of the past in each mode's tokens and seconds (per cycle of that mode).
    """

    def __init__(self, explore_every: int = 12, warm: int = 3, decay: float = 0.8) -> None:
        if explore_every < 2 or warm < 1 or not 0.0 <= decay < 1.0:
            raise ValueError(
                f"need explore_every >= 2, warm >= 1, 0 <= decay < 1; got {explore_every}, {warm}, {decay}"
            )
        self.explore_every, self.warm, self.decay = explore_every, warm, decay
        self.tokens = {True: 0.0, False: 0.0}
        self.seconds = {True: 0.0, False: 0.0}
        self.runs = {True: 0, False: 0}
        self.cycle = 0

    def rate(self, speculate: bool) -> float:
        """Tokens per second the mode has given (decayed); 0 before it ran."""
        return self.tokens[speculate] / self.seconds[speculate] if self.seconds[speculate] > 0 else 0.0

    def choose(self) -> bool:
        """True: this cycle speculates; False: every row steps."""
        self.cycle += 1
        for mode in (True, False):
            if self.runs[mode] < self.warm:
                return mode
        best = self.rate(True) >= self.rate(False)
        return (not best) if self.cycle % self.explore_every == 0 else best

    def record(self, speculated: bool, tokens: int, seconds: float) -> None:
        """A finished cycle: the tokens its rows emitted and its wall seconds."""
        d = self.decay
        self.tokens[speculated] = d * self.tokens[speculated] + tokens
        self.seconds[speculated] = d * self.seconds[speculated] + seconds
        self.runs[speculated] += 1


class Always(Pace):
    """Speculates every cycle (``speculate="always"``): the raw speculative batch, for measuring it."""

    def choose(self) -> bool:
        return True

"""Speculate or step, and how large a batch's trees: a decoding loop's choice each cycle, from what each has paid.

The batched loop makes it for the whole batch (``generate_batch``, ``speculate="auto"`` by default), the one-sequence
loop where asked (``generate(..., speculate="auto")`` or a :class:`Pace` kept across calls) and by default where the
target's forwards are steep (:func:`call_pace`). A speculative cycle of
``B`` rows costs every row's drafting and a forward of every row's tree; a plain step costs a forward of ``B``
tokens. Which emits more tokens per second depends on the machine, the backend, the batch size and the drafter's
acceptance (on a 2-core CPU a batch of 8 runs its plain steps ~1.6x faster than its speculative cycles; one sequence
on an ahead-of-time package steps faster than EAGLE-3 speculates, whose trees are compute-bound there), so it is
measured. The choices are *arms*:

* :data:`STEP`: every row one plain token (a tree of the root alone);
* :data:`OWN`: every row speculates with the tree its own policy grows;
* a size ``m >= 2`` (the batched loop's :data:`BATCH_SIZES`): every row whose policy can be resized
  (:meth:`~specdec.interfaces.TreePolicy.resized`) speculates with a tree of ``m`` nodes (a composite adds its
  continuations), the others with their own. A batch's forward is compute-bound past a few rows per sequence, so
  the size that pays is set for the batch by what the cycles measured, not by each row's guess of its share (on a
  2-core Zen 4, 2 or 3 nodes per row at a batch of 4, stepping at a batch of 8:
  ``docs/results/2026-11-30-batch-sizes-amd-f25m17``).

:class:`Pace` keeps, for each arm, the tokens the batch emitted per second of its cycles (decayed sums), runs the
best one, and every ``explore_every`` cycles runs the arm that has waited longest among those within
:attr:`Pace.CLOSE` of the best (the best itself where none is), and every :attr:`Pace.FAR_EVERY`-th such cycle the
stalest of all arms: every figure stays current, and arms far behind are paid for a third as often.

Contract (exactness): the choice reads only the timings and token counts of finished cycles, never the current
cycle's draws, and every arm emits each row's next tokens from its own target law (a step samples ``warp`` of the
target's logits as vanilla decoding does; a cycle verifies its tree, a resized tree being of the kind its policy
grows, which its verifier judges exactly). With greedy rows every arm gives the same tokens; at T > 0 a seed fixes
each row's law but, as with any timing-sized tree, not its exact tokens.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "BATCH_SIZES",
    "OWN",
    "PACED",
    "ROW_DECAY",
    "STEEP",
    "STEP",
    "Always",
    "Fixed",
    "Pace",
    "auto_pace",
    "call_pace",
    "steep_curve",
]

#: The arm in which every row takes one plain token.
STEP = 1
#: The arm in which every row speculates with its own policy's tree.
OWN = 0
#: Tree sizes the batched loop's pace tries beside :data:`OWN` and :data:`STEP` (root included; depth-1 trees that
#: a batch drafts in one head forward, :meth:`~specdec.interfaces.TreePolicy.resized`).
BATCH_SIZES = (2, 3, 4)
#: :attr:`Pace.decay` of one sequence's pace (:func:`auto_pace`). One row's cycle emits 1 to depth + 1 tokens, so
#: its rate is noisier than a batch's, whose cycle sums its rows': at 0.8 (about 9 cycles' memory) a sampled tree's
#: rate at T = 1 fell below a plain step's after a few poor cycles and stayed there, stepping 32 % of the cycles
#: where speculating paid 1.29x (8 MT-bench prompts, AMD Zen 4); at 0.95 (about 39 cycles) 4 %.
ROW_DECAY = 0.95
#: One sequence's pace tries :data:`BATCH_SIZES` only where a target forward of 8 tokens costs at least this many
#: 1-token forwards (:func:`steep_curve`): there the small trees are much cheaper than the own ones. Measured at T = 1
#: (16 MT-bench prompts, AMD Zen 4, one process each): on the ahead-of-time package (8 tokens 2.70x a step) the sizes
#: took EAGLE-3 from 1.00x to 1.10x and the composite from 0.98x to 1.02x vanilla, against the pace without them; on
#: the eager fast path (1.13-1.18x) they gave EAGLE-3 +0.8 % but cost the composite 7 %.
STEEP = 1.5
#: One sequence's default (``speculate=None``, :func:`call_pace`) is paced where a target forward of 8 tokens costs at
#: least this many 1-token forwards, else it speculates every cycle. Measured in one process per temperature: on the
#: Intel Xeon of family 6 model 207's ahead-of-time package (8 tokens 1.43-1.46 steps; Spec-Bench 30 x 96, the
#: composite) the pace ran 1.004x the package's vanilla against always speculating's 0.920x at T = 1, and 1.299x
#: against 1.286x at T = 0; on the AMD Zen 4's eager fast path (1.13-1.18 steps) it cost 1.3-2.3 %. Every eager
#: path measured so far lies under it (1.06-1.21 steps on AMD Zen 3 and 4 and that Xeon).
PACED = 1.35


class Pace:
    """Chooses, cycle by cycle, whether the batch speculates or steps, and at what tree size.

    Args:
        explore_every: one cycle in this many runs the arm that has waited longest (>= 2).
        warm: cycles of each arm run before choosing (speculation first, then the sizes, then steps).
        decay: weight of the past in each arm's tokens and seconds (per cycle of that arm).
        sizes: tree sizes (>= 2) to try beside :data:`OWN` and :data:`STEP` (default none: speculate or step).

    Attributes:
        totals: per arm, undecayed ``[cycles, tokens, seconds]`` over every recorded cycle (for reports: which arms
            ran and what each paid; the choice reads the decayed sums).
    """

    #: An arm whose rate is at least this share of the best one's is explored at every exploring cycle.
    CLOSE = 0.9
    #: One exploring cycle in this many runs the stalest of all arms, however far behind.
    FAR_EVERY = 3

    def __init__(self, explore_every: int = 12, warm: int = 3, decay: float = 0.8, sizes: tuple[int, ...] = ()) -> None:
        if explore_every < 2 or warm < 1 or not 0.0 <= decay < 1.0:
            raise ValueError(
                f"need explore_every >= 2, warm >= 1, 0 <= decay < 1; got {explore_every}, {warm}, {decay}"
            )
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 2 for m in sizes) or len(set(sizes)) < len(sizes):
            raise ValueError(f"sizes must be distinct integers >= 2 (tree nodes, root included), got {sizes!r}")
        self.explore_every, self.warm, self.decay = explore_every, warm, decay
        self.arms: list[int] = [OWN, *sizes, STEP]  # the warm-up's order
        self.tokens = dict.fromkeys(self.arms, 0.0)
        self.seconds = dict.fromkeys(self.arms, 0.0)
        self.runs = dict.fromkeys(self.arms, 0)
        self.last = dict.fromkeys(self.arms, 0)  # the cycle each arm last ran in
        self.cycle = 0
        self.explorations = 0  # exploring cycles so far
        self.totals: dict[int, list[float]] = {a: [0, 0, 0.0] for a in self.arms}  # undecayed cycles, tokens, seconds

    def rate(self, arm: int) -> float:
        """Tokens per second the arm has given (decayed); 0 before it ran."""
        return self.tokens[arm] / self.seconds[arm] if self.seconds[arm] > 0 else 0.0

    def choose(self) -> int:
        """This cycle's arm: :data:`STEP`, :data:`OWN` or a tree size."""
        self.cycle += 1
        for arm in self.arms:
            if self.runs[arm] < self.warm:
                return arm
        best = max(self.arms, key=self.rate)  # ties: the earlier arm
        if self.cycle % self.explore_every:
            return best
        self.explorations += 1
        others = [a for a in self.arms if a != best]
        if self.explorations % self.FAR_EVERY:
            others = [a for a in others if self.rate(a) >= self.CLOSE * self.rate(best)]
        return min(others, key=lambda a: self.last[a]) if others else best

    def next_arm(self) -> int:
        """:meth:`choose`, checked before the cycle runs: a pace's arm (``STEP``, ``OWN`` or one of its sizes), never
        ``True`` / ``False`` (a subclass written for a speculate-or-step choice is refused by name, not misread)."""
        arm = self.choose()
        if isinstance(arm, bool) or arm not in self.tokens:
            raise ValueError(
                f"{type(self).__name__}.choose() returned {arm!r}: an arm is STEP ({STEP}), OWN ({OWN}) or one of "
                f"this pace's sizes {tuple(a for a in self.tokens if a not in (OWN, STEP))}"
            )
        return arm

    def record(self, arm: int, tokens: int, seconds: float) -> None:
        """A finished cycle: the tokens its rows emitted and its wall seconds."""
        d = self.decay
        self.tokens[arm] = d * self.tokens[arm] + tokens
        self.seconds[arm] = d * self.seconds[arm] + seconds
        self.runs[arm] += 1
        self.last[arm] = self.cycle
        total = self.totals[arm]
        total[0] += 1
        total[1] += tokens
        total[2] += seconds

    def arm_for(self, fits: Callable[[int], bool]) -> int:
        """:meth:`next_arm`, where a tree size is chosen that ``fits`` refuses (no tree policy of the call can be
        resized to it): that size dropped, and :data:`OWN` this cycle."""
        arm = self.next_arm()
        if arm not in (OWN, STEP) and not fits(arm):
            self.drop(arm)
            return OWN
        return arm

    def drop(self, arm: int) -> None:
        """Stop trying ``arm`` (a size no row of the batch can be resized to)."""
        if arm in (OWN, STEP):
            raise ValueError("the own-tree and step arms stay")
        if arm in self.arms:
            self.arms.remove(arm)


def auto_pace(rows: int = 1, steep: bool = False) -> Pace:
    """The pace of ``speculate="auto"`` for a call of ``rows`` rows at once: speculate with the rows' own trees,
    with depth-1 trees of :data:`BATCH_SIZES` nodes, or step, whichever has emitted the most tokens per second.
    One sequence (``rows == 1``) remembers longer (:data:`ROW_DECAY`) and tries the sizes only where its target's
    forwards are ``steep`` (:func:`steep_curve`)."""
    sizes = BATCH_SIZES if rows > 1 or steep else ()
    return Pace(decay=ROW_DECAY if rows == 1 else 0.8, sizes=sizes)


def call_pace(speculate: str | Pace | None, rows: int, steep: Callable[[float], bool]) -> Pace:
    """A speculative call's pace: ``"always"`` :class:`Always`, ``"auto"`` :func:`auto_pace`, a :class:`Pace`
    itself; None (one sequence's default) the measured choice: ``"auto"`` where ``steep(PACED)`` (the target's
    forwards cost at least :data:`PACED` steps for 8 tokens, :func:`steep_curve`), else ``"always"``; the pace tries
    the small trees where ``steep(STEEP)``. Measured at T = 0 and T = 1 on AMD Zen 4 (16 MT-bench prompts,
    EAGLE-3 and the composite, one process each): on the eager fast path (8 tokens 1.13-1.18 steps) the pace cost
    1.3-2.3 % against always speculating; on the ahead-of-time package (2.70 steps) it ran 1.00x / 1.02x at T = 0 and
    1.30x / 1.35x at T = 1, where always speculating lost to plain decoding (0.84x / 0.76x)."""
    if isinstance(speculate, Pace):
        return speculate
    if speculate not in ("auto", "always", None):
        raise ValueError(f"speculate must be 'auto', 'always' or None, got {speculate!r}")
    if speculate == "always":
        return Always()
    if speculate is None and not steep(PACED):
        return Always()
    return auto_pace(rows, steep(STEEP))


def steep_curve(cost: Callable[[int], float], factor: float = STEEP) -> bool:
    """Whether a forward of 8 tokens costs at least ``factor`` one-token forwards (``cost``: seconds per forward of
    ``m`` tokens, a :class:`~specdec.budget.CostCurve`'s ``cost``)."""
    return cost(8) >= factor * cost(1)


class Always(Pace):
    """Speculates every cycle with the rows' own trees (``speculate="always"``): the raw speculative batch."""

    def choose(self) -> int:
        return OWN


class Fixed(Pace):
    """Every cycle the same arm (``STEP``, ``OWN`` or a tree size): one arm alone, for measuring or proving it."""

    def __init__(self, arm: int) -> None:
        super().__init__(sizes=() if arm in (OWN, STEP) else (arm,))
        self.arm = arm

    def choose(self) -> int:
        return self.arm

"""EAGLE-2 dynamic trees whose size (and expansion depth) is chosen per cycle from measured costs.

Each cycle grows the candidate pool exactly like :class:`~specdec.trees.dynamic.DynamicTreePolicy` (same
``expand_pool``), then asks :func:`specdec.budget.choose_budget` how many of the best pool nodes to keep: the size
``m`` that maximises ``E[tau(m)] / (cost(m) + drafting time)``, with ``E[tau(m)] = 1 + sum of the m - 1 largest
path probabilities`` and ``cost`` the target's measured forward-cost curve. The kept set is built by
``DynamicTreePolicy.rerank`` of a policy with ``total_tokens = m`` (one small policy object per size, created on
first use), so the tree is exactly the dynamic policy's tree of that size: connected, parents first, same order.

With ``adapt_depth`` the policy also chooses how many levels to draft, under the full cost model (``d`` levels of
drafting at their measured times):

* level by level (the default, ``deferred=False``): after each expand step it asks whether one more level pays,
  before paying for it. The next level's node values are predicted from this cycle's frontier (the ``topk`` best
  nodes of the deepest level) times the *child profile*, the mean sorted top-k draft probabilities of the children of
  non-root nodes in earlier cycles (before any, the root's children in this cycle). The next level is drafted only
  if the best rate with those predicted nodes and one more level's time beats the best rate of the pool as it is.
  Drafting stops where the draft stops being confident, in this cycle, not one cycle late. The profile learns only
  from levels that were drafted, so after ``EXPLORE_EVERY`` cycles without one the next cycle drafts a second level
  regardless (a profile that fell too low would otherwise never be corrected);
* from the previous cycle (``deferred=True``, which must not read values during drafting): the depth ``d*`` of the
  previous pool's best ``(m, d)``, plus one level of look-ahead so a deeper tree can win back when drafts get
  better (``next depth = min(depth, d* + 1)``).

Host syncs: choosing ``m`` on the host needs the pool's node values and depths (``2 x pool_size`` floats, at most
``2 * (topk + (depth - 1) * topk^2)``). By default the policy transfers them itself, one host sync per drafted level
beside the decoding loop's own (free on a CPU; one per cycle with ``adapt_depth=False``); the transfer also bounds
the drafting time measured on CUDA (it waits for the drafter's kernels). With ``deferred=True`` the policy makes no
sync of its own: it hands the values to the decoding loop (:meth:`sync_payload`), which carries them in the cycle's
one sync and returns them through :meth:`observe`, and each cycle's size is chosen from the previous cycle's pool (a
one-cycle lag, like the depth choice). The first cycle, or a cycle after a :meth:`grow` without :meth:`observe`,
transfers its own values as before. Deferred grows make no sync of their own, so on CUDA one in
:data:`~specdec.trees.draft_clock.TIMED_EVERY` of them is timed with the device waited for at both ends
(:class:`~specdec.trees.draft_clock.GrowTimer`): timing them all would read kernel launches only.

Determinism: the candidates are a deterministic function of the context and the policy's state, never of the
sampling generator, so the deterministic-candidate verifiers stay lossless (state carried across cycles depends
only on the past). The measured drafting time makes tree sizes depend on timing, so at T > 0 a seed fixes the
distribution but not the exact sample; pass ``draft_seconds`` for runs whose trees depend on the context only.

Calibration: the drafter's probabilities may be over- or under-confident (the n-gram drafter's rank logits are).
:meth:`AdaptiveTreePolicy.observe` takes the accepted length of each cycle (a host int the generator already
has) and rescales the probabilities by ``observed / predicted`` accepted tokens. The decoding loop calls it after
each cycle's sync (:meth:`specdec.interfaces.TreePolicy.observe`); without calls the raw probabilities are used.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from specdec.budget import Budget, CostCurve, best_budget, budgets_by_depth, choose_budget
from specdec.interfaces import Drafter, TreePolicy
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree, PartialTree
from specdec.trees.draft_clock import GrowTimer
from specdec.trees.dynamic import DynamicTreePolicy

__all__ = ["AdaptiveTreePolicy"]


class AdaptiveTreePolicy(TreePolicy):
    """Dynamic draft tree with a per-cycle, hardware-aware size.

    Args:
        topk: K, children per expanded node and frontier width.
        depth: largest expansion depth (root step included), as in :class:`DynamicTreePolicy`.
        max_total: largest tree (root included).
        curve: the target's forward cost against tree tokens (:func:`specdec.budget.forward_cost_curve`).
        min_total: smallest tree (at least 2: the root and one draft node).
        adapt_depth: choose the next cycle's expansion depth too (see the module docstring).
        draft_seconds: fixed drafting time per expansion level; None measures it (moving average).
        overhead_seconds: per-cycle time outside drafting and the target forward (verify, bookkeeping).
        deferred: choose each cycle's size from the previous cycle's pool, whose values ride on the decoding loop's
            host sync (see the module docstring); False: transfer this cycle's pool values (one extra sync).

    Attributes:
        last_budget: the :class:`~specdec.budget.Budget` of the latest cycle (for inspection).
        last_levels: expand steps (levels) drafted in the latest cycle, root step included.
        current_depth: the largest expansion depth the next cycle may use (``depth`` when chosen level by level).
        child_profile: ``[k]`` mean sorted draft probabilities of a non-root node's top-k children (level by level;
            None before the first such expansion).
        calibration: observed / predicted accepted draft tokens (1.0 until :meth:`observe` is called).
    """

    #: Weight (in accepted tokens) of the calibration prior "the drafter's probabilities are right".
    PRIOR_CYCLES = 2.0
    #: Per-cycle decay of the calibration sums (about 20 cycles of memory).
    DECAY = 0.95
    #: Level by level: cycles without a non-root level after which one is drafted to refresh the child profile.
    EXPLORE_EVERY = 32

    def __init__(
        self,
        topk: int,
        depth: int,
        max_total: int,
        curve: CostCurve,
        min_total: int = 2,
        adapt_depth: bool = True,
        draft_seconds: float | None = None,
        overhead_seconds: float = 0.0,
        deferred: bool = False,
    ) -> None:
        if not 2 <= min_total <= max_total:
            raise ValueError(f"need 2 <= min_total <= max_total, got min_total={min_total}, max_total={max_total}")
        self._full = DynamicTreePolicy(topk=topk, depth=depth, total_tokens=max_total)  # validates topk, depth
        self.topk, self.depth, self.curve = topk, depth, curve
        self.min_total, self.max_total = min_total, max_total
        self.adapt_depth = adapt_depth
        self.draft_seconds = draft_seconds
        self.overhead_seconds = overhead_seconds
        self.deferred = deferred
        self._by_level = adapt_depth and not deferred  # the two regimes: level by level (eager), deferred
        self.max_nodes = self._full.max_nodes
        self.max_depth = depth
        self.current_depth = depth
        self.last_budget: Budget | None = None
        self.last_levels = 0
        self._step_seconds = draft_seconds  # per expansion level; moving average when measured
        self._timer = GrowTimer()  # times the one-shot grows, right where the device runs ahead of the host
        # Level by level: moving averages of the root step's and a later step's seconds, the child profile, and this
        # cycle's state while it grows (level times, the children's log q of non-root steps, the budget at a stop).
        self._root_seconds: float | None = None
        self._level_seconds: float | None = None
        self.child_profile: np.ndarray | None = None
        self._cycle: _Cycle | None = None
        self._shallow_cycles = 0  # cycles in a row that drafted the root step only
        # Calibration (only with observe()): decayed sums of accepted and predicted draft tokens, prior ratio 1.
        self._observed = self._predicted = self.PRIOR_CYCLES
        self._last_predicted: float | None = None
        self._policies: dict[tuple[int, int], DynamicTreePolicy] = {}
        # Deferred mode: this cycle's pool values on the device (awaiting the loop's sync), and the latest
        # host copy (values, depths) that the next cycle's size is chosen from.
        self._payload: torch.Tensor | None = None
        self._host: tuple[np.ndarray, np.ndarray] | None = None

    def _policy(self, depth: int, total: int) -> DynamicTreePolicy:
        key = (depth, total)
        if key not in self._policies:
            self._policies[key] = DynamicTreePolicy(topk=self.topk, depth=depth, total_tokens=total)
        return self._policies[key]

    def resized(self, total: int) -> DynamicTreePolicy | None:
        """:meth:`DynamicTreePolicy.resized` of this policy's largest tree (a batch's size replaces the one chosen
        per cycle; what this policy learns is left as it is)."""
        return self._full.resized(total)

    def grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> DraftTree:
        """Grow the pool at the current depth, choose the size from its values, rerank to that size.

        Args:
            drafter: proposes top-k children, as for :class:`DynamicTreePolicy`.
            root: 0-dim long, the last emitted token.
            sampling, generator: unused (deterministic candidates).
        """
        if self._by_level:
            return self._grow_by_level(drafter, root)
        depth = self.current_depth
        rides = self.deferred and self._host is not None  # sized by the last pool; this one rides the loop's sync
        # the level time, where measured: a grow that reads its values back is timed as it is; one that rides the
        # loop's sync only when due where the device runs ahead (GrowTimer; None: untimed)
        t0 = None if self.draft_seconds is not None else self._timer.start(root.device, synced=not rides)
        pool = self._policy(depth, self.max_total).expand_pool(drafter, root)
        size = pool.size
        pool_values = torch.stack([pool.logq[1:size], pool.depth[1:size].float()])  # [2, size - 1]
        if rides:
            host, self._host = self._host, None
            self._payload = pool_values.reshape(-1)
        else:  # the extra host sync: node values and depths of this cycle's pool (root excluded)
            host = _unpack(np.asarray(pool_values.cpu()))
            self._payload = None
            self._host = host if self.deferred else None  # deferred: also sizes the next cycle
        seconds = self._timer.stop(t0)
        if seconds is not None:
            self._timer.used()
            step = seconds / depth
            self._step_seconds = step if self._step_seconds is None else 0.8 * self._step_seconds + 0.2 * step
        step_seconds = self._step_seconds or 0.0
        values, depths = host
        values = values + np.log(self.calibration)
        # One pass over every depth cut: the next cycle's depth, and this cycle's size (the deepest cut: every node,
        # with all `depth` levels of drafting paid).
        per_depth = budgets_by_depth(
            self.curve,
            values,
            depths=depths,
            max_total=self.max_total,
            min_total=self.min_total,
            fixed_seconds=self.overhead_seconds,
            step_seconds=step_seconds,
        )
        if self.adapt_depth:
            plan = best_budget(per_depth, self.curve, self.overhead_seconds)
            self.current_depth = max(1, min(self.depth, plan.depth + 1))
        if len(per_depth) == depth and per_depth[-1] is not None:
            budget = per_depth[-1]
        else:  # deferred values from a pool of another depth (or too few nodes): this cycle's drafting, every node
            budget = self._every_node(values, depth * step_seconds)
        self.last_budget, self.last_levels = budget, depth
        self._last_predicted = None if self._payload is not None else _predicted(host[0], budget.total_tokens)
        return self._policy(depth, budget.total_tokens).rerank(pool)

    def _every_node(self, calibrated: np.ndarray, draft_seconds: float) -> Budget:
        """The best size among every pool node (no depth cut), ``draft_seconds`` of this cycle's drafting paid."""
        return choose_budget(
            self.curve,
            calibrated,
            max_total=self.max_total,
            min_total=self.min_total,
            fixed_seconds=self.overhead_seconds + draft_seconds,
        )

    # ------------------------------------------------------------------------------------- level by level
    def _grow_by_level(self, drafter: Drafter, root: torch.Tensor) -> DraftTree:
        """Grow while the next level pays (module docstring), choose the size, rerank to it."""
        cycle = self._cycle = _Cycle(time.perf_counter())
        pool = self._policy(self.depth, self.max_total).expand_pool(drafter, root, keep_going=self._next_level_pays)
        self._cycle = None
        self._learn(cycle)
        values, depths = cycle.host  # the final pool's: the hook also sees the last step
        levels = len(cycle.seconds)
        budget = cycle.budget
        if budget is None:  # grown to `depth` levels (or too few nodes at the stop): this pool, every level paid
            per_depth = self._budgets(values, depths, cycle)
            budget = per_depth[levels - 1] if len(per_depth) >= levels else None
        if budget is None:  # fewer nodes than min_total - 1
            root_s, level_s = self._seconds(cycle)
            budget = self._every_node(values + np.log(self.calibration), root_s + (levels - 1) * level_s)
        self.last_budget, self.last_levels = budget, levels
        self._last_predicted = _predicted(values, budget.total_tokens)
        return self._policy(levels, budget.total_tokens).rerank(pool)  # the tree's max_depth: the levels drafted

    def _next_level_pays(self, tree: PartialTree, step: int, top_logq: torch.Tensor) -> bool:
        """``expand_pool``'s ``keep_going``: whether drafting level ``step + 2`` beats stopping after ``step + 1``.

        Records the step's time, its children's q and the pool's values first (also after the last step).
        Contract: a function of this cycle's pool and the policy's past (timings, profile), never of the sampler.
        """
        cycle = self._cycle
        values, depths, top = _host_values(tree, top_logq.reshape(-1))  # one transfer: it waits for the step
        now = time.perf_counter()
        cycle.seconds.append(now - cycle.mark)
        cycle.mark = now
        q = np.exp(top.reshape(top_logq.shape)).mean(axis=0)  # [k] mean child q by rank
        if step == 0:
            cycle.root_q = q
        else:
            cycle.deep_q.append(q)
        cycle.host = values, depths
        levels = step + 1
        if levels >= self.depth:  # the last step: growth ends here anyway
            return False
        if step == 0 and self._shallow_cycles >= self.EXPLORE_EVERY:
            return True
        profile = self.child_profile
        if profile is None or profile.shape != q.shape:
            profile = cycle.deep_q[0] if cycle.deep_q else cycle.root_q
        last = np.flatnonzero(depths == levels)  # the deepest level's nodes, by id
        frontier = last[np.argsort(-values[last], kind="stable")[: self.topk]]
        with np.errstate(divide="ignore"):
            guess = (values[frontier, None] + np.log(profile)[None, :]).reshape(-1)  # the next level's values
        per_depth = self._budgets(
            np.concatenate((values, guess)), np.concatenate((depths, np.full(guess.shape, levels + 1))), cycle
        )
        stop = per_depth[levels - 1] if len(per_depth) >= levels else None
        deeper = per_depth[levels] if len(per_depth) > levels else None
        if deeper is not None and (stop is None or deeper.expected_tokens_per_second > stop.expected_tokens_per_second):
            return True
        cycle.budget = stop
        return False

    def _budgets(self, values: np.ndarray, depths: np.ndarray, cycle: _Cycle) -> list[Budget | None]:
        """:func:`budgets_by_depth` with the root step's and later steps' own times (``d`` levels: root + d - 1)."""
        root_s, level_s = self._seconds(cycle)
        return budgets_by_depth(
            self.curve,
            values + np.log(self.calibration),
            depths=depths,
            max_total=self.max_total,
            min_total=self.min_total,
            fixed_seconds=self.overhead_seconds + root_s - level_s,
            step_seconds=level_s,
        )

    def _seconds(self, cycle: _Cycle) -> tuple[float, float]:
        """(root step, later step) seconds: ``draft_seconds`` if fixed, else the moving averages, else this cycle's."""
        if self.draft_seconds is not None:
            return self.draft_seconds, self.draft_seconds
        root_s = self._root_seconds if self._root_seconds is not None else cycle.seconds[0]
        if self._level_seconds is not None:
            return root_s, self._level_seconds
        return root_s, (cycle.seconds[1] if len(cycle.seconds) > 1 else root_s)

    def _learn(self, cycle: _Cycle) -> None:
        """Fold this cycle's step times and non-root children's q into the moving averages."""
        root_s, later = cycle.seconds[0], cycle.seconds[1:]
        self._root_seconds = root_s if self._root_seconds is None else 0.8 * self._root_seconds + 0.2 * root_s
        for s in later:
            self._level_seconds = s if self._level_seconds is None else 0.8 * self._level_seconds + 0.2 * s
        self._shallow_cycles = 0 if len(cycle.seconds) > 1 else self._shallow_cycles + 1
        for q in cycle.deep_q:
            same = self.child_profile is not None and self.child_profile.shape == q.shape
            self.child_profile = 0.9 * self.child_profile + 0.1 * q if same else q

    def sync_payload(self) -> torch.Tensor | None:
        """Deferred mode: this cycle's pool values ``[2 * (pool_size - 1)]`` float32 for the loop's sync."""
        return self._payload

    @property
    def calibration(self) -> float:
        return min(4.0, max(0.02, self._observed / self._predicted))

    def observe(self, accept_length: int, payload: list[float] | None = None) -> None:
        """Feedback after verification: draft tokens accepted from the latest tree (a host int).

        Scales the drafter's path probabilities by ``observed / predicted`` accepted tokens (decayed sums), so
        an over- or under-confident drafter still gets the right tree size. Optional: without calls, the raw
        probabilities are used. ``payload``: the host copy of :meth:`sync_payload` (deferred mode), which sizes
        the next cycle.
        """
        if self._payload is not None and payload is not None and self.last_budget is not None:
            self._host = _unpack(np.asarray(payload, dtype=np.float32).reshape(2, -1))
            self._last_predicted = _predicted(self._host[0], self.last_budget.total_tokens)
        self._payload = None
        if self._last_predicted is None:
            return
        self._observed = self.DECAY * self._observed + accept_length
        self._predicted = self.DECAY * self._predicted + self._last_predicted
        self._last_predicted = None

    def __repr__(self) -> str:
        return (
            f"AdaptiveTreePolicy(topk={self.topk}, depth={self.depth}, max_total={self.max_total}, "
            f"adapt_depth={self.adapt_depth})"
        )


class _Cycle:
    """One level-by-level cycle while it grows: step seconds, children's q, the pool's host values, the stop."""

    def __init__(self, start: float) -> None:
        self.mark = start  # when the current step began
        self.seconds: list[float] = []  # per drafted level, root step first
        self.root_q: np.ndarray | None = None  # [k] the root's children's q, by rank
        self.deep_q: list[np.ndarray] = []  # [k] per later step: mean q of a node's children, by rank
        self.host: tuple[np.ndarray, np.ndarray] | None = None  # the pool's (values, depths) after the latest step
        self.budget: Budget | None = None  # the pool's budget where growth stopped before `depth` levels


def _host_values(tree: PartialTree, extra: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pool's node values and depths (root excluded) and the 1-D ``extra`` on the host, in one transfer."""
    size = tree.size
    n = size - 1
    rows = (tree.logq[1:size], tree.depth[1:size].float(), extra.float())
    packed = np.asarray(torch.cat(rows).cpu(), dtype=np.float64)
    return packed[:n], packed[n : 2 * n].astype(np.int64), packed[2 * n :]


def _unpack(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[2, n]`` host array of (log value, depth) rows -> (values float, depths int64)."""
    return packed[0], packed[1].astype(np.int64)


def _predicted(values: np.ndarray, total_tokens: int) -> float:
    """Accepted draft tokens the raw values predict for a tree of ``total_tokens``: its best path probabilities."""
    return float(np.sort(np.exp(values))[::-1][: total_tokens - 1].sum())

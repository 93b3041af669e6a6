"""EAGLE-2 dynamic trees whose size (and expansion depth) is chosen per cycle from measured costs.

Each cycle grows the candidate pool exactly like :class:`~specdec.trees.dynamic.DynamicTreePolicy` (same
``expand_pool``), then asks :func:`specdec.budget.choose_budget` how many of the best pool nodes to keep: the size
``m`` that maximises ``E[tau(m)] / (cost(m) + drafting time)``, with ``E[tau(m)] = 1 + sum of the m - 1 largest
path probabilities`` and ``cost`` the target's measured forward-cost curve. The kept set is built by
``DynamicTreePolicy.rerank`` of a policy with ``total_tokens = m`` (one small policy object per size, created on
first use), so the tree is exactly the dynamic policy's tree of that size: connected, parents first, same order.

With ``adapt_depth`` the policy also picks the next cycle's expansion depth: the depth ``d*`` of the best
``(m, d)`` under the full cost model (``d`` levels of drafting at the measured per-level time), plus one level of
look-ahead so a deeper tree can win back when drafts get better (``next depth = min(depth, d* + 1)``).

Host syncs: choosing ``m`` on the host needs the pool's node values and depths (``2 x pool_size`` floats, at most
``2 * (topk + (depth - 1) * topk^2)``). By default the policy transfers them itself, one host sync per cycle beside
the decoding loop's own; the transfer also bounds the drafting time measured on CUDA (it waits for the drafter's
kernels). With ``deferred=True`` the policy makes no sync of its own: it hands the values to the decoding loop
(:meth:`sync_payload`), which carries them in the cycle's one sync and returns them through :meth:`observe`, and
each cycle's size is chosen from the previous cycle's pool (a one-cycle lag, like the depth choice). The first
cycle, or a cycle after a :meth:`grow` without :meth:`observe`, transfers its own values as before. Deferred
timings on CUDA measure kernel launches only: pass ``draft_seconds`` there.

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
from specdec.tree import DraftTree
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
        current_depth: the expansion depth the next cycle will use.
        calibration: observed / predicted accepted draft tokens (1.0 until :meth:`observe` is called).
    """

    #: Weight (in accepted tokens) of the calibration prior "the drafter's probabilities are right".
    PRIOR_CYCLES = 2.0
    #: Per-cycle decay of the calibration sums (about 20 cycles of memory).
    DECAY = 0.95

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
        self.max_nodes = self._full.max_nodes
        self.max_depth = depth
        self.current_depth = depth
        self.last_budget: Budget | None = None
        self._step_seconds = draft_seconds  # per expansion level; moving average when measured
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
        depth = self.current_depth
        t0 = time.perf_counter()
        pool = self._policy(depth, self.max_total).expand_pool(drafter, root)
        size = pool.size
        pool_values = torch.stack([pool.logq[1:size], pool.depth[1:size].float()])  # [2, size - 1]
        if self.deferred and self._host is not None:  # sized by the last pool; this one rides the loop's sync
            host, self._host = self._host, None
            self._payload = pool_values.reshape(-1)
        else:  # the extra host sync: node values and depths of this cycle's pool (root excluded)
            host = _unpack(np.asarray(pool_values.cpu()))
            self._payload = None
            self._host = host if self.deferred else None  # deferred: also sizes the next cycle
        step = (time.perf_counter() - t0) / depth
        if self.draft_seconds is None:
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
            budget = choose_budget(
                self.curve,
                values,
                max_total=self.max_total,
                min_total=self.min_total,
                fixed_seconds=self.overhead_seconds + depth * step_seconds,
            )
        self.last_budget = budget
        self._last_predicted = None if self._payload is not None else _predicted(host[0], budget.total_tokens)
        return self._policy(depth, budget.total_tokens).rerank(pool)

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


def _unpack(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[2, n]`` host array of (log value, depth) rows -> (values float, depths int64)."""
    return packed[0], packed[1].astype(np.int64)


def _predicted(values: np.ndarray, total_tokens: int) -> float:
    """Accepted draft tokens the raw values predict for a tree of ``total_tokens``: its best path probabilities."""
    return float(np.sort(np.exp(values))[::-1][: total_tokens - 1].sum())

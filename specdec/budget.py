"""Hardware-aware draft-tree budget: measure what a target forward costs here, pick the tree size that pays.

EAGLE-2's reference picks ``total_token`` by timing the target at several tree sizes (``total_token=-1``). We do
the same per machine and thread count, then choose the size *per cycle* from the drafter's own path values:

* :func:`measure_forward_cost` times ``target.forward_tree`` on a flat tree of ``m`` tokens (root plus ``m - 1``
  children) after a fixed synthetic context, the median of ``repeats`` interleaved runs per ``m`` in ``sizes``;
  :func:`forward_cost_curve` caches it in ``cache_dir()/budget/`` (:func:`curve_path`) and reuses it.
* :func:`choose_budget` maximises the expected tokens per second of one cycle::

      rate(m, d) = E[tau(m, d)] / (cost(m) + fixed_seconds + d * step_seconds)

  where ``E[tau(m, d)] = 1 + sum of the m - 1 largest path probabilities exp(value)`` among pool nodes of depth
  ``<= d``. A node's path probability under the draft approximates the probability that the node lies on the
  accepted path (EAGLE-2's argument for ranking by value); the expected accepted length is the sum of those
  probabilities over the kept nodes, and the kept set of a dynamic tree is exactly the top values.

The estimate is only as calibrated as the drafter: a trained head's confidences track acceptance well; the n-gram
drafter's rank-based logits are overconfident when a match exists and near zero when none does (where the budget
correctly falls back to the smallest tree).
"""

from __future__ import annotations

import bisect
import copy
import functools
import hashlib
import json
import math
import re
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from specdec import cost_probe
from specdec.backends import attention_label, execution_label
from specdec.backends.measured import row_kernels
from specdec.curve_watch import watch_curve
from specdec.interfaces import TreePolicy
from specdec.models import cache_dir
from specdec.target import HFTarget

__all__ = [
    "DEFAULT_SIZES",
    "Budget",
    "CostCurve",
    "best_budget",
    "budgets_by_depth",
    "choose_budget",
    "curve_path",
    "curves_in",
    "device_label",
    "forward_cost_curve",
    "measure_forward_cost",
    "model_fingerprint",
]

DEFAULT_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)
#: Bumped when a path's costs change in a way its cache file's name does not tell (2: the float64 invariant attention;
#: 3: a single row stock, now in the name): curves measured by older code are measured again.
CURVE_VERSION = 3


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one target tree forward as a function of the number of tree tokens.

    Attributes:
        sizes: measured tree sizes (tokens, root included), increasing.
        seconds: median seconds of one forward at each size.
        meta: how it was measured (model fingerprint, device, threads, context length, repeats, torch, date).
    """

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.seconds) or not self.sizes:
            raise ValueError("a cost curve needs one time per size and at least one size")
        if list(self.sizes) != sorted(set(self.sizes)) or self.sizes[0] < 1:
            raise ValueError(f"sizes must be distinct, increasing and >= 1, got {self.sizes}")
        if any(not (s > 0 and math.isfinite(s)) for s in self.seconds):
            raise ValueError(f"times must be positive and finite, got {self.seconds}")

    def cost(self, m: int) -> float:
        """Seconds for a tree of ``m`` tokens: linear between measured sizes, linear (non-decreasing) beyond."""
        sizes, secs = self.sizes, self.seconds
        if m <= sizes[0] or len(sizes) == 1:
            return secs[0] if m <= sizes[0] else secs[0] * m / sizes[0]
        i = bisect.bisect_left(sizes, m)
        if i == len(sizes):  # extrapolate from the last two points
            i -= 1
        x0, x1, y0, y1 = sizes[i - 1], sizes[i], secs[i - 1], secs[i]
        slope = max(0.0, (y1 - y0) / (x1 - x0))
        return y0 + slope * (m - x0) if m <= x1 else y1 + slope * (m - x1)

    @functools.lru_cache(maxsize=8)  # noqa: B019 (curves are few, small and immutable)
    def costs(self, up_to: int) -> np.ndarray:
        """``[up_to]`` float64: ``cost(m)`` for ``m = 1 .. up_to`` (cached; read-only)."""
        table = np.array([self.cost(m) for m in range(1, up_to + 1)], dtype=np.float64)
        table.setflags(write=False)
        return table

    def per_row(self, rows: int) -> CostCurve:
        """A row's share of a batched forward: ``cost(rows * m) / rows`` at each measured size ``m`` (``rows`` trees
        of ``m`` tokens run as one forward of ``rows * m``; the linear layers dominate, which see just that many
        rows). A policy holding this curve sizes a batch row's tree for what it costs the batch."""
        if rows == 1:
            return self
        seconds = tuple(self.cost(rows * m) / rows for m in self.sizes)
        return CostCurve(self.sizes, seconds, {**self.meta, "rows": rows})

    def to_json(self) -> dict:
        return {"version": CURVE_VERSION, "sizes": list(self.sizes), "seconds": list(self.seconds), "meta": self.meta}

    @classmethod
    def from_json(cls, data: dict) -> CostCurve:
        return cls(tuple(int(s) for s in data["sizes"]), tuple(float(s) for s in data["seconds"]), data.get("meta", {}))

    def table(self) -> str:
        """Human-readable curve: size, ms per forward, ms per token."""
        lines = [f"{'tokens':>6}  {'ms/forward':>10}  {'ms/token':>8}"]
        for m, s in zip(self.sizes, self.seconds, strict=True):
            lines.append(f"{m:>6}  {s * 1e3:>10.2f}  {s * 1e3 / m:>8.2f}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Budget:
    """The chosen tree: ``total_tokens`` nodes (root included) whose deepest node has depth ``depth``."""

    total_tokens: int
    depth: int
    expected_tau: float
    expected_tokens_per_second: float


# ------------------------------------------------------------------------------------------------- identity
def model_fingerprint(model: torch.nn.Module) -> str:
    """Short stable id of a model: class, config and a checksum of a few weights (no full hash of the weights)."""
    h = hashlib.sha256(type(model).__name__.encode())
    config = getattr(model, "config", None)
    if config is not None:
        h.update(config.to_json_string(use_diff=False).encode())
    params = list(model.parameters())
    h.update(str(sum(p.numel() for p in params)).encode())
    with torch.no_grad():
        for p in params[:: max(1, len(params) // 8)]:
            sample = p.detach().reshape(-1)[:64].float().cpu()
            h.update(f"{p.dtype}:{tuple(p.shape)}:{float(sample.sum()):.6e}:{float(sample.abs().sum()):.6e}".encode())
    return h.hexdigest()[:16]


def device_label(device: torch.device) -> str:
    """``cpu`` or e.g. ``cuda-NVIDIA_H100_80GB_HBM3`` (safe as a file-name part)."""
    device = torch.device(device)
    name = device.type
    if device.type == "cuda":
        name += "-" + torch.cuda.get_device_name(device)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def curve_path(model: torch.nn.Module, device: torch.device, threads: int | None = None) -> Path:
    """Where the curve of ``model`` on ``device`` with ``threads`` CPU threads and its current backend is cached: the
    backend (:func:`_backend_label`) and the dtype (in the fingerprint) name it, so the adaptive budget picks its tree
    sizes from the costs of the path that will actually run."""
    threads = threads or torch.get_num_threads()
    name = f"{model_fingerprint(model)}-{device_label(device)}-{threads}-{_backend_label(model)}.json"
    return cache_dir() / "budget" / name


def _backend_label(model: torch.nn.Module) -> str:
    """A curve's name: weights (:func:`specdec.backends.execution_label`), row kernels (``row_kernels``, ``+pad5`` among
    them; ``+1pad``: single rows padded beside the few-row attention), the attention's form (``attention_label``)."""
    att, pad = attention_label(model), any(getattr(m, "pad_single_row", False) for m in model.modules())
    return execution_label(model) + row_kernels(model) + "+1pad" * (pad and att == "+attention") + att


# ------------------------------------------------------------------------------------------------- measuring
@torch.no_grad()
def measure_forward_cost(
    target: HFTarget,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeats: int = 5,
    context: int = 256,
    save: bool = True,
) -> CostCurve:
    """Time ``target.forward_tree`` against the number of tree tokens on this machine.

    Args:
        target: the adapter to time (its cache is reset and reused; nothing is committed).
        sizes: tree sizes in tokens (root included).
        repeats: timed forwards per size (after one warm-up round); sizes are interleaved within each round
            so a slow patch of a shared machine hits every size alike; the median is kept.
        context: tokens of synthetic committed context before the tree (clamped to fit the cache).
        save: write the curve to :func:`curve_path`.

    Returns:
        The :class:`CostCurve`. A probe whose times dip with more tokens (a bigger tree timed faster than a smaller one:
        the machine was busy) runs again, up to :data:`~specdec.cost_probe.PROBE_ATTEMPTS` times; if it still dips, the
        curve is kept flattened, marked ``meta["noisy"]``, with one warning, and :func:`forward_cost_curve` measures it
        again when it is next used, unless every try timed every size alike (:func:`~specdec.cost_probe.agree`: the dip
        is the machine's, kept flattened, named in ``meta["steady_dip"]``, not noisy). (A noisy probe once sized every
        adaptive tree of a machine for a forward twice as cheap as it was: ``docs/results/2026-11-28-house-zen3``.)
    """
    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"sizes must be positive, got {sizes}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    device = target.device
    context = max(1, min(context, target.max_len - sizes[-1] - 1))
    if context + sizes[-1] > target.max_len:
        raise ValueError(f"a tree of {sizes[-1]} tokens does not fit the target cache of {target.max_len}")
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, target.vocab_size, (context,), generator=g).to(device)
    trees = {m: cost_probe.flat_tree(m, device, g, target.vocab_size) for m in sizes}
    target.prefill(prompt)
    attempts: list[list[float]] = []
    for _attempt in range(cost_probe.PROBE_ATTEMPTS):  # times that dip with more tokens: a busy machine? again
        seconds = cost_probe.probe(target, sizes, trees, repeats)
        attempts.append(seconds)
        dip = cost_probe.first_dip(seconds)
        if dip is None:
            break
    target.reset()
    steady_dip = dip is not None and cost_probe.agree(attempts)
    if steady_dip:  # the same times every try: this machine's forward really is cheaper there (not noise)
        seconds = [statistics.median(times) for times in zip(*attempts, strict=True)]
        dip = cost_probe.first_dip(seconds)  # where the tries' medians dip (None: within the tolerance)
    elif dip is not None:
        warnings.warn(
            f"the forward-cost probe is noisy on this machine: a tree of {sizes[dip]} tokens timed "
            f"{seconds[dip] * 1e3:.1f} ms, below {sizes[dip - 1]} tokens' {seconds[dip - 1] * 1e3:.1f} ms, in "
            f"{cost_probe.PROBE_ATTEMPTS} tries; the curve is kept for now and measured again when next used (run "
            "`specdec budget --refresh` on a quiet machine)",
            stacklevel=2,
        )
    # Forward time cannot shrink with more tokens; a noisy dip would make the budget chase it (a steady one is priced
    # from above too: a tree is not padded to the larger size's shape).
    for i in range(1, len(seconds)):
        seconds[i] = max(seconds[i], seconds[i - 1])
    meta = {
        "fingerprint": model_fingerprint(target.model),
        "device": device_label(device),
        "threads": torch.get_num_threads(),
        "backend": _backend_label(target.model),
        "context": context,
        "repeats": repeats,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "noisy": dip is not None and not steady_dip,
        "steady_dip": sizes[dip] if steady_dip and dip is not None else None,
    }
    curve = CostCurve(tuple(sizes), tuple(seconds), meta)
    if save:
        path = curve_path(target.model, device)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(curve.to_json(), indent=2))
        tmp.replace(path)
    return curve


def forward_cost_curve(
    target: HFTarget, refresh: bool = False, sizes: Sequence[int] = DEFAULT_SIZES, context: int = 256, repeats: int = 5
) -> CostCurve:
    """The cached curve for this model, device and thread count, measured (and cached) on first use.

    The decoding loop checks the curve against the tree forwards it times (:mod:`specdec.curve_watch`): a cached
    curve they disagree with is marked stale and measured again here at its next use.

    The measurement runs on a private adapter around ``target.model`` (cache of ``context + max(sizes) + 1``), so
    the curve does not depend on the caller's cache size and the caller's cache is left alone.
    """
    path = curve_path(target.model, target.device)
    if not refresh and path.is_file():
        try:
            data = json.loads(path.read_text())
            meta = data.get("meta", {})
            if data.get("version") == CURVE_VERSION and not meta.get("noisy") and not meta.get("stale"):
                return watch_curve(CostCurve.from_json(data), path, fresh=False)  # noisy or stale: measured again
        except (ValueError, KeyError, TypeError):
            pass  # a corrupt cache file is re-measured
    limit = getattr(target.config, "max_position_embeddings", None) or 1 << 30
    probe = target.sibling(max_len=min(limit, context + max(sizes) + 1))
    curve = measure_forward_cost(probe, sizes=sizes, repeats=repeats, context=context, save=True)
    return watch_curve(curve, path, fresh=True)


# ------------------------------------------------------------------------------------------------- choosing
def choose_budget(
    curve: CostCurve,
    path_values: Sequence[float],
    depths: Sequence[int] | None = None,
    max_total: int | None = None,
    min_total: int = 2,
    fixed_seconds: float = 0.0,
    step_seconds: float = 0.0,
) -> Budget:
    """Tree size (and depth) maximising expected tokens per second for one cycle.

    Args:
        curve: target forward cost against tree tokens.
        path_values: the pool's node values (log draft probability of each node's root path, root excluded),
            in any order.
        depths: the depth of each node (same order). Given, the depth ``d`` is chosen too: only nodes of depth
            ``<= d`` are eligible and each level costs ``step_seconds``. Without it, ``d`` is the pool's depth.
        max_total: largest tree (root included); default ``len(path_values) + 1``.
        min_total: smallest tree (2: the root and one draft node; 1 allows a root-only step).
        fixed_seconds: per-cycle time that does not depend on ``m`` or ``d`` (drafting already done, verify).
        step_seconds: drafting time per expansion level (only used with ``depths``).

    Returns:
        The :class:`Budget` with the best ``expected_tau / seconds``; ties go to the smaller tree, then the
        shallower one. ``depth`` is the deepest kept node's depth.
    """
    per_depth = budgets_by_depth(curve, path_values, depths, max_total, min_total, fixed_seconds, step_seconds)
    return best_budget(per_depth, curve, fixed_seconds)


def best_budget(per_depth: Sequence[Budget | None], curve: CostCurve, fixed_seconds: float = 0.0) -> Budget:
    """The best of :func:`budgets_by_depth`'s entries: the shallowest among equal rates; the root alone if none."""
    best: Budget | None = None
    for b in per_depth:  # shallow first; a deeper cut must beat the best so far
        if b is None:
            continue
        if best is None or b.expected_tokens_per_second > best.expected_tokens_per_second * (1 + 1e-12):
            best = b
    if best is None:  # no node at all: the root alone
        return Budget(1, 0, 1.0, 1.0 / (curve.cost(1) + fixed_seconds))
    return best


def budgets_by_depth(
    curve: CostCurve,
    path_values: Sequence[float],
    depths: Sequence[int] | None = None,
    max_total: int | None = None,
    min_total: int = 2,
    fixed_seconds: float = 0.0,
    step_seconds: float = 0.0,
) -> list[Budget | None]:
    """The best tree size for each depth cut, all depths in one vectorised pass (arguments as :func:`choose_budget`).

    Returns:
        Entry ``d - 1``: the best :class:`Budget` among nodes of depth ``<= d``, with ``d * step_seconds`` of
        drafting added to ``fixed_seconds`` (None where fewer than ``min_total - 1`` nodes are that shallow), for
        ``d = 1 .. max depth``. Without ``depths`` there is one entry: every node, ``fixed_seconds`` only, depth 1.
        An empty pool gives an empty list.
    """
    values = np.asarray(path_values, dtype=np.float64).reshape(-1)
    n = values.shape[0]
    hi = min(max_total if max_total is not None else n + 1, n + 1)
    lo = max(1, min(min_total, hi))
    node_depth = np.ones(n, dtype=np.int64) if depths is None else np.asarray(depths, dtype=np.int64).reshape(-1)
    if node_depth.shape[0] != n:
        raise ValueError(f"{n} values but {node_depth.shape[0]} depths")
    if n == 0 or hi < 1:  # nothing to keep (or no tree allowed): best_budget gives the root alone
        return []
    probs = np.exp(values)
    probs = np.where(probs == probs, np.minimum(probs, 1.0), 0.0)  # NaN -> 0 (as a probability it means nothing)
    order = np.argsort(-probs, kind="stable")
    probs, node_depth = probs[order], node_depth[order]
    levels = np.arange(1, int(node_depth.max()) + 1)  # [D]
    eligible = node_depth[None, :] <= levels[:, None]  # [D, n]
    # Column j of row d: the tree of the best `rank[d, j]` eligible nodes, ending with node j (if j is eligible).
    rank = np.cumsum(eligible, axis=1)  # [D, n] eligible nodes among the first j + 1
    tau = 1.0 + np.cumsum(np.where(eligible, probs, 0.0), axis=1)  # [D, n]
    deepest = np.maximum.accumulate(np.where(eligible, node_depth, 0), axis=1)  # [D, n]
    costs = curve.costs(hi)  # costs[m - 1]
    extra = np.reshape(fixed_seconds + (levels * step_seconds if depths is not None else 0.0), (-1, 1))  # [D, 1]
    size = rank + 1  # root included
    ok = eligible & (size >= lo) & (size <= hi)
    rate = np.where(ok, tau / (costs[np.minimum(rank, hi - 1)] + extra), -np.inf)  # [D, n]
    root_rate = 1.0 / (costs[0] + extra[:, 0])  # [D] the root alone (allowed when lo == 1)
    out: list[Budget | None] = []
    for d in range(levels.shape[0]):
        j = int(np.argmax(rate[d]))  # first maximum: the smallest tree among ties
        if lo == 1 and not root_rate[d] < rate[d, j]:
            out.append(Budget(1, 0, 1.0, float(root_rate[d])))
        elif ok[d, j]:
            out.append(Budget(int(size[d, j]), int(deepest[d, j]), float(tau[d, j]), float(rate[d, j])))
        else:
            out.append(None)  # fewer than lo - 1 nodes this shallow
    return out


def _curves(obj: object, seen: set[int], found: dict[int, CostCurve]) -> None:
    """Every :class:`CostCurve` reachable through ``obj``'s attributes, lists, tuples and dicts."""
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None), torch.Tensor, np.ndarray)):
        return
    seen.add(id(obj))
    if isinstance(obj, CostCurve):
        found[id(obj)] = obj
        return
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else None
    if items is None:
        items = vars(obj).values() if hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module) else ()
    for item in items:
        _curves(item, seen, found)


def curves_in(obj: object) -> list[CostCurve]:
    """Every :class:`CostCurve` ``obj`` (a policy) holds, each once."""
    found: dict[int, CostCurve] = {}
    _curves(obj, set(), found)
    return list(found.values())


def policy_for_rows(policy: TreePolicy, rows: int) -> TreePolicy:
    """A batch row's own policy: a deep copy (so the state a tree keeps until its feedback and what the policy learns
    stay the row's; contract: a policy can be deep-copied), whose cost curves are the row's share of a batch of
    ``rows`` (:meth:`CostCurve.per_row`), so its trees are sized for the batch."""
    found: dict[int, CostCurve] = {}
    _curves(policy, set(), found)
    memo = {key: curve.per_row(rows) for key, curve in found.items()}
    return copy.deepcopy(policy, memo)

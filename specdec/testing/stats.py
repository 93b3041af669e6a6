"""Black-box statistical checks: does a verifier's *sampled* output follow the target distribution?

These work on any :class:`~specdec.interfaces.Verifier` (only :meth:`verify` is called), and on any sampler that
can produce sequence indices. They complement the exact suite: the exact suite proves a plan, these also exercise
the walk, the coins and the residual sampling.

False-positive rate: for a correct sampler, :func:`g_test` returns a p-value that is (asymptotically, by the
chi-square approximation of the G statistic, made reasonable by pooling cells with expected count < 5) uniform,
so a check at level ``alpha`` wrongly fails with probability about ``alpha``; :func:`assert_same_distribution`
with ``n_tests`` divides ``alpha`` by ``n_tests`` (Bonferroni), so a family of ``n_tests`` checks wrongly fails
with probability at most about ``alpha``. At a fixed seed a check is deterministic: it passes or fails for ever.
Observing a sequence whose exact probability is 0 (``<= 1e-12``) is a certain failure (p-value 0).
"""

from __future__ import annotations

import torch

from specdec.interfaces import Verdict, Verifier
from specdec.sampling import sample
from specdec.testing.cases import VerifyCase
from specdec.testing.exact import target_distribution
from specdec.tree import DraftTree

__all__ = [
    "assert_same_distribution",
    "check_settings",
    "check_verdict",
    "empirical_verify_check",
    "g_test",
    "sample_cycle_outputs",
]

#: Exact probabilities at or below this count as impossible events.
ZERO_PROB = 1e-12


def check_settings(alpha: float | None = None, n_tests: int | None = None, n_samples: int | None = None) -> None:
    """Refuse settings under which a check would pass or fail whatever the sampler does.

    ``alpha`` must lie in (0, 1) (0 or less never rejects, 1 or more always does), ``n_tests`` and ``n_samples``
    must be integers >= 1 (no samples is no evidence). ``None`` skips an argument.

    Raises:
        ValueError: naming the argument and the value.
    """
    if alpha is not None and not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be a false-positive rate in (0, 1), got {alpha!r}")
    for name, value in (("n_tests", n_tests), ("n_samples", n_samples)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def g_test(counts: torch.Tensor, expected_probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """G-test of goodness of fit; returns the p-value.

    Cells whose expected count ``n * p`` is below ``min_expected`` are pooled into one cell (and that cell into
    the smallest other one if it is still below ``min_expected``). ``G = 2 sum O ln(O / E)`` is compared with a
    chi-square with ``cells - 1`` degrees of freedom: ``p = gammaincc(df / 2, G / 2)`` (no scipy).

    Args:
        counts: ``[K]`` observed counts (any numeric dtype).
        expected_probs: ``[K]`` nonnegative, normalised here.

    Returns:
        The p-value in ``[0, 1]``: 0.0 if a cell with probability ``<= 1e-12`` was observed; 1.0 if fewer than two
        cells remain after pooling or there are no observations.
    """
    o = counts.detach().to("cpu", torch.float64).flatten()
    p = expected_probs.detach().to("cpu", torch.float64).flatten()
    if o.shape != p.shape:
        raise ValueError(f"counts {tuple(o.shape)} and expected_probs {tuple(p.shape)} differ")
    if (p < 0).any() or not torch.isfinite(p).all() or p.sum() <= 0:
        raise ValueError("expected_probs must be finite, nonnegative and not all zero")
    p = p / p.sum()
    n = float(o.sum())
    if n == 0:
        return 1.0
    possible = p > ZERO_PROB
    if bool((o[~possible] > 0).any()):
        return 0.0
    o, e = o[possible], n * p[possible]
    small = e < min_expected
    o_big, e_big = o[~small], e[~small]
    o_pool, e_pool = o[small].sum(), e[small].sum()
    if e_pool > 0:
        if e_pool < min_expected and e_big.numel() > 0:
            j = int(e_big.argmin())
            o_big, e_big = o_big.clone(), e_big.clone()
            o_big[j] += o_pool
            e_big[j] += e_pool
        else:
            o_big = torch.cat([o_big, o_pool.reshape(1)])
            e_big = torch.cat([e_big, e_pool.reshape(1)])
    df = o_big.numel() - 1
    if df < 1:
        return 1.0
    terms = torch.where(o_big > 0, o_big * torch.log(o_big / e_big), torch.zeros_like(o_big))
    g = 2.0 * terms.sum().clamp(min=0.0)
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), g / 2.0))


def assert_same_distribution(
    samples: torch.Tensor, exact_probs: torch.Tensor, alpha: float = 1e-3, n_tests: int = 1
) -> float:
    """Assert that ``samples`` look drawn from ``exact_probs`` (G-test at level ``alpha / n_tests``).

    Args:
        samples: ``[S]`` long indices into the flattened ``exact_probs``.
        exact_probs: ``[...]`` probabilities of every outcome (flattened).
        alpha: family-wise false-positive rate.
        n_tests: number of checks in the family (Bonferroni).

    Returns:
        The p-value (when the check passes).

    Raises:
        AssertionError: if the p-value is ``<= alpha / n_tests``.
        ValueError: on settings that decide the outcome by themselves (:func:`check_settings`) or no samples.
    """
    check_settings(alpha, n_tests)
    probs = exact_probs.detach().to("cpu", torch.float64).flatten()
    idx = samples.detach().to("cpu").flatten().long()
    if idx.numel() == 0:
        raise ValueError("no samples to test: a G-test of nothing passes whatever the sampler does")
    if idx.numel() and (idx.min() < 0 or idx.max() >= probs.numel()):
        raise ValueError("sample index out of range")
    counts = torch.bincount(idx, minlength=probs.numel())
    p_value = g_test(counts, probs)
    level = alpha / n_tests
    if not p_value > level:
        top = torch.argsort((counts / max(idx.numel(), 1) - probs).abs(), descending=True)[:3].tolist()
        detail = ", ".join(f"#{j}: freq {float(counts[j]) / idx.numel():.4f} vs p {float(probs[j]):.4f}" for j in top)
        raise AssertionError(
            f"samples do not follow the exact distribution: G-test p-value {p_value:.3g} <= {level:.3g} "
            f"(n={idx.numel()}; largest deviations {detail})"
        )
    return p_value


def check_verdict(tree: DraftTree, verdict: Verdict, vocab_size: int) -> None:
    """A verdict any verifier must give (:class:`~specdec.interfaces.Verdict`'s contract): ``accepted`` is
    ``[max_depth + 1]``, starts at the root and walks from parent to child for ``accept_length`` steps, -1 after;
    ``bonus_token`` is a token id.

    Raises:
        AssertionError: naming what the verdict breaks (a verifier bug, so the check fails).
    """
    path = verdict.accepted.tolist()
    n_acc, bonus = int(verdict.accept_length), int(verdict.bonus_token)
    parents = tree.parents.tolist()
    what = None
    if len(path) != tree.max_depth + 1:
        what = f"accepted has {len(path)} entries, expected max_depth + 1 = {tree.max_depth + 1}"
    elif not 0 <= n_acc <= tree.max_depth:
        what = f"accept_length {n_acc} outside [0, {tree.max_depth}]"
    elif not 0 <= bonus < vocab_size:
        what = f"bonus token {bonus} outside the vocabulary [0, {vocab_size})"
    elif path[0] != 0 or any(p != -1 for p in path[n_acc + 1 :]):
        what = f"accepted path {path} must start at the root (0) and hold -1 after its {n_acc} accepted nodes"
    else:
        for prev, node in zip(path[:n_acc], path[1 : n_acc + 1], strict=True):
            if not (0 < node < len(parents) and parents[node] == prev):
                what = f"accepted path {path}: node {node} is not a child of node {prev}"
                break
    if what is not None:
        raise AssertionError(f"invalid verdict: {what}")


def sample_cycle_outputs(verifier: Verifier, case: VerifyCase, n_samples: int, seed: int) -> torch.Tensor:
    """Run one cycle ``n_samples`` times and complete each output to ``D + 1`` tokens with the target process.

    Candidates (sampled cases) are drawn with a generator seeded ``seed + 1``, the verifier's coins come from one
    seeded ``seed``, and the completion from one seeded ``seed + 2``.

    Returns:
        ``[n_samples, D + 1]`` long token sequences.
    """
    check_settings(n_samples=n_samples)
    v, d_max = case.vocab_size, case.depth
    coins = torch.Generator().manual_seed(seed)
    draws = torch.Generator().manual_seed(seed + 1)
    fill = torch.Generator().manual_seed(seed + 2)
    trees: dict[tuple[int, ...], tuple] = {}
    node_tokens, accepted, lengths, bonus = [], [], [], []
    for _ in range(n_samples):
        tokens = case.sample_tokens(draws)
        if tokens not in trees:
            trees[tokens] = case.build_tree(tokens)
        tree, logits = trees[tokens]
        verdict = verifier.verify(tree, logits, case.sampling, coins)
        check_verdict(tree, verdict, v)
        node_tokens.append(tree.tokens)
        accepted.append(verdict.accepted)
        lengths.append(verdict.accept_length)
        bonus.append(verdict.bonus_token)
    node_tokens_t = torch.stack(node_tokens)  # [S, N]
    accepted_t = torch.stack(accepted)  # [S, max_depth + 1]
    lengths_t = torch.stack(lengths).long()  # [S]
    bonus_t = torch.stack(bonus).long()  # [S]
    s = n_samples
    rows = torch.arange(s)
    seqs = torch.full((s, d_max + 1), -1, dtype=torch.long)
    for j in range(d_max):  # accepted draft tokens: path position j + 1
        node = accepted_t[:, j + 1].clamp(min=0)
        seqs[:, j] = torch.where(j < lengths_t, node_tokens_t[rows, node], seqs[:, j])
    seqs[rows, lengths_t] = bonus_t
    filled = lengths_t + 1
    cond = [t.reshape(v**i, v) for i, t in enumerate(case.target_conditionals())]
    for i in range(1, d_max + 1):
        need = filled <= i
        prefix = torch.zeros(s, dtype=torch.long)
        for j in range(i):
            prefix = prefix * v + seqs[:, j].clamp(min=0)
        draw = sample(cond[i][prefix], fill)
        seqs[:, i] = torch.where(need, draw, seqs[:, i])
        filled = torch.where(need, torch.full_like(filled, i + 1), filled)
    return seqs


def empirical_verify_check(
    verifier: Verifier,
    case: VerifyCase,
    n_samples: int = 4000,
    seed: int = 0,
    alpha: float = 1e-3,
) -> float:
    """G-test the distribution of (one cycle + target completion) against the exact target distribution.

    Uses only ``verifier.verify``, so any :class:`~specdec.interfaces.Verifier` can be checked. A correct verifier
    fails with probability about ``alpha`` over the choice of ``seed`` (deterministic at a fixed seed); pass
    ``alpha / n_checks`` yourself when running several (Bonferroni). The power depends on ``n_samples`` and on
    the size of the effect; keep ``V ** (D + 1)`` small (tens of cells) for power at a few thousand samples.

    Returns:
        The p-value.

    Raises:
        AssertionError: if the p-value is ``<= alpha``.
        ValueError: on settings that decide the outcome by themselves (:func:`check_settings`).
    """
    check_settings(alpha, n_samples=n_samples)
    seqs = sample_cycle_outputs(verifier, case, n_samples, seed)
    v = case.vocab_size
    flat = torch.zeros(n_samples, dtype=torch.long)
    for j in range(case.depth + 1):
        flat = flat * v + seqs[:, j]
    try:
        return assert_same_distribution(flat, target_distribution(case), alpha=alpha)
    except AssertionError as err:
        raise AssertionError(f"{verifier!r} on case {case.name or '?'}: {err}") from None

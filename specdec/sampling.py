"""Sampling settings and the one logits -> p transform shared by vanilla and speculative decoding.

Contract: every place that turns target logits into the target distribution p calls :func:`warp` with the
same :class:`SamplingParams`. Vanilla decoding samples from ``warp(logits)``; every verifier accepts against
``warp(logits)``. That is what makes "the speculative output has the vanilla distribution" a meaningful claim
when temperature, top-k or top-p are on.
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from specdec.backends.native import draws, nucleus, runs_native
from specdec.errors import SpecdecError

__all__ = [
    "SamplingParams",
    "warp",
    "greedy_tokens",
    "sample",
    "sample_distinct",
    "check_finite",
    "logits_ok",
    "NonFiniteLogitsError",
]


class NonFiniteLogitsError(SpecdecError, ValueError):
    """The target (or draft) produced NaN or infinite logits where a distribution was needed."""


class SamplingParams(BaseModel):
    """Validated sampling settings.

    Attributes:
        temperature: 0 means greedy (argmax, first index on ties); otherwise logits are divided by it.
        top_k: keep the k most likely tokens (0 = off).
        top_p: keep the smallest set of most likely tokens whose mass reaches top_p (1.0 = off). Like top_k it
            filters what a temperature > 0 samples from; at temperature 0 both keep the argmax, so they change
            nothing there (as in transformers with ``do_sample=False``).
        seed: seed for the torch.Generator a generator creates when none is passed in.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.0, ge=0.0)
    top_k: int = Field(0, ge=0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)  # what torch.Generator.manual_seed takes

    @field_validator("temperature", "top_p")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"must be a finite number, got {v}")
        return v

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def logits_ok(logits: torch.Tensor) -> torch.Tensor:
    """0-dim bool tensor: no NaN, no +inf, and every row has a finite entry (no host sync)."""
    # One pass: a row's max is NaN if the row holds a NaN, +inf if it holds +inf, -inf if all entries are -inf.
    return torch.isfinite(logits.amax(-1)).all()


def check_finite(logits: torch.Tensor, what: str = "target logits") -> None:
    """Raise :class:`NonFiniteLogitsError` unless :func:`logits_ok` (forces a host sync)."""
    if not bool(logits_ok(logits)):
        raise NonFiniteLogitsError(f"{what} contain NaN/+inf values or an all -inf row; refusing to sample")


#: Below this temperature :func:`warp` subtracts each row's maximum before dividing, so that ``x / T`` cannot
#: overflow; above it, overflow needs logits beyond ~3e18, and the plain ``x / T`` keeps transformers' bits.
TINY_TEMPERATURE = 1e-20


def warp(logits: torch.Tensor, params: SamplingParams, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Turn logits into the distribution p that decoding samples from.

    Args:
        logits: ``[..., V]`` raw logits (any float dtype).
        params: the sampling settings.
        dtype: dtype of the returned probabilities (float64 in exact tests).

    Returns:
        ``[..., V]`` probabilities summing to 1 on the last axis. For ``temperature == 0`` this is the one-hot
        vector of ``argmax`` (first index on ties), so greedy decoding is the T=0 case of sampling.
    """
    x = logits.to(dtype)
    if params.greedy:
        return torch.zeros_like(x).scatter_(-1, greedy_tokens(x, dtype)[..., None], 1.0)
    if params.temperature < TINY_TEMPERATURE:
        # x / T would overflow to inf (a logit of 20 at T = 1e-38 in float32), and the softmax of inf is NaN; each
        # row's maximum first: (x - max) / T <= 0, the argmax's one-hot at a tiny T (the limit T -> 0)
        x = (x - x.amax(-1, keepdim=True)) / params.temperature
    elif params.temperature != 1.0:  # x / 1.0 == x exactly: skip the [..., V] copy
        x = x / params.temperature  # transformers' TemperatureLogitsWarper, bit for bit
    if params.top_k and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, -math.inf)
    if params.top_p < 1.0:
        if runs_native(x):  # the same cut from the softmax's masses, sorting only the tokens above it (native.nucleus)
            return nucleus(torch.softmax(x, dim=-1), params.top_p)
        x = x.masked_fill(_outside_nucleus(x, params.top_p), -math.inf)
    return torch.softmax(x, dim=-1)


#: How many of a row's largest logits the CPU looks through before sorting the whole row (:func:`_outside_nucleus`).
NUCLEUS_SCAN = (256, 4096)


def _outside_nucleus(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """``[..., V]`` bool: the tokens top-p drops, those whose probability mass *before* them in descending order is
    already ``>= top_p`` (the first token is always kept; transformers' rule, see tests/test_warp_vs_transformers.py).

    The tensor form, for the devices and settings the native cut (:func:`specdec.backends.native.nucleus`, used by
    :func:`warp` on CPU tensors where the kernel library runs) does not serve.

    The cut needs the order of the tokens above it only. On a CPU the ``K`` largest logits (``torch.topk``, sorted)
    decide every row whose top-``K`` mass reaches ``top_p`` (everything below is then dropped), for ``K`` in
    :data:`NUCLEUS_SCAN`; a full sort only when some row's nucleus is wider. On 16 rows of SmolLM2's logits
    (V = 49152, 2-core AMD EPYC) 38.6 -> 10.3 ms at T = 1, top-p 0.9. The check is a host sync, so other devices
    sort the whole row (no sync). The two ways round the mass differently (``exp(x - logsumexp)`` against a
    softmax of the sorted row), which can move a cut that lies within float32 rounding of ``top_p``.
    """
    scans = [k for k in NUCLEUS_SCAN if k < x.shape[-1]] if x.device.type == "cpu" else []
    if scans:
        lse = torch.logsumexp(x, dim=-1, keepdim=True)
        for k in scans:
            top_x, order = torch.topk(x, k, dim=-1)  # sorted, descending
            p = torch.exp(top_x - lse)
            mass_before = p.cumsum(-1) - p
            mass = mass_before[..., -1] + p[..., -1]  # [...] the top-k mass of each row
            if bool((mass >= top_p).all()):
                keep = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
                return ~keep.scatter_(-1, order, mass_before < top_p)
            # Lower ranks hold no more mass per token, so a row needs at least k * top_p / mass tokens: a row that
            # flat goes straight to the sort (the scan would cost more than it saves).
            if float((k * top_p / mass.clamp(min=1e-30)).max()) > scans[-1]:
                break
    sorted_x, order = torch.sort(x, dim=-1, descending=True)
    sorted_p = torch.softmax(sorted_x, dim=-1)
    mass_before = sorted_p.cumsum(-1) - sorted_p
    drop_sorted = mass_before >= top_p  # the first token always has mass_before == 0
    return torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)


def greedy_tokens(logits: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``[..., V]`` logits -> ``[...]`` long: the token ``warp``'s temperature-0 one-hot marks.

    The argmax of ``logits.to(dtype)``, first index on ties (what ``warp`` computes, without the ``[..., V]``
    one-hot rows). The cast matters only where it rounds (a wider input in a narrower ``dtype``); for the same or
    a wider ``dtype`` it is exact and order-preserving, so the argmax is that of the logits as given.
    """
    return logits.to(dtype).argmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one index per row of ``probs [..., V]`` without a host sync (inverse CDF, float64).

    Contract: index ``i`` comes out with probability ``max(p_i, 0) / sum_j max(p_j, 0)``, up to float64 rounding
    (the exact suite models this sampler as "clamped at 0 and normalised"). The row's CDF ``c`` is summed in
    float64, one uniform ``r`` per row scales it, ``u = r * c[-1]``, and the index is the first ``i`` with
    ``c_i > u``; then ``c_{i-1} <= u < c_i``, so ``p_i > 0``: a zero-probability entry is never drawn. ``u`` is held
    strictly below ``c[-1]`` (the product may round up to it), so some ``c_i`` always exceeds it. Rounding moves
    each boundary by about ``V * 2^-53`` of the row's mass (~5e-12 for ``V = 49152``). A row with no positive
    entry gives index ``V - 1`` (a broken plan; the exact suite reports its missing mass), and so does a row with a
    NaN (the decoding loops check the logits for NaN in the same cycle and raise).

    Cost: one uniform and one pass over the row. (The exponential race ``argmax p_i / E_i`` draws ``V``
    exponentials: 0.94 ms against 0.08 ms for ``V = 49152`` on a 2-core CPU.)

    Returns:
        ``[...]`` long indices.
    """
    if runs_native(probs):  # the same law from the same uniform, in one native pass (specdec.backends.native)
        u = torch.rand(*probs.shape[:-1], 1, dtype=torch.float64, generator=generator)
        return draws(probs.reshape(-1, probs.shape[-1]), u.reshape(-1, 1)).reshape(probs.shape[:-1])
    cdf = probs.to(torch.float64).clamp(min=0.0).cumsum(-1)  # [..., V]
    total = cdf[..., -1:]  # [..., 1]
    u = torch.rand(total.shape, dtype=torch.float64, device=probs.device, generator=generator) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # u < total
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def sample_distinct(probs: torch.Tensor, k: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw ``k`` distinct indices per row of ``probs [F, V]``, in draw order, without replacement (inverse CDF).

    Contract: the ``j``-th column is distributed as a draw from the row's ``max(p, 0)`` with the indices of
    columns ``0 .. j-1`` removed and the rest renormalised: sequential sampling without replacement, the law
    :class:`~specdec.verify.stochastic.StochasticMultiRoundVerifier` assumes of a node's children. Every row must
    have at least ``k`` positive entries (the caller's duty: a row with fewer repeats an index).

    How: draw ``j`` is :func:`sample` of the row with the ``j`` drawn entries set to 0, its float64 CDF summed
    afresh. Summing afresh matters: when one entry holds nearly all the mass, the others' intervals in the first
    CDF are narrower than a float64 ulp near 1 and the mass left after drawing it cancels to noise, so reusing that
    CDF would draw them with the wrong law (or repeat one); the fresh CDF of the rest has full relative precision.
    Cost: ``k`` passes over each row and one uniform per draw; the Gumbel-top-k race draws ``V`` exponentials per
    row instead.

    Returns:
        ``[F, k]`` long indices.
    """
    if runs_native(probs) and probs.shape[-1] >= k:  # one native call, the uniforms drawn as below
        u = [torch.rand(probs.shape[0], 1, dtype=torch.float64, generator=generator) for _ in range(k)]
        return draws(probs, torch.cat(u, -1) if u else torch.zeros(probs.shape[0], 0, dtype=torch.float64))
    rest = probs.to(torch.float64).clamp(min=0.0)  # [F, V]; a fresh copy, safe to zero in place
    drawn = []
    for j in range(k):
        idx = sample(rest, generator)[:, None]  # [F, 1]
        drawn.append(idx)
        if j + 1 < k:
            rest.scatter_(-1, idx, 0.0)
    return torch.cat(drawn, -1) if drawn else torch.zeros(probs.shape[0], 0, dtype=torch.long, device=probs.device)

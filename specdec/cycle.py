"""One decoding cycle of one sequence, in phases that a loop over one sequence and a loop over a batch share.

A speculative cycle of a row (:class:`Row`)::

    drafted = draft(row)                        # the tree (policy + drafter), its contract faults, the payload
    step    = <the target's forward of drafted.tree>   # one sequence, or every row's tree in one forward
    packed  = judge(row, drafted, step)         # verify; everything the host reads, in one tensor
    <one host sync: packed.tolist() (a batch: every row's packed tensors in one)>
    cycle   = settle(row, drafted, step, values)  # checks, feedback, the drafter's commit
    <the target keeps cycle.path>

A vanilla step is the same cycle with a root-only tree (:func:`draft_root`, :func:`judge_step`,
:func:`settle_step`; :func:`settle_plain` where a speculative row steps). The loops (:mod:`specdec.generate`,
:mod:`specdec.batched`) only forward, sync and commit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specdec import tree_checks
from specdec.calls import GenerationMetrics, StopCondition
from specdec.curve_watch import CurveWatch
from specdec.interfaces import Drafter, Target, TargetStep, TreePolicy, Verdict, Verifier
from specdec.pace import OWN, STEP
from specdec.sampling import NonFiniteLogitsError, SamplingParams, check_finite, logits_ok, sample, warp
from specdec.tree import DraftTree

__all__ = [
    "Cycle",
    "Drafted",
    "Row",
    "Synced",
    "draft",
    "draft_root",
    "judge",
    "judge_step",
    "pack_sync",
    "phases",
    "settle",
    "settle_plain",
    "settle_step",
    "unpack_sync",
]


@dataclass
class Row:
    """One sequence's parts and state inside a decoding call (a batched call has one per prompt).

    Attributes:
        sampling, stop: the row's settings. g: its source of randomness.
        metrics: filled in as its tokens come. out: its tokens so far.
        root: the token emitted last, on the device (the next cycle's root; not yet in the target's cache).
        drafter, policy, verifier: its speculative parts (None for a vanilla row).
        vocab_size: the target's (the tree contract's bound).
        on_host: tree faults are read at the draft (host memory, no sync) instead of at the cycle's sync.
        started: when the row's call began (``time.perf_counter``); done: its stop condition was met.
        watch: checks the cost curve its policy holds against the tree forwards timed (:mod:`specdec.curve_watch`).
    """

    sampling: SamplingParams
    stop: StopCondition
    g: torch.Generator
    metrics: GenerationMetrics
    vocab_size: int
    root: torch.Tensor | None = None
    drafter: Drafter | None = None
    policy: TreePolicy | None = None
    verifier: Verifier | None = None
    on_host: bool = False
    out: list[int] = field(default_factory=list)
    started: float = 0.0
    done: bool = False
    watch: CurveWatch | None = None


@dataclass
class Drafted:
    """A cycle's tree and what goes with it to the sync (``accepted`` and ``bonus``: set by :func:`judge`, ``bonus``
    alone by :func:`judge_step`; the bonus token on the device becomes the next root)."""

    tree: DraftTree
    faults: torch.Tensor | None = None
    payload: torch.Tensor | None = None
    accepted: torch.Tensor | None = None
    bonus: torch.Tensor | None = None
    policy: TreePolicy | None = None  # the policy that grew the tree (the row's, or its resized one): its feedback


@dataclass
class Synced:
    """A cycle's values on the host, from its one sync (:func:`pack_sync` / :func:`unpack_sync`).

    Attributes:
        accept_length: accepted draft tokens ``n``; bonus: the bonus token's id.
        logits_ok: the tree forward's logits were finite.
        faults: the tree's contract faults (:mod:`specdec.tree_checks`).
        tokens: the accepted path's tokens, root first (``n + 1`` of them, then padding).
        path: the accepted path's node ids (``n + 1``, then ``-1``).
        payload: the policy's :meth:`~specdec.interfaces.TreePolicy.sync_payload` on the host (None if it gave none).
    """

    accept_length: int
    bonus: int
    logits_ok: bool
    faults: int
    tokens: list[int]
    path: list[int]
    payload: list[float] | None


@dataclass
class Cycle:
    """One cycle's outcome.

    Attributes:
        emitted: the tokens it emits: the accepted draft tokens, then the bonus token.
        root: the bonus token on the device (the next cycle's root).
        path: the node ids the target keeps, root first (``len(emitted)`` of them).
    """

    emitted: list[int]
    root: torch.Tensor
    path: list[int]


def pack_sync(
    verdict: Verdict, logits: torch.Tensor, faults: torch.Tensor, tree: DraftTree, payload: torch.Tensor | None
) -> torch.Tensor:
    """Everything a cycle reads on the host in one tensor: ``[n, bonus, logits ok, faults, path tokens [S], path
    [S], payload...]`` (``S = len(verdict.accepted)``), in float64 when the policy adds a payload (float64 holds
    every token id exactly)."""
    accepted = verdict.accepted
    ints = torch.cat(
        [
            verdict.accept_length.reshape(1),
            verdict.bonus_token.reshape(1),
            logits_ok(logits).reshape(1).long(),
            faults.reshape(1),
            tree.tokens[accepted.clamp(min=0)],
            accepted,
        ]
    )
    return ints if payload is None else torch.cat([ints.double(), payload.double()])


def unpack_sync(values: list, slots: int, payload: bool) -> Synced:
    """:func:`pack_sync`'s tensor as host values (``values``: its ``tolist()``; ``slots``: ``len(accepted)``;
    ``payload``: the policy gave one)."""
    width = 4 + 2 * slots
    return Synced(
        accept_length=int(values[0]),
        bonus=int(values[1]),
        logits_ok=bool(values[2]),
        faults=int(values[3]),
        tokens=[int(t) for t in values[4 : 4 + slots]],
        path=[int(i) for i in values[4 + slots : width]],
        payload=values[width:] if payload else None,
    )


def draft(row: Row, total: int | None = None) -> Drafted:
    """The row's tree from its policy (resized to ``total`` nodes where it can be, :meth:`TreePolicy.resized`) and
    drafter, its contract faults (raised here when read on the host) and the policy's sync payload."""
    assert row.policy is not None and row.root is not None
    policy = (row.policy.resized(total) if total is not None else None) or row.policy
    tree = policy.grow(row.drafter, row.root, row.sampling, row.g)
    faults = tree_checks.tree_faults(tree, row.root, row.vocab_size)  # the policy's tree keeps its contract
    if row.on_host:  # read now (host memory: no sync); elsewhere with the cycle's one sync
        tree_checks.raise_tree_faults(int(faults), policy)
    return Drafted(tree, faults, policy.sync_payload(), policy=policy)


def judge(row: Row, drafted: Drafted, step: TargetStep) -> torch.Tensor:
    """Verify the row's tree against the target's logits ``step.logits [N, V]``: the values to sync
    (:func:`pack_sync`)."""
    assert row.verifier is not None and drafted.faults is not None
    verdict = row.verifier.verify(drafted.tree, step.logits, row.sampling, row.g)
    drafted.accepted, drafted.bonus = verdict.accepted, verdict.bonus_token
    return pack_sync(verdict, step.logits, drafted.faults, drafted.tree, drafted.payload)


def settle(row: Row, drafted: Drafted, step: TargetStep, values: list) -> Cycle:
    """After the sync: the contract checks, the policy's feedback, the drafter's commit, the row's metrics.

    Raises:
        TreeContractError: the policy's tree broke its contract (:mod:`specdec.tree_checks`).
        NonFiniteLogitsError: the tree forward's logits were not finite.
    """
    policy = drafted.policy or row.policy
    assert drafted.accepted is not None and policy is not None and row.drafter is not None
    accepted, tree = drafted.accepted, drafted.tree
    synced = unpack_sync(values, len(accepted), drafted.payload is not None)
    tree_checks.raise_tree_faults(synced.faults, policy)
    if not synced.logits_ok:
        raise NonFiniteLogitsError("target logits contain NaN/+inf values during a tree forward")
    count = synced.accept_length + 1
    policy.observe(synced.accept_length, synced.payload)
    policy.observe_path(synced.path[:count])
    row.drafter.commit(tree.tokens[accepted[:count]], step.hidden.select(accepted[:count]))
    row.metrics.accept_lengths.append(synced.accept_length)
    row.metrics.tree_depths.append(tree.max_depth)
    row.metrics.tree_sizes.append(tree.num_nodes)
    assert drafted.bonus is not None
    return Cycle(synced.tokens[1:count] + [synced.bonus], drafted.bonus, synced.path[:count])


def first_token(
    target: Target, input_ids: torch.Tensor, sampling: SamplingParams, g: torch.Generator
) -> tuple[TargetStep, torch.Tensor]:
    """A loop's start: the prompt's prefill ``step`` and its first token, drawn from ``warp`` of its last logits."""
    step = target.prefill(input_ids)
    check_finite(step.logits, "target logits at the end of the prompt")
    return step, sample(warp(step.logits[0], sampling), g)


def draft_root(row: Row) -> Drafted:
    """A vanilla step's tree: the root alone."""
    assert row.root is not None
    return Drafted(DraftTree.single(row.root.reshape(())))


def judge_step(row: Row, drafted: Drafted, step: TargetStep) -> torch.Tensor:
    """A vanilla step's next token (argmax, or a draw from ``warp`` of the logits) and whether the logits were finite:
    ``[token, ok]``."""
    logits = step.logits[0]
    token = logits.argmax() if row.sampling.greedy else sample(warp(logits, row.sampling), row.g)
    drafted.bonus = token
    return torch.stack([token.reshape(()), logits_ok(step.logits).long().reshape(())])


def settle_step(row: Row, drafted: Drafted, step: TargetStep, values: list) -> Cycle:
    """After the sync: the vanilla step's token, or :class:`NonFiniteLogitsError`."""
    if not values[1]:
        raise NonFiniteLogitsError("target logits contain NaN/+inf values")
    row.metrics.accept_lengths.append(0)
    row.metrics.tree_depths.append(0)
    row.metrics.tree_sizes.append(1)
    assert drafted.bonus is not None
    return Cycle([int(values[0])], drafted.bonus, [0])


def settle_plain(row: Row, drafted: Drafted, step: TargetStep, values: list) -> Cycle:
    """A plain step of a speculative row (a batch that steps this cycle, :mod:`specdec.pace`): :func:`settle_step`,
    and the drafter takes the root as committed (its tree's policy grew nothing, so it gets no feedback)."""
    cycle = settle_step(row, drafted, step, values)
    assert row.drafter is not None
    row.drafter.commit(drafted.tree.tokens[:1], step.hidden.select(drafted.tree.tokens.new_zeros(1)))
    return cycle


def phases(arm: int, speculative: bool = True) -> tuple[Callable, Callable, Callable]:
    """A cycle's ``(draft, judge, settle)`` for a :mod:`specdec.pace` arm: a speculative cycle's (``OWN``: the
    row's own tree; a size: trees resized to it), else (``STEP``) a plain step's (a speculative row's drafter still
    takes the token, :func:`settle_plain`; a vanilla row has no drafter, :func:`settle_step`). Both loops take their
    phases here, the one-sequence loop and the batch."""
    if arm == STEP:
        return draft_root, judge_step, settle_plain if speculative else settle_step
    return (draft if arm == OWN else functools.partial(draft, total=arm)), judge, settle

"""What the decoding loop checks of the parts it did not write: a drafter's proposals and a policy's tree.

A custom drafter or tree policy that breaks its contract must fail by name, not decode on into a silent wrong answer
(a tree whose root is not the emitted token, a recorded draft law that is not the one the children were drawn from)
or crash deep inside torch (a token id past the vocabulary in the embedding). These checks read small tensors only:

* :func:`checked_topk` and :func:`checked_draft` wrap the drafter calls of the tree policies: shapes and dtypes
  always; on a CPU also NaN logits and the draft vocabulary's id range (host memory: reading them costs no sync);
* :func:`tree_faults` folds every contract of a :class:`~specdec.tree.DraftTree` that a verifier relies on into one
  0-dim bit mask, computed on the tree's device without a host sync; :func:`raise_tree_faults` names them. The loop
  reads the mask before the target's forward on a CPU, and with the cycle's one host sync elsewhere (there an
  out-of-range token id may fail first, inside the embedding).

Cost (``benchmarks/tree_checks.py``: EAGLE-3 on SmolLM2, float32, AMD EPYC Zen 4, 2 threads, alone; two runs on
one day, the VM's speed differing): 57 µs per cycle at T = 0 (0.09–0.12 % of a cycle) and 165–233 µs at T = 1
(sampled trees of 6 nodes whose recorded law is ``[6, 49152]``: each row's sum and minimum; 0.35–0.37 %).
"""

from __future__ import annotations

import weakref

import torch

from specdec.errors import SpecdecError
from specdec.interfaces import Drafter
from specdec.sampling import logits_ok
from specdec.tree import DraftTree, PartialTree

__all__ = [
    "DrafterOutputError",
    "InvalidTreeError",
    "Q_SUM_TOL",
    "checked_draft",
    "checked_topk",
    "free_reads",
    "raise_tree_faults",
    "tree_faults",
]

#: A recorded draft row ``q_dist[u]`` of a node with drawn children must sum to 1 within this (float32 sums of a
#: vocabulary-wide softmax are within ~1e-5).
Q_SUM_TOL = 1e-3

#: The faults :func:`tree_faults` encodes, by bit: what the tree breaks.
FAULTS = (
    "its root is not the token the target emitted last (tokens[0] != root)",
    "its parents do not come before their children (parents[0] must be -1 and 0 <= parents[i] < i)",
    "a token id lies outside the target's vocabulary",
    "a node with drawn children records a draft law q_dist that is not a distribution (NaN, negative, or not summing "
    "to 1; e.g. duplicate ids in expand_draft)",
)
# Not a fault: a drawn child of probability 0 under its parent's row. Draws without replacement take it once the row's
# support is used up (a draft vocabulary of two tokens, one of them a composite's point mass, and two draws), and the
# verifiers judge it exactly (tests/test_statistical_multicycle.py's composite configurations).


def free_reads(device: torch.device) -> bool:
    """Whether reading a value of a tensor on ``device`` costs no device sync (host memory: a CPU). The checks read
    early only there; elsewhere they keep to the cycle's one host sync. Tests that count host syncs on a CPU
    (``specdec.bench.syncs``) patch this to False to count what a GPU would do."""
    return device.type == "cpu"


class DrafterOutputError(SpecdecError, ValueError):
    """A drafter returned proposals that break :class:`~specdec.interfaces.Drafter`'s contract."""


class InvalidTreeError(SpecdecError, ValueError):
    """A tree policy built a :class:`~specdec.tree.DraftTree` that breaks its contract (see :data:`FAULTS`)."""


def _name(drafter: Drafter) -> str:
    return type(drafter).__name__


def checked_topk(drafter: Drafter, tree: PartialTree, frontier: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """``drafter.expand_topk(tree, frontier, k)``, refused unless ``(logq [F, k'], tokens [F, k'])`` with
    ``k' <= k``, long tokens and (on a CPU) no NaN ``logq`` (NaN, +inf or all -inf logits give NaN there).

    Raises:
        DrafterOutputError: naming the drafter, what it returned and what was expected.
    """
    logq, tokens = drafter.expand_topk(tree, frontier, k)
    f = frontier.shape[0]
    if tokens.ndim != 2 or tokens.shape[0] != f or logq.shape != tokens.shape or tokens.shape[1] > k:
        raise DrafterOutputError(
            f"{_name(drafter)}.expand_topk returned logq {tuple(logq.shape)} and tokens {tuple(tokens.shape)}; "
            f"expected both [F, k'] with F = {f} frontier nodes and k' <= k = {k}"
        )
    if tokens.dtype != torch.long:
        raise DrafterOutputError(f"{_name(drafter)}.expand_topk returned tokens of {tokens.dtype}; expected torch.long")
    if free_reads(logq.device) and bool(torch.isnan(logq).any()):
        raise DrafterOutputError(
            f"{_name(drafter)} drafted NaN log-probabilities: its logits hold NaN or +inf, or a row is all -inf"
        )
    return logq, tokens


#: The draft-vocabulary id tensors :func:`_check_ids` has passed, with their version counters: a drafter returns the
#: same map every call (EAGLE-3's ``d2t``), so it is read once, not once per level.
_PASSED_IDS: dict[int, tuple[weakref.ref, int]] = {}  # id(tensor) -> (a weak reference to it, its version)


def _check_ids(ids: torch.Tensor, vocab: int, name: str) -> None:
    """``ids [V_d]``: distinct target ids in ``[0, vocab)`` (a CPU tensor); checked once per tensor and version."""
    version = -1 if ids.is_inference() else ids._version
    passed = _PASSED_IDS.get(id(ids))
    if passed is not None and passed[0]() is ids and passed[1] == version:
        return
    if ids.numel() and not (int(ids.min()) >= 0 and int(ids.max()) < vocab):
        raise DrafterOutputError(f"{name}.expand_draft returned ids outside the vocabulary [0, {vocab})")
    if ids.unique().numel() != ids.numel():
        raise DrafterOutputError(
            f"{name}.expand_draft returned repeated ids: each draft-vocabulary column must map to its own target token"
        )
    if len(_PASSED_IDS) > 64:  # drop dead entries (a drafter keeps one map; tests make many)
        for key in [k for k, (ref, _) in _PASSED_IDS.items() if ref() is None]:
            del _PASSED_IDS[key]
    _PASSED_IDS[id(ids)] = (weakref.ref(ids), version)


def checked_draft(drafter: Drafter, tree: PartialTree, frontier: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``drafter.expand_draft(tree, frontier)``, refused unless ``logits [F, V_d]`` with ``ids [V_d]`` long (or
    ``None`` and ``V_d = vocab_size``) and, on a CPU, distinct ids in the vocabulary (read once per ids tensor) and
    logits free of NaN and +inf with a finite entry in every row.

    Raises:
        DrafterOutputError: naming the drafter, what it returned and what was expected.
    """
    logits, ids = drafter.expand_draft(tree, frontier)
    f, vocab, name = frontier.shape[0], drafter.vocab_size, _name(drafter)
    width = vocab if ids is None else (ids.shape[0] if ids.ndim == 1 else -1)
    if logits.ndim != 2 or logits.shape[0] != f or logits.shape[1] != width:
        got = "None" if ids is None else f"{tuple(ids.shape)}"
        raise DrafterOutputError(
            f"{name}.expand_draft returned logits {tuple(logits.shape)} and ids {got}; expected logits [F, V_d] with "
            f"F = {f} frontier nodes and V_d = len(ids) (ids None: V_d = vocab_size = {vocab})"
        )
    if ids is not None and ids.dtype != torch.long:
        raise DrafterOutputError(f"{name}.expand_draft returned ids of {ids.dtype}; expected torch.long")
    if free_reads(logits.device):
        if ids is not None:
            _check_ids(ids, vocab, name)
        if not bool(logits_ok(logits)):
            raise DrafterOutputError(f"{name} drafted logits that hold NaN or +inf, or a row that is all -inf")
    return logits, ids


def _check_shapes(tree: DraftTree, vocab_size: int) -> None:
    """The shapes a verifier indexes by (no data read): ``q_dist [N, V]``, ``point_mass [N]``."""
    n = tree.num_nodes
    if tree.q_dist is not None and tuple(tree.q_dist.shape) != (n, vocab_size):
        raise InvalidTreeError(
            f"a draft tree of {n} nodes records q_dist {tuple(tree.q_dist.shape)}; "
            f"expected [N, V] = [{n}, {vocab_size}]"
        )
    if tree.point_mass is not None and tuple(tree.point_mass.shape) != (n,):
        shape = tuple(tree.point_mass.shape)
        raise InvalidTreeError(f"a draft tree of {n} nodes has point_mass {shape}; expected [{n}]")


def tree_faults(tree: DraftTree, root: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """0-dim long bit mask of the contracts ``tree`` breaks (bit ``i``: :data:`FAULTS` ``[i]``); no host sync.

    Args:
        tree: the tree a policy grew for ``root``.
        root: 0-dim long, the token the target emitted last.
        vocab_size: the target's vocabulary size.
    """
    n, device = tree.num_nodes, tree.device
    _check_shapes(tree, vocab_size)
    tokens, parents = tree.tokens, tree.parents
    ids = torch.arange(n, device=device)
    lowest, highest = tokens.aminmax()
    bits = [
        tokens[0] != root.reshape(()),
        ~((parents >= ids.clamp(max=1) - 1) & (parents < ids)).all(),  # -1 at the root, 0 <= parent < i after it
        (lowest < 0) | (highest >= vocab_size),
    ]
    if tree.q_dist is not None and n > 1:
        q = tree.q_dist
        parent = parents[1:].clamp(0, n - 1)
        # Each row's sum and minimum (every row: no data-dependent shape), read at the rows children were drawn from.
        # NaN and inf reach the sum; NaN and negatives the minimum; a comparison with NaN is false, so "not ok" holds.
        row_ok = ((q.sum(-1) - 1).abs() <= Q_SUM_TOL) & (q.amin(-1) >= 0)  # [N]
        bad_law = ~row_ok[parent]  # [N - 1], per child: its parent's recorded law
        if tree.point_mass is not None:  # point-mass children were not drawn from q
            bad_law = bad_law & ~tree.point_mass[1:]
        bits.append(bad_law.any())
    stacked = torch.stack(bits).long()
    return (stacked << torch.arange(len(bits), device=device)).sum()


def raise_tree_faults(faults: int, policy: object) -> None:
    """Raise :class:`InvalidTreeError` naming every fault in the bit mask ``faults`` (nothing when it is 0)."""
    if faults:
        what = "; ".join(text for i, text in enumerate(FAULTS) if faults >> i & 1)
        raise InvalidTreeError(f"{type(policy).__name__} grew an invalid draft tree: {what}")

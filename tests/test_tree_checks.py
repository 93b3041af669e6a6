"""A drafter or tree policy that breaks its contract fails by name (``specdec.tree_checks``), found by QA.

Before these checks: a policy whose tree did not start at the emitted token decoded a wrong answer silently; a
recorded draft law that was not the one the children were drawn from (repeated draft-vocabulary ids, rows summing to
0.5) passed every cycle and broke the output distribution; out-of-vocabulary ids crashed inside torch's embedding;
a parent index past the tree crashed inside the ancestor matrix; NaN draft logits were rejected silently every cycle.
Each test below fails without its check (the negative control is the check removed: these exact repros ran or
crashed elsewhere). Correct drafters and policies are the rest of the suite, which runs through the same checks.
"""

from __future__ import annotations

import pytest
import torch

from specdec import (
    Drafter,
    DraftTree,
    DynamicTreePolicy,
    HFTarget,
    NGramDrafter,
    SamplingParams,
    SpeculativeGenerator,
    StochasticTreePolicy,
    StopCondition,
    TreePolicy,
)
from specdec.models import tiny_llama
from specdec.tree_checks import DrafterOutputError, InvalidTreeError, tree_faults

V = 32
PROMPT = torch.tensor([1, 2, 3, 4, 5, 1, 2])
T0, T1 = SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, seed=0)
STOP = StopCondition(max_new_tokens=6)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, logit_scale=4.0)


def _run(model, drafter: Drafter, policy: TreePolicy, sampling: SamplingParams = T0) -> None:
    SpeculativeGenerator(HFTarget(model, max_len=64), drafter, policy).generate(PROMPT, sampling, STOP)


class _Fixed(TreePolicy):
    """Returns a tree built from fixed tokens and parents (``root`` ignored where ``keep_root`` is False)."""

    def __init__(self, tokens: list[int], parents: list[int], keep_root: bool = True) -> None:
        self.tokens, self.parents, self.keep_root = tokens, parents, keep_root
        self.max_nodes, self.max_depth = len(tokens), 2

    def grow(self, drafter, root, sampling=None, generator=None) -> DraftTree:
        tokens = torch.tensor(self.tokens)
        if self.keep_root:
            tokens[0] = root
        return DraftTree.from_parents(tokens, torch.tensor(self.parents), self.max_depth)


def test_a_tree_that_does_not_start_at_the_emitted_token_is_refused(model) -> None:
    """It decoded on silently: vanilla [21, 19, 26, ...] against [21, 12, 3, ...]."""
    with pytest.raises(InvalidTreeError, match="root is not the token the target emitted last"):
        _run(model, NGramDrafter(V), _Fixed([7], [-1], keep_root=False))


@pytest.mark.parametrize(
    "parents",
    [[-1, 0, 9], [-1, 0, -5], [-1, -1, 0], [-1, 2, 1], [-1, 1, 0], [0, 0, 1]],
    ids=["past-the-tree", "negative", "second-root", "cycle", "self", "root-with-parent"],
)
def test_parents_that_do_not_come_before_their_children_are_refused(model, parents: list[int]) -> None:
    with pytest.raises(InvalidTreeError, match="parents do not come before their children"):
        _run(model, NGramDrafter(V), _Fixed([0, 3, 4], parents))


class _Wide(Drafter):
    """``expand`` rows wider than the vocabulary, the favourite token past it (id 34 of 32)."""

    vocab_size = V

    def expand(self, tree, frontier):
        x = torch.zeros(len(frontier), V + 5)
        x[:, V + 2] = 5.0
        return x


def test_a_drafted_token_outside_the_vocabulary_is_refused_before_the_forward(model) -> None:
    """It crashed with torch's "index out of range in self" inside the embedding."""
    with pytest.raises(InvalidTreeError, match="token id lies outside the target's vocabulary"):
        _run(model, _Wide(), DynamicTreePolicy(topk=2, depth=2, total_tokens=4))


class _Broken(Drafter):
    """A drafter whose ``expand_topk`` / ``expand_draft`` / ``expand`` break the contract as ``fault`` says."""

    vocab_size = V

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def expand(self, tree, frontier):
        x = torch.zeros(len(frontier), V)
        if self.fault == "nan":
            x[:, 3] = float("nan")
        if self.fault == "all -inf":
            x[:] = -torch.inf
        return x

    def expand_topk(self, tree, frontier, k):
        logq, ids = super().expand_topk(tree, frontier, k)
        return (logq[:, None], ids[:, None]) if self.fault == "3-d" else (logq, ids)

    def expand_draft(self, tree, frontier):
        if self.fault == "repeated ids":  # three columns, all target id 0: drawn w.p. 1, recorded as 1/3
            return torch.zeros(len(frontier), 3), torch.tensor([0, 0, 0])
        if self.fault == "ids past the vocabulary":
            return torch.zeros(len(frontier), 3), torch.tensor([0, 1, V + 3])
        if self.fault == "ids of another width":
            return torch.zeros(len(frontier), 3), torch.tensor([0, 1])
        return super().expand_draft(tree, frontier)


@pytest.mark.parametrize(
    ("fault", "policy", "sampling", "message"),
    [
        ("3-d", DynamicTreePolicy(topk=2, depth=2, total_tokens=4), T0, r"expand_topk returned logq \(1, 1, 2\)"),
        ("nan", DynamicTreePolicy(topk=2, depth=2, total_tokens=4), T0, "NaN log-probabilities"),
        ("all -inf", DynamicTreePolicy(topk=2, depth=2, total_tokens=4), T0, "NaN log-probabilities"),
        ("nan", StochasticTreePolicy([(0,), (1,)]), T1, "logits that hold NaN"),
        ("repeated ids", StochasticTreePolicy([(0,)]), T1, "repeated ids"),
        ("ids past the vocabulary", StochasticTreePolicy([(0,)]), T1, "ids outside the vocabulary"),
        ("ids of another width", StochasticTreePolicy([(0,)]), T1, r"returned logits \(1, 3\) and ids \(2,\)"),
    ],
)
def test_drafter_output_that_breaks_the_contract_is_refused(model, fault, policy, sampling, message) -> None:
    with pytest.raises(DrafterOutputError, match=message):
        _run(model, _Broken(fault), policy, sampling)


class _CorruptQ(TreePolicy):
    """A sampled policy whose recorded ``q_dist`` is changed after the draws (``corrupt(q)``)."""

    def __init__(self, corrupt) -> None:
        self.inner = StochasticTreePolicy([(0,), (1,), (0, 0)])
        self.corrupt, self.max_nodes, self.max_depth = corrupt, 4, 2

    def kind(self, sampling):
        return self.inner.kind(sampling)

    def grow(self, drafter, root, sampling, generator) -> DraftTree:
        t = self.inner.grow(drafter, root, sampling, generator)
        return DraftTree.from_parents(t.tokens, t.parents, t.max_depth, self.corrupt(t.q_dist), t.q_cond)


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda q: q * 0.5, "not a distribution"),  # tau rose from 1.40 to 2.00 and the output law broke
        (lambda q: q * float("nan"), "not a distribution"),
        (lambda q: -q, "not a distribution"),
        (lambda q: q[:1], r"records q_dist \(1, 32\)"),
    ],
    ids=["half", "nan", "negative", "one-row"],
)
def test_a_recorded_draft_law_that_is_not_the_drawn_one_is_refused(model, corrupt, message) -> None:
    with pytest.raises(InvalidTreeError, match=message):
        _run(model, _Broken("none"), _CorruptQ(corrupt), T1)


def test_the_built_in_policies_trees_have_no_faults(model) -> None:
    """The other side of the checks: the trees the shipped policies grow for a healthy drafter pass them."""
    drafter = _Broken("none")
    drafter.reset()
    drafter.prefill(PROMPT, None)
    root = torch.tensor(2)
    g = torch.Generator().manual_seed(0)
    for policy, sampling in [
        (DynamicTreePolicy(topk=3, depth=3, total_tokens=8), T0),
        (StochasticTreePolicy([(0,), (1,), (0, 0), (0, 1)]), T1),
    ]:
        assert int(tree_faults(policy.grow(drafter, root, sampling, g), root, V)) == 0


def test_where_reads_are_not_free_the_tree_is_judged_at_the_cycles_one_sync(model, monkeypatch) -> None:
    """The GPU path (``free_reads`` False): no early read, and the fault still stops the loop, at the cycle's sync."""
    from specdec import tree_checks

    monkeypatch.setattr(tree_checks, "free_reads", lambda device: False)
    with pytest.raises(InvalidTreeError, match="root is not the token the target emitted last"):
        _run(model, NGramDrafter(V), _Fixed([7], [-1], keep_root=False))

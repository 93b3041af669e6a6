"""Drafters: the small-LM drafter against plain full-sequence forwards, and the n-gram drafter's lookups."""

from __future__ import annotations

import random

import pytest
import torch

from specdec.drafters import NGramDrafter, SmallLMDrafter
from specdec.interfaces import Drafter, TargetHidden, VocabMismatchError
from specdec.kvcache import CacheFullError
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.tree import DraftTree, PartialTree
from specdec.trees import DynamicTreePolicy, StaticTreePolicy

NO_HIDDEN = TargetHidden()
GREEDY = SamplingParams()
VOCAB = 16


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=2, seed=0)


@torch.no_grad()
def next_logits(model, seq: list[int]) -> torch.Tensor:
    """``[V]`` logits after ``seq`` from one plain causal forward (no cache)."""
    return model(input_ids=torch.tensor([seq])).logits[0, -1].float()


def path_tokens(tree: PartialTree, node: int) -> list[int]:
    on_path = tree.ancestor_mask(torch.tensor([node]))[0]
    return tree.tokens[: tree.size][on_path].tolist()


class Checked(Drafter):
    """Wraps a drafter; every row ``expand`` returns must equal a full forward of ``context + root path``."""

    def __init__(self, inner: Drafter, model, context: list[int]) -> None:
        self.inner, self.model, self.context = inner, model, context
        self.vocab_size = inner.vocab_size
        self.rows_checked = 0

    def reset(self) -> None:
        self.inner.reset()

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        self.inner.prefill(input_ids, hidden)

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        self.inner.commit(tokens, hidden)

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        out = self.inner.expand(tree, frontier)
        assert out.shape == (frontier.shape[0], self.vocab_size) and out.dtype == torch.float32
        for row, node in enumerate(frontier.tolist()):
            expected = next_logits(self.model, self.context + path_tokens(tree, node))
            torch.testing.assert_close(out[row], expected, atol=1e-5, rtol=1e-5)
            self.rows_checked += 1
        return out


def test_small_lm_tree_masks_positions_and_commits(model) -> None:
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    context = list(prompt)
    small = SmallLMDrafter(model, max_len=64, target_vocab_size=VOCAB)
    drafter = Checked(small, small.model, context)  # reference: the same (prepared) model, one plain forward
    drafter.prefill(torch.tensor(prompt), NO_HIDDEN)

    tree = PartialTree(torch.tensor(7), 12)
    drafter.expand(tree, torch.tensor([0]))
    tree.add(torch.tensor([0, 0, 0]), torch.tensor([2, 8, 5]), torch.zeros(3))  # ids 1, 2, 3
    drafter.expand(tree, torch.tensor([3, 1]))  # out of order, skips node 2
    tree.add(torch.tensor([3, 3, 1]), torch.tensor([1, 1, 0]), torch.zeros(3))  # ids 4, 5 under 3; 6 under 1
    drafter.expand(tree, torch.tensor([6, 4]))
    drafter.expand(tree, torch.tensor([2]))  # a level-1 node expanded late
    tree.add(torch.tensor([2, 4]), torch.tensor([13, 15]), torch.zeros(2))  # id 7 under 2, id 8 under 4
    drafter.expand(tree, torch.tensor([7, 8, 5]))  # depths 2, 3, 2 in one call

    # Accept root -> 3 -> 4; the next tree's first call recomputes them with the pending tokens.
    drafter.commit(torch.tensor([7, 5, 1]), NO_HIDDEN)
    context += [7, 5, 1]
    tree = PartialTree(torch.tensor(11), 4)
    drafter.expand(tree, torch.tensor([0]))
    tree.add(torch.tensor([0, 0]), torch.tensor([4, 6]), torch.zeros(2))
    drafter.expand(tree, torch.tensor([1, 2]))

    # Nothing accepted: only the root is committed.
    drafter.commit(torch.tensor([11]), NO_HIDDEN)
    context += [11]
    tree = PartialTree(torch.tensor(0), 3)
    drafter.expand(tree, torch.tensor([0]))
    tree.add(torch.tensor([0]), torch.tensor([9]), torch.zeros(1))
    drafter.expand(tree, torch.tensor([1]))
    assert drafter.rows_checked == 14
    assert drafter.inner.committed_len == len(context)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_small_lm_under_tree_policies(attn: str) -> None:
    model = tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=2, seed=1)
    model.set_attn_implementation(attn)
    rng = random.Random(0)
    context = [rng.randrange(VOCAB) for _ in range(6)]
    small = SmallLMDrafter(model, max_len=128)
    drafter = Checked(small, small.model, context)
    drafter.prefill(torch.tensor(context), NO_HIDDEN)
    policies = [DynamicTreePolicy(topk=3, depth=3, total_tokens=8), StaticTreePolicy([[0], [1], [0, 0], [1, 0]])]
    root = rng.randrange(VOCAB)
    for cycle in range(6):
        tree: DraftTree = policies[cycle % 2].grow(drafter, torch.tensor(root), GREEDY, None)
        leaf = rng.choice(tree.leaf_paths().tolist())
        accepted = [n for n in leaf if n >= 0][: rng.randrange(1, tree.max_depth + 2)]
        committed = tree.tokens[accepted]
        drafter.commit(committed, NO_HIDDEN)
        context += committed.tolist()
        root = rng.randrange(VOCAB)
    assert drafter.rows_checked >= 6 * 3
    # A new generation starts clean.
    context[:] = [5, 4, 3]
    drafter.prefill(torch.tensor(context), NO_HIDDEN)
    policies[0].grow(drafter, torch.tensor(2), GREEDY, None)


def test_from_target_layers_all_layers_equals_target(model) -> None:
    drafter = SmallLMDrafter.from_target_layers(model, num_layers=2, max_len=32)
    assert drafter.vocab_size == VOCAB and drafter.model is not model
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(drafter.model(input_ids=ids).logits, model(input_ids=ids).logits)
    # The caller's model is left as it was: the drafter runs a copy that shares its tensors.
    assert drafter.model.lm_head.weight is not None and type(model.lm_head) is torch.nn.Linear
    assert drafter.model.model.embed_tokens.weight is model.model.embed_tokens.weight
    # Cut from a target: the target's own (prepared) modules, shared, not copied.
    target = HFTarget(model, max_len=32)
    cut = SmallLMDrafter.from_target(target, num_layers=2)
    assert cut.model.lm_head is target.model.lm_head and cut.model.model.layers[1] is target.model.model.layers[1]
    assert cut.execution.weights == target.execution.weights
    context = [1, 2, 3]
    checked = Checked(drafter, drafter.model, context)
    checked.prefill(torch.tensor(context), NO_HIDDEN)
    StaticTreePolicy.chain(3).grow(checked, torch.tensor(9), GREEDY, None)
    assert checked.rows_checked == 3


def test_from_target_layers_prefix() -> None:
    target = tiny_llama(vocab_size=VOCAB, hidden_size=16, num_layers=3, seed=2)
    drafter = SmallLMDrafter.from_target_layers(target, num_layers=2, max_len=32)
    assert drafter.model.config.num_hidden_layers == 2 and target.config.num_hidden_layers == 3
    ids = torch.tensor([[3, 0, 7, 7, 2]])
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
        expected = target.lm_head(target.model.norm(out.hidden_states[2]))  # output of the second layer
        torch.testing.assert_close(drafter.model(input_ids=ids).logits, expected)
        assert not torch.allclose(expected, out.logits)
        torch.testing.assert_close(target(input_ids=ids).logits, out.logits)  # target untouched
    for bad in (0, 4):
        with pytest.raises(ValueError, match="num_layers"):
            SmallLMDrafter.from_target_layers(target, num_layers=bad, max_len=32)


def test_small_lm_errors(model) -> None:
    with pytest.raises(VocabMismatchError):
        SmallLMDrafter(model, max_len=32, target_vocab_size=VOCAB + 1)
    drafter = SmallLMDrafter(model, max_len=8)
    drafter.prefill(torch.tensor([1, 2, 3, 4, 5]), NO_HIDDEN)
    tree = PartialTree(torch.tensor(1), 8)
    tree.add(torch.tensor([0, 0]), torch.tensor([2, 3]), torch.zeros(2))
    with pytest.raises(ValueError, match="root alone"):
        drafter.expand(tree, torch.tensor([1, 2]))
    drafter.expand(tree, torch.tensor([0]))  # positions 0..5
    drafter.expand(tree, torch.tensor([1, 2]))  # tree slots 6, 7
    with pytest.raises(CacheFullError):
        drafter.expand(tree, torch.tensor([1]))


# ----------------------------------------------------------------------------------------------------------------
# N-gram


def ngram_rows(drafter: NGramDrafter, tree: PartialTree, frontier: list[int]) -> torch.Tensor:
    out = drafter.expand(tree, torch.tensor(frontier))
    assert out.shape == (len(frontier), drafter.vocab_size) and out.dtype == torch.float32
    return out


def test_ngram_proposes_continuations() -> None:
    drafter = NGramDrafter(vocab_size=10, max_ngram=3)
    drafter.prefill(torch.tensor([1, 2, 3, 4, 9, 1, 2, 3, 5, 8, 1, 2]), NO_HIDDEN)
    tree = PartialTree(torch.tensor(3), 4)  # context ... 1 2 3: followed by 4, then later by 5
    row = ngram_rows(drafter, tree, [0])[0]
    expected = torch.full((10,), -20.0)
    expected[5], expected[4] = 0.0, -1.0  # most recent match first
    assert torch.equal(row, expected)
    assert torch.topk(row, 2).indices.tolist() == [5, 4]
    # A deeper node: its path tokens extend the context (... 1 2 3 5 -> "3 5" was followed by 8).
    tree.add(torch.tensor([0]), torch.tensor([5]), torch.zeros(1))
    rows = ngram_rows(drafter, tree, [1, 0])
    assert rows[0].argmax().item() == 8 and (rows[0] == 0).sum() == 1 and (rows[0] > -20).sum() == 1
    assert torch.equal(rows[1], expected)


def test_ngram_prefers_longer_matches_and_limits_candidates() -> None:
    drafter = NGramDrafter(vocab_size=10, max_ngram=3, num_candidates=2)
    # "1 2 3" was followed by 7; the more recent "0 3" (a 1-gram match of "3") by 8: the 3-gram wins.
    assert drafter.candidates(torch.tensor([1, 2, 3, 7, 0, 3, 8, 1, 2, 3])) == [7, 8]
    assert drafter.candidates(torch.tensor([4, 1, 4, 2, 4, 3, 4, 5, 4])) == [5, 3]
    assert NGramDrafter(10, max_ngram=2, min_ngram=2).candidates(torch.tensor([0, 3, 8, 1, 3])) == []


def test_ngram_no_match_and_commit() -> None:
    drafter = NGramDrafter(vocab_size=12, num_candidates=3)
    drafter.prefill(torch.tensor([0, 1, 2]), NO_HIDDEN)
    tree = PartialTree(torch.tensor(3), 8)
    row = ngram_rows(drafter, tree, [0])[0]
    assert torch.equal(row, torch.full((12,), -20.0))  # no match: uniform q
    tree = DynamicTreePolicy(topk=2, depth=2, total_tokens=5).grow(drafter, torch.tensor(3), GREEDY, None)
    assert tree.num_nodes == 5  # still a valid tree
    # After commits the history repeats: a chain copies the earlier continuation.
    drafter.commit(torch.tensor([3, 4, 5, 6, 0, 1]), NO_HIDDEN)
    chain = StaticTreePolicy.chain(4).grow(drafter, torch.tensor(2), GREEDY, None)
    assert chain.tokens.tolist() == [2, 3, 4, 5, 6]
    drafter.reset()
    assert torch.equal(ngram_rows(drafter, PartialTree(torch.tensor(2), 1), [0])[0], torch.full((12,), -20.0))
    for bad in ({"max_ngram": 0}, {"min_ngram": 3, "max_ngram": 2}, {"num_candidates": 0}, {"num_candidates": 30}):
        with pytest.raises(ValueError):
            NGramDrafter(vocab_size=12, **bad)

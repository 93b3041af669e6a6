"""The target adapter: tree forwards through explicit 4-D masks equal plain sequential forwards."""

from __future__ import annotations

import pytest
import torch

from specdec.interfaces import HiddenRequest
from specdec.kvcache import CacheFullError
from specdec.models import tiny_llama
from specdec.target import EmptyPromptError, HFTarget
from specdec.tree import DraftTree


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request):
    m = tiny_llama(vocab_size=16, hidden_size=32, num_layers=4, seed=1)
    m.config._attn_implementation = request.param
    return m


def full_forward(model, seq: list[int]):
    with torch.no_grad():
        out = model(torch.tensor([seq]), output_hidden_states=True)
    return out.logits[0], out.hidden_states


def example_tree() -> DraftTree:
    #       0
    #     /   \
    #    1     2          duplicate token 5 under different parents is fine
    #   / \     \
    #  3   4     5
    #  |
    #  6
    tokens = torch.tensor([7, 3, 5, 9, 2, 5, 11])
    parents = torch.tensor([-1, 0, 0, 1, 1, 2, 3])
    return DraftTree.from_parents(tokens, parents, max_depth=3)


def path_tokens(tree: DraftTree, node: int) -> list[int]:
    row = tree.paths[node]
    return tree.tokens[row[row >= 0]].tolist()


def test_tree_forward_equals_sequential(model):
    prompt = [1, 4, 6, 8, 10]
    target = HFTarget(model, max_len=64, hidden=HiddenRequest(final=True, layers=(0, 2)))
    target.prefill(torch.tensor(prompt))
    tree = example_tree()
    step = target.forward_tree(tree)
    for node in range(tree.num_nodes):
        seq = prompt + path_tokens(tree, node)
        logits, hidden = full_forward(model, seq)
        torch.testing.assert_close(step.logits[node], logits[-1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(step.hidden.final[node], hidden[-1][0, -1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(step.hidden.layers[2][node], hidden[2][0, -1], atol=1e-4, rtol=1e-4)


def test_feature_is_lm_head_input(model):
    target = HFTarget(model, max_len=32, hidden=HiddenRequest(final=True))
    step = target.prefill(torch.tensor([1, 2, 3]))
    torch.testing.assert_close(model.lm_head(step.hidden.final[-1:]), step.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("accepted_node", [0, 2, 5, 6, 4])
def test_commit_keeps_only_the_accepted_path(model, accepted_node):
    prompt = [1, 4, 6]
    target = HFTarget(model, max_len=64)
    target.prefill(torch.tensor(prompt))
    tree = example_tree()
    target.forward_tree(tree)
    path = tree.paths[accepted_node]
    path = path[path >= 0]
    target.commit(torch.cat([path, torch.full((3,), -1)]), path.shape[0])
    assert target.length == len(prompt) + path.shape[0]
    # The next step continues as if only the accepted path had ever been run.
    nxt = torch.tensor([12])
    step = target.forward_tree(DraftTree.single(nxt))
    seq = prompt + tree.tokens[path].tolist() + [12]
    logits, _ = full_forward(model, seq)
    torch.testing.assert_close(step.logits[0], logits[-1], atol=1e-4, rtol=1e-4)


def test_decode_one_matches_full_forward(model):
    target = HFTarget(model, max_len=32)
    target.prefill(torch.tensor([3, 1]))
    step = target.decode_one(torch.tensor(5))
    torch.testing.assert_close(step.logits[0], full_forward(model, [3, 1, 5])[0][-1], atol=1e-4, rtol=1e-4)
    assert target.length == 3


def test_bad_input_errors(model):
    target = HFTarget(model, max_len=8)
    with pytest.raises(EmptyPromptError, match="non-empty"):
        target.prefill(torch.tensor([], dtype=torch.long))
    with pytest.raises(CacheFullError, match="does not fit the cache"):
        target.prefill(torch.arange(8) % 16)
    target.prefill(torch.tensor([1, 2, 3, 4, 5]))
    with pytest.raises(CacheFullError, match="exceed the cache"):
        target.forward_tree(example_tree())
    with pytest.raises(ValueError, match="out of range"):
        target.request_hidden(HiddenRequest(layers=(4,)))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        HFTarget(model, max_len=10_000)

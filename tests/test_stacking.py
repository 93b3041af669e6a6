"""Stacked projections (``specdec.backends.stacking``): one GEMM for ``q/k/v`` and for ``gate/up``, the same outputs.

The model-level comparisons are bitwise on the real SmolLM2 (float32 and bfloat16); the negative control shows the
comparison catches a member that takes the wrong columns. The unit tests pin the contract that a member's output is
always its own linear of its own input, whatever order or inputs the model calls the group with.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import nn

from specdec.backends import PackedLinear, apply, execution_label, prepare_model
from specdec.backends.cpu import slow_dtype_reason
from specdec.backends.kernels import pack_linears, unpack_linears
from specdec.backends.row_probe import set_row_padding
from specdec.backends.stacking import StackedSlice, stack_projections, unstack_projections
from specdec.models import load_smollm2, tiny_llama
from specdec.target import HFTarget
from tests.factories import skip_unless_packs


def tiny_packed() -> nn.Module:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0).eval()
    pack_linears(model)
    return model


def test_members_stand_in_for_their_linears() -> None:
    model = tiny_packed()
    attn = model.model.layers[0].self_attn
    separate = [attn.q_proj, attn.k_proj, attn.v_proj]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert stack_projections(model) == 2 * 2  # q/k/v and gate/up in each of 2 layers
    members = [attn.q_proj, attn.k_proj, attn.v_proj]
    assert all(isinstance(m, StackedSlice) for m in members)
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())  # saved under the same keys
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1, 3, 64, generator=g), torch.randn(1, 3, 64, generator=g)
    with torch.no_grad():
        want_x = [lin(x) for lin in separate]
        want_y = [lin(y) for lin in separate]
        assert all(torch.equal(m(x), w) for m, w in zip(members, want_x, strict=True))  # the usual order
        stack = members[0].stack
        assert stack.input is None and stack.output is None  # nothing held once every member took its part
        # another input between members: each gets its own linear of its own input
        assert torch.equal(members[0](x), want_x[0]) and torch.equal(members[1](y), want_y[1])
        assert torch.equal(members[2](x), want_x[2])
        # the same member twice, and an input changed in place after the first member read it
        assert torch.equal(members[1](y), want_y[1]) and torch.equal(members[1](y), want_y[1])
        z = x.clone()
        members[0](z)
        z.copy_(y)
        assert torch.equal(members[1](z), want_y[1])
        assert torch.equal(members[2](x), want_x[2])  # another order


def test_nothing_is_kept_between_forwards_and_inference_mode_runs() -> None:
    model = tiny_packed()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        want = model(ids).logits
    stack_projections(model)
    attn = model.model.layers[0].self_attn
    x = torch.randn(1, 3, 64)
    with torch.no_grad():
        attn.q_proj(x)  # a partial group: the product is kept while the attention runs...
        assert attn.q_proj.stack.input is x
        model(ids)  # ...and dropped when the attention returns (its forward hook)
        assert attn.q_proj.stack.input is None and attn.q_proj.stack.output is None
    with torch.inference_mode():  # inference tensors have no version counter
        assert torch.equal(model(ids).logits, want)
    twin = copy.deepcopy(model)  # the copy's hook clears the copy's stack
    with torch.no_grad():
        twin.model.layers[0].self_attn.q_proj(x)
        twin(ids)
    assert twin.model.layers[0].self_attn.q_proj.stack.input is None


def test_unpacking_undoes_stacks_and_labels_see_them() -> None:
    model = tiny_packed()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    stack_projections(model)
    assert execution_label(model) == "packed"
    hits = []
    model.model.layers[1].mlp.up_proj.register_forward_hook(lambda *a: hits.append(1))
    assert unpack_linears(model) == 2 * 7 + 1  # every projection and the lm_head, stacked or not
    assert execution_label(model) == "stock"
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        model(torch.tensor([[1, 2]]))
    assert hits == [1]  # the hook moved with the module


def test_stacking_skips_what_it_cannot_stack_and_undoes() -> None:
    model = tiny_packed()
    model.model.layers[0].self_attn.k_proj.register_forward_hook(lambda *a: None)
    assert stack_projections(model) == 3  # the hooked layer's q/k/v stays as it is
    assert isinstance(model.model.layers[0].self_attn.q_proj, PackedLinear)
    member = model.model.layers[1].self_attn.q_proj
    member.pad_single_row = True  # set on a member, it is the group's (row_probe.set_row_padding sets it so)
    assert member.stack.linear.pad_single_row and model.model.layers[1].self_attn.k_proj.pad_single_row
    twin = copy.deepcopy(model)  # a copy's members share a stack of their own
    a, b = twin.model.layers[1].self_attn.q_proj, twin.model.layers[1].self_attn.k_proj
    assert a.stack is b.stack and a.stack is not model.model.layers[1].self_attn.q_proj.stack
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert unstack_projections(model) == 3
    assert not any(isinstance(m, StackedSlice) for m in model.modules())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_fast_path_stacks_and_stock_restores() -> None:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    target = HFTarget(model, max_len=32, weights="packed")
    assert target.execution.stacked == 4 and "4 stacked projection groups" in target.execution.describe()
    assert not any(isinstance(m, StackedSlice) for m in model.modules())  # the caller's model is untouched
    assert apply(target.model, weights="stock").stacked == 0
    assert not any(isinstance(m, (StackedSlice, PackedLinear)) for m in target.model.modules())
    assert apply(target.model, weights="packed").stacked == 4  # and again
    hits = []
    target.model.model.layers[0].self_attn.k_proj.register_forward_hook(lambda *a: hits.append(1))
    again = apply(target.model, weights="packed")  # idempotent: what was stacked stays, with its hooks
    assert (again.stacked, again.packed, again.norms) == (4, 2 * 7 + 1, 5)
    with torch.no_grad():
        target.model(torch.tensor([[1, 2]]))
    assert hits == [1]


@functools.cache
def smollm2(dtype: torch.dtype):
    return load_smollm2(dtype=dtype)


def logits(model: nn.Module) -> torch.Tensor:
    """Logits of a 40-token prefill, a 1-token step and an 8-token forward after it."""
    ids = torch.randint(0, model.config.vocab_size, (1, 49), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        prefix = model(ids[:, :40], use_cache=True)
        one = model(ids[:, 40:41], cache=copy.deepcopy(prefix.past_key_values)).logits
        eight = model(ids[:, 41:49], cache=prefix.past_key_values).logits
    return torch.cat([prefix.logits, one, eight], dim=1)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_smollm2_logits_are_bitwise_with_stacked_projections(dtype: torch.dtype) -> None:
    """Bitwise, every row count. Where this CPU packs bfloat16 without native instructions (AVX-512 only: an Intel
    Xeon, family 6 model 106), oneDNN's one-row bfloat16 kernel groups its sums by the output width, so a stacked
    group's single row differed from its members' there (up to 0.31 in a logit, 75 % of the 1-token step's logits,
    every argmax the same) while every forward of more rows stayed bitwise: there single rows run the GEMM kernel
    on both sides (padded to two rows, as row-invariant numerics do where a CPU's probe asks for it)."""
    skip_unless_packs(dtype)  # bfloat16 where this CPU packs it; float32 everywhere
    model, execution = prepare_model(smollm2(dtype)[0], weights="packed", invariant=False)
    assert execution.stacked == 60
    gemv_by_width = dtype == torch.bfloat16 and slow_dtype_reason(dtype) is not None
    set_row_padding(model, gemv_by_width)
    stacked = logits(model)
    unstack_projections(model)
    pack_linears(model)
    set_row_padding(model, gemv_by_width)
    assert torch.equal(stacked, logits(model))
    set_row_padding(model, False)
    if dtype == torch.float32:  # negative control: k and v take each other's columns (the check can fail)
        stack_projections(model)
        attn = model.model.layers[5].self_attn
        attn.k_proj.start, attn.v_proj.start = attn.v_proj.start, attn.k_proj.start
        attn.k_proj.stop, attn.v_proj.stop = attn.v_proj.stop, attn.k_proj.stop
        assert not torch.equal(stacked, logits(model))

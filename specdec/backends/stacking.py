"""Stacked projections: a layer's ``q/k/v`` (and ``gate/up``) run as one packed GEMM, the model's forward unchanged.

A 1-token step runs every linear on one row, and a packed GEMM of 576 -> 192 outputs reads its 0.44 MB of weights
far below the memory bandwidth. Stacking the weights of projections that read the same input gives one GEMM with
the summed outputs. Measured on AMD Zen 4 (2 threads, 30 SmolLM2-shaped layers, cold weights): ``q/k/v`` 8.5 ->
5.3 ms per step and ``gate/up`` 14.3 -> 12.7 ms (float32; bfloat16 4.2 -> 2.7 and 7.5 -> 6.7 ms), for 1 and 8 rows
alike.

transformers' attention calls ``self.q_proj(h)``, ``self.k_proj(h)`` and ``self.v_proj(h)`` one after another on the
same ``h`` (the MLP ``gate_proj(x)`` then ``up_proj(x)``), and its code is not ours to change. So each projection is
replaced by a :class:`StackedSlice` that stands in for it: the first member of a group called with an input runs the
stacked GEMM and keeps the product; the others called with *the same tensor* (the same object, not modified in
place since: its version counter, where it has one) take their columns of it. The product is dropped once every
member has taken its part, and in any case when the module holding the group (the attention, the MLP) returns: a
forward hook there, so nothing is kept from one forward to the next. Contract: a member's output is its own linear
of its input whatever the model does. A member called with another input, or twice, runs the stacked GEMM again and
takes its columns (the same values, more work); nothing is served from another input or another forward.
Assumption: one thread runs a given model at a time (the decoding loop's case).

The members' outputs are column slices of the product (``[..., out]`` views with stride 1 in the last dimension:
transformers' ``.view(..., heads, head_dim)`` and elementwise ops take them as they are). Each output is computed from
the same weight row over the same input as before; ``tests/test_stacking.py`` checks SmolLM2's logits bit for bit
against the unstacked model in float32 and bfloat16. (Except one case: where oneDNN packs bfloat16 without native
instructions, an Intel Xeon with AVX-512 only, its one-row kernel groups sums by the output width, so a stacked
single row can differ in the last bit; rows of every other count, and single rows padded as row-invariant numerics
pad them, are bitwise.) Saving writes every member's rows under its own
``<name>.weight`` key, as the ``nn.Linear`` it replaced.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils import skip_init

from specdec.backends.kernels import PackedLinear, each_child, swap_module

__all__ = ["GROUPS", "StackedSlice", "stack_projections", "stackable_groups", "stacked_linear", "unstack_projections"]

#: Projections stacked when a module has all of them as packed linears over the same input size.
GROUPS: tuple[tuple[str, ...], ...] = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class _Stack:
    """A group's stacked linear and the product of its last input, until every member has taken its part or the
    module holding the group returns (:meth:`clear`, its forward hook)."""

    def __init__(self, linear: PackedLinear, members: int) -> None:
        self.linear = linear
        self.members = members
        self.hook = None  # the handle of the forward hook on the module holding the group
        self.clear()

    def clear(self, *hook_args) -> None:
        """Drop the kept product (also the holding module's forward hook: ``(module, args, output)``)."""
        self.input: torch.Tensor | None = None
        self.version = -1
        self.output: torch.Tensor | None = None
        self.waiting = 0  # bit i: member i has not taken its part of ``output`` yet

    def part(self, x: torch.Tensor, index: int, start: int, stop: int) -> torch.Tensor:
        bit = 1 << index
        version = -1 if x.is_inference() else x._version  # inference tensors keep no version counter
        if not (self.waiting & bit and self.input is x and self.version == version):
            self.output = self.linear(x)
            self.input, self.version, self.waiting = x, version, (1 << self.members) - 1
        out = self.output[..., start:stop]
        self.waiting &= ~bit
        if not self.waiting:
            self.clear()
        return out

    def dense_weight(self) -> torch.Tensor:
        """The stacked ``[sum of outs, in]`` weight, made dense once for all the members (undoing the stack)."""
        if getattr(self, "_dense", None) is None:
            self._dense = self.linear.weight.detach()
        return self._dense


class StackedSlice(nn.Module):
    """One projection of a stacked group: its columns ``start:stop`` of the group's GEMM (module docstring).

    Shapes: ``x [..., in_features]`` -> ``[..., out_features]`` (a view of the group's product).
    """

    #: Runs rows of a packed weight (:func:`~specdec.backends.kernels.runs_packed`: counted and undone with the
    #: packed linears).
    packed_member = True

    def __init__(self, stack: _Stack, index: int, start: int, stop: int) -> None:
        super().__init__()
        self.__dict__["stack"] = stack  # shared by the group's members; not a submodule (no duplicate state keys)
        self.index, self.start, self.stop = index, start, stop
        self.in_features, self.out_features = stack.linear.in_features, stop - start

    @property
    def pad_single_row(self) -> bool:
        """Row padding of the group's packed linear (:func:`~specdec.backends.row_probe.set_row_padding`)."""
        return self.stack.linear.pad_single_row

    @pad_single_row.setter
    def pad_single_row(self, on: bool) -> None:
        self.stack.linear.pad_single_row = on

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stack.part(x, self.index, self.start, self.stop)

    @property
    def weight(self) -> torch.Tensor:
        """This member's ``[out, in]`` rows of the stacked weight (dense)."""
        return self.stack.linear.weight[self.start : self.stop]

    @property
    def bias(self) -> torch.Tensor | None:
        bias = self.stack.linear.bias
        return None if bias is None else bias[self.start : self.stop]

    def to_linear(self) -> nn.Linear:
        """An ``nn.Linear`` with this member's weight and bias (copies of its rows)."""
        bias = self.bias
        dtype = self.stack.linear.dtype
        lin = skip_init(nn.Linear, self.in_features, self.out_features, bias=bias is not None, dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(self.stack.dense_weight()[self.start : self.stop])
            if bias is not None:
                lin.bias.copy_(bias)
        return lin.requires_grad_(False)

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        # the keys of the nn.Linear it replaced
        destination[prefix + "weight"] = self.weight.detach()
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias.detach()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, columns={self.start}:{self.stop}"


def stacked_linear(parts: Sequence[nn.Module]) -> nn.Linear:
    """One ``nn.Linear`` whose output rows are ``parts``' rows in order (their weights and biases copied; ``parts``:
    linears or packed linears over the same input)."""
    w = torch.cat([p.weight.detach() for p in parts])
    has_bias = parts[0].bias is not None
    out = skip_init(nn.Linear, w.shape[1], w.shape[0], bias=has_bias, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        out.weight.copy_(w)
        if has_bias:
            out.bias.copy_(torch.cat([p.bias.detach() for p in parts]))
    return out.train(parts[0].training)


def _stackable(parts: list[nn.Module]) -> bool:
    """Packed members over one input (:func:`_same_input`) that pad single rows and block rows alike."""
    return (
        all(type(p) is PackedLinear for p in parts)
        and _same_input(parts)
        and len({(p.pad_single_row, p.row_block) for p in parts}) == 1
    )


def stackable_groups(model: nn.Module) -> list[list[nn.Linear]]:
    """The groups of :data:`GROUPS` under ``model`` whose members are plain ``nn.Linear`` s over the same input (same
    dtype and bias-ness): the ones :func:`stack_projections` stacks once every member is packed."""
    groups = []
    for module in model.modules():
        for names in GROUPS:
            parts = [getattr(module, n, None) for n in names]
            if all(type(p) is nn.Linear for p in parts) and _same_input(parts):
                groups.append(parts)
    return groups


def _same_input(parts: list[nn.Module]) -> bool:
    """Linears (plain or packed) over one input: same input size, dtype and bias-ness, and no hooks (a hook on one
    projection would no longer run once stacked)."""
    first = parts[0]
    return all(
        p.in_features == first.in_features
        and _dtype(p) == _dtype(first)
        and (p.bias is None) == (first.bias is None)
        and not (p._forward_hooks or p._forward_pre_hooks)
        for p in parts
    )


def _dtype(linear: nn.Module) -> torch.dtype:
    return linear.dtype if isinstance(linear, PackedLinear) else linear.weight.dtype  # a packed weight is not dense


def stack_projections(model: nn.Module) -> int:
    """Replace every group of :data:`GROUPS` whose members are packed linears over the same input by
    :class:`StackedSlice` s of one stacked packed linear, in place; returns the number of stacked groups under
    ``model`` (those stacked before included)."""
    count = 0
    for module in list(model.modules()):
        for names in GROUPS:
            parts = [getattr(module, n, None) for n in names]
            if all(isinstance(p, StackedSlice) for p in parts) and len({id(p.stack) for p in parts}) == 1:
                count += 1  # stacked before
                continue
            if any(p is None for p in parts) or not _stackable(parts):
                continue
            linear = PackedLinear(stacked_linear(parts))
            linear.pad_single_row, linear.row_block = parts[0].pad_single_row, parts[0].row_block
            stack = _Stack(linear, len(parts))
            stack.hook = module.register_forward_hook(stack.clear)
            start = 0
            for i, (name, part) in enumerate(zip(names, parts, strict=True)):
                setattr(module, name, StackedSlice(stack, i, start, start + part.out_features))
                start += part.out_features
            count += 1
    return count


def unstack_projections(model: nn.Module) -> int:
    """Put plain ``nn.Linear`` s (the same values, hooks moved) back for every :class:`StackedSlice`; returns how
    many groups."""
    groups = {}
    for module, name, child in list(each_child(model)):
        if isinstance(child, StackedSlice):
            groups[id(child.stack)] = child.stack
            swap_module(module, name, child, child.to_linear())
    for stack in groups.values():
        if stack.hook is not None:
            stack.hook.remove()
    return len(groups)

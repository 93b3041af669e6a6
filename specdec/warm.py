"""Compile every shape a speculative generator will run before anything is timed (static shapes).

A static-shape target compiles one graph per bucket (:meth:`specdec.target.HFTarget.warm_up`); its drafter's steps
compile per shape too: an EAGLE head's or a small LM's root step per bucket of pending rows, and its node steps per
frontier width, all over buffers sized by the policy's tree capacity. Left to the first generations, those compiles
land inside timed runs. On the one GPU run so far, two composite prompts took 38 s and 47 s that way
(``docs/results/2026-11-27-gpu-h200``).

:func:`warm_up` runs the generator's own parts on synthetic context, through their public calls only:

* the target's buckets (:meth:`~specdec.target.HFTarget.warm_up`);
* the drafter itself is prefilled with one synthetic token, then takes cycles whose commits hold ``b - 1`` and ``b``
  tokens for each bucket ``b`` (with the target's hidden states at them). A deep copy of the call's policy grows one
  tree after each commit: its root step runs that many pending rows (every root-step bucket), and its levels run the
  node-step widths the policy uses, at its tree capacity.

The drafter, not a fork of it, because CUDA graphs are recorded at the addresses of the buffers a step writes
(static addresses): a fork's buffers would leave the drafter's own graphs to be recorded inside the first timed
generation. Its synthetic context is gone at the next :meth:`~specdec.interfaces.Drafter.prefill`, which starts
every generation afresh. Nothing else of the generator changes: the policy's copy is dropped, and the target's cache
is left empty.
A policy whose frontier widths vary with the draws could still meet a width the warm-up did not run;
``specdec bench`` counts graphs compiled inside timed rows (``compiles``) and reports them.
"""

from __future__ import annotations

import copy
import time

import torch

from specdec.sampling import SamplingParams

__all__ = ["warm_up"]


@torch.no_grad()
def warm_up(gen, sampling: SamplingParams | None = None) -> float:
    """Compile the shapes ``gen`` (a :class:`~specdec.generate.SpeculativeGenerator`, or a vanilla one: its target
    only) runs at ``sampling`` (None: greedy); returns the seconds it took. Eager targets and drafters: nothing to
    compile, a few cheap forwards at most."""
    start = time.perf_counter()
    target = gen.target
    target.warm_up()
    drafter = getattr(gen, "drafter", None)
    if drafter is None or not target.static:
        return time.perf_counter() - start
    sampling = sampling or SamplingParams(temperature=0.0)
    policy, _ = gen.parts_for(sampling)
    # pending rows of a root step: a cycle's commit of k tokens gives k (EAGLE) or k + 1 (small LM) rows
    commits = sorted({k for b in target.buckets for k in (b - 1, b) if k >= 1})
    room = min(target.max_len, getattr(drafter, "max_len", target.max_len)) - policy.max_nodes - 2
    while commits and 2 + sum(commits) > room:
        commits.pop()
    prompt = torch.arange(2 + sum(commits), device=target.device) % target.vocab_size
    hidden = target.prefill(prompt).hidden
    g = torch.Generator(device=target.device).manual_seed(0)
    grow = copy.deepcopy(policy).grow  # on the drafter itself: its buffers' addresses (module docstring)
    drafter.prefill(prompt[:1], hidden.select(torch.arange(1, device=target.device)))
    grow(drafter, prompt[1], sampling, g)  # a drafter's first forward (the prompt) may run eagerly
    pos = 1
    for k in commits:
        drafter.commit(prompt[pos : pos + k], hidden.select(torch.arange(pos, pos + k, device=target.device)))
        pos += k
        grow(drafter, prompt[pos], sampling, g)
    target.reset()
    return time.perf_counter() - start

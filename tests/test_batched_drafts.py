"""Several rows' EAGLE root steps in one head forward (:meth:`Drafter.expand_roots`, run by the batched loop before its
rows grow their trees): every row's draft is the one its drafter computes alone.

What each test could catch:

* rows attending over one another's keys (one cache for all, a wrong split of the rows) or a wrong row scored: every
  level of three rows' trees (different prompts, different commits, EAGLE-1 and EAGLE-3 heads) is compared with the
  same drafters run alone; the control hands the rows their neighbours' roots and must differ;
* a root pair lost when a drafter's buffers grow after its root step ran (a tree larger than the last): compared too;
* a primed root step never expanded (a plain step) then committed: its pair counted twice or lost, compared too;
* drafters grouped though they cannot share a forward (one head, different scorers: logits over the wrong vocabulary;
  a dynamic-NTK RoPE head, whose base one row's length would set for the others): each guard removed fails it;
* the batched loop still running each row's root step alone (the cost removed): root steps per forward are counted,
  with the loop's call patched out as the control.
"""

from __future__ import annotations

import pytest
import torch

from specdec.drafters import EagleDrafter
from specdec.drafters.eagle import EagleDrafterBase
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy
from tests.factories import make_drafter, record_topk, seeded_hidden

MAX_LEN, VOCAB, H = 64, 24, 16
GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [torch.arange(3) % VOCAB, torch.arange(5, 12) % VOCAB, torch.tensor([7, 2])]
#: Rows run together and alone meet the stock GEMM at different row counts, whose kernels group the sums differently
#: (AMD Zen 4, EAGLE-1's head: 5.9e-5 apart on values of about 1.5); a row scored against another row's keys or root
#: moves its values by O(1) (the control below, held to the same tolerance).
TOL = 2e-4


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=H, num_layers=2, logit_scale=1.5)


def _rows(kind: str, model, together: bool, rotate: bool = False) -> list[list[torch.Tensor]]:
    """Three forks of one drafter over four trees each (row 0's second a plain step: its root alone committed), commits
    of 1-3 tokens between them; with ``together`` every
    tree's root steps run together (the first's: the prompts, into buffers its tree then grows; tree 3 is the first of
    a larger capacity); ``rotate``: each row is handed its neighbour's root."""
    base = make_drafter(kind, model, MAX_LEN, weights="stock")
    drafters = [base.fork() for _ in PROMPTS]
    seen: list[list[torch.Tensor]] = [[] for _ in PROMPTS]
    for r, (d, prompt) in enumerate(zip(drafters, PROMPTS, strict=True)):
        d.prefill(prompt, seeded_hidden(d, len(prompt), seed=r, width=H))
        record_topk(d, seen[r])
    for cycle in range(4):
        policy = DynamicTreePolicy(topk=2 + (cycle > 1), depth=2 + (cycle > 1), total_tokens=6 + 6 * (cycle > 1))
        roots = [torch.tensor([(5 + 3 * r + cycle) % VOCAB]) for r in range(len(drafters))]
        if together:
            handed = roots[1:] + roots[:1] if rotate else roots
            type(base).expand_roots(drafters, handed)
        for r, d in enumerate(drafters):
            if (r, cycle) == (0, 1):  # a plain step: the root step ran (together) but no tree grew; the root kept
                d.commit(roots[r], seeded_hidden(d, 1, seed=100 * r + cycle, width=H))
                continue
            policy.grow(d, roots[r][0], GREEDY, None)
            accepted = torch.arange(1 + (r + cycle) % 3) % VOCAB
            d.commit(
                torch.cat([roots[r], accepted]), seeded_hidden(d, 1 + accepted.shape[0], seed=100 * r + cycle, width=H)
            )
    return seen


@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_root_steps_run_together_draft_what_each_row_drafts_alone(model, kind) -> None:
    alone, together = _rows(kind, model, False), _rows(kind, model, True)
    for a, t in zip(alone, together, strict=True):
        assert len(a) == len(t)
        for x, y in zip(a, t, strict=True):
            torch.testing.assert_close(y, x, atol=TOL, rtol=TOL)


def test_rows_handed_their_neighbours_roots_draft_otherwise(model) -> None:
    alone, rotated = _rows("eagle3", model, False), _rows("eagle3", model, True, rotate=True)
    differs = any(
        x.shape != y.shape or not torch.allclose(x, y, atol=TOL, rtol=TOL)
        for a, t in zip(alone, rotated, strict=True)
        for x, y in zip(a, t, strict=True)
    )
    assert differs, "the comparison cannot tell a row's root from its neighbour's"


def _count_root_steps(monkeypatch) -> list[int]:
    """Patches the root step to record how many drafters each forward runs; the list it fills."""
    sizes: list[int] = []
    original = EagleDrafterBase._root_step

    def counted(drafters, roots):
        sizes.append(len(drafters))
        return original(drafters, roots)

    monkeypatch.setattr(EagleDrafterBase, "_root_step", staticmethod(counted))
    return sizes


def test_drafters_that_cannot_share_a_forward_run_alone(model) -> None:
    """Drafters of one head with different scorers (a shortlist and the whole vocabulary) each get their own forward,
    with logits over their own vocabulary; a head whose RoPE base follows the largest position (dynamic NTK) is left
    to run alone. Control: two forks of one drafter share a forward."""
    base = make_drafter("eagle1-shortlist", model, MAX_LEN, weights="stock")
    whole = EagleDrafter(base.head, model, MAX_LEN, weights="stock")
    roots = [torch.tensor([3]), torch.tensor([4])]
    with pytest.MonkeyPatch.context() as m:
        sizes = _count_root_steps(m)
        for pair in ([base.fork(), whole], [base.fork(), base.fork()]):
            for d, prompt in zip(pair, PROMPTS, strict=False):
                d.prefill(prompt, seeded_hidden(d, len(prompt), seed=1, width=H))
            EagleDrafterBase.expand_roots(pair, roots)
            if pair[1] is whole:
                assert [d._primed.shape[-1] for d in pair] == [VOCAB // 2, VOCAB]
    assert sizes == [1, 1, 2], sizes
    dynamic = [base.fork(), base.fork()]
    for d, prompt in zip(dynamic, PROMPTS, strict=False):
        d.prefill(prompt, seeded_hidden(d, len(prompt), seed=1, width=H))
    kind = base._attention.rotary.kind
    base._attention.rotary.kind = "dynamic"  # the forks share the head: its attention and RoPE
    try:
        EagleDrafterBase.expand_roots(dynamic, roots)
    finally:
        base._attention.rotary.kind = kind
    assert all(d._primed is None for d in dynamic)


def _root_steps_per_forward(model, monkeypatch, patched: bool) -> list[int]:
    target = HFTarget(model, max_len=MAX_LEN, static_shapes=False)
    gen = SpeculativeGenerator(
        target, make_drafter("eagle3", model, MAX_LEN), DynamicTreePolicy(topk=2, depth=2, total_tokens=4)
    )
    sizes = _count_root_steps(monkeypatch)
    if patched:
        monkeypatch.setattr("specdec.batched._Batch._expand_roots", lambda self, indices, timer: None)
    gen.generate_batch([p.tolist() for p in PROMPTS], GREEDY, StopCondition(max_new_tokens=12), speculate="always")
    return sizes


def test_the_batched_loop_runs_its_rows_root_steps_in_one_forward(model, monkeypatch) -> None:
    sizes = _root_steps_per_forward(model, monkeypatch, patched=False)
    assert sizes[0] == 3 and sum(sizes) / len(sizes) > 2, sizes  # the prompts at admission, then every cycle
    with monkeypatch.context() as m:
        control = _root_steps_per_forward(model, m, patched=True)
    assert set(control) == {1}, "the count cannot tell rows run together from rows run alone"

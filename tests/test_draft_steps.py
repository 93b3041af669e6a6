"""EAGLE drafters' steps on the static path: the head and its scorer (the draft lm_head) run as one compiled graph,
with the eager steps' draft distribution; and which backend a head gets on a static-shape target.

What each test could catch:

* a compiled step whose logits differ from the eager step's (a wrong row scored, a dropped norm, the root step's
  padding rows scored instead of the root's): the top-k of every level are compared with the eager drafter's;
* a scorer left outside the graph (an eager GEMM per level, the cost the change removes): the eager scorer is
  counted, and the eager drafter (the control) calls it once per level;
* a CPU static target handing its head float32 compiled steps under ``"auto"`` (2x slower drafting on the Zen 3),
  or a CUDA one handing it eager steps (no CUDA graphs): :func:`draft_backend` on both device kinds.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specdec.drafters.eagle_steps import ScoredStep, draft_backend
from specdec.interfaces import TargetHidden
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.trees import DynamicTreePolicy
from tests.factories import make_drafter, record_topk, seeded_hidden

pytestmark = pytest.mark.filterwarnings("error::specdec.backends.FastPathWarning")
MAX_LEN = 72


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=24, hidden_size=16, num_layers=2, logit_scale=1.5)


def _features(drafter, n: int) -> TargetHidden:
    """Target hidden states for ``n`` positions in the form the drafter asks for (seeded, so both drafters agree)."""
    return seeded_hidden(drafter, n, seed=n)


def _levels(drafter, rounds: int = 3) -> list[torch.Tensor]:
    """Each level's ``(log q, tokens)`` over ``rounds`` trees, with commits of 1-3 tokens between them."""
    policy = DynamicTreePolicy(topk=3, depth=3, total_tokens=8)
    prompt = torch.arange(3) % 24  # every root step (2-4 rows: the root pair at rows 1-3) pads to one bucket, 4
    drafter.prefill(prompt, _features(drafter, 3))
    seen: list[torch.Tensor] = []
    record_topk(drafter, seen)
    for r in range(rounds):
        root = torch.tensor(5 + r)
        policy.grow(drafter, root, SamplingParams(temperature=0.0), None)
        tokens = torch.cat([root[None], torch.arange(r) % 24])  # the root, then r accepted tokens
        drafter.commit(tokens, _features(drafter, r + 1))
    return seen


@pytest.fixture(scope="module")
def static_drafter(model):
    """An EAGLE-3 drafter with compiled steps (one per module: each compiles its own graphs)."""
    return make_drafter("eagle3", model, MAX_LEN, weights="stock", static_shapes=True)


def test_compiled_steps_score_in_the_graph_with_the_eager_steps_draft(model, static_drafter) -> None:
    eager = make_drafter("eagle3", model, MAX_LEN, weights="stock")
    scored = {"eager": 0, "static": 0}
    for name, drafter in (("eager", eager), ("static", static_drafter)):
        original = drafter._draft_logits

        def counted(out, name=name, original=original):
            scored[name] += 1
            return original(out)

        drafter._draft_logits = counted
    want, got = _levels(eager), _levels(static_drafter)
    del static_drafter._draft_logits  # the class's method again
    assert len(want) == len(got) == 2 * 3 * 3  # (log q, tokens) x levels x rounds
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    assert scored["eager"] == 3 * 3  # control: the eager drafter scores every level with its eager scorer
    assert scored["static"] == 0  # every compiled step scored inside its graph


@pytest.mark.parametrize(
    ("device", "weights", "static", "want"),
    [
        ("cpu", "auto", False, ("auto", False)),  # an eager target: as asked
        ("cpu", "auto", True, ("auto", False)),  # CPU graphs freeze: the head stays eager on int8
        ("cpu", "stock", True, ("stock", True)),  # asked for: compiled steps on plain weights
        ("cpu", "int8", True, ("int8", False)),  # eager kinds stay eager
        ("cpu", "packed", True, ("packed", False)),
        ("cuda", "auto", True, ("stock", True)),  # CUDA graphs: compiled steps on plain weights
        ("cuda", "auto", False, ("auto", False)),
    ],
)
def test_the_head_backend_on_a_static_target(device: str, weights: str, static: bool, want) -> None:
    target = SimpleNamespace(static=static, device=torch.device(device))
    assert draft_backend(target, weights) == want


def test_buffers_are_static_addresses_only_where_graphs_replay_weights_in_place(
    model, static_drafter, monkeypatch
) -> None:
    """CUDA graph trees capture a step only if every tensor it writes is a static address (the first GPU run's head
    wrote unmarked key/value buffers and ran without graphs; ``test_compiled.py``'s CUDA test counts the skips).
    Where graphs freeze (a CPU) a marked tensor becomes an unguarded graph constant, so the buffers stay unmarked
    there. Shown on this CPU with ``freezes`` patched to say False (what it says for CUDA)."""
    import specdec.drafters.eagle as eagle

    def buffers(drafter):
        _levels(drafter, rounds=1)
        return [hasattr(t, "_dynamo_static_input_type") for t in (drafter._k, drafter._v)]

    assert buffers(static_drafter) == [False, False]
    monkeypatch.setattr(eagle, "freezes", lambda device: False)
    drafter = make_drafter("eagle3", model, MAX_LEN + 2, weights="stock", static_shapes=True)
    drafter._head_step = ScoredStep(drafter.head, drafter._score)  # uncompiled: only the marks are read here
    assert buffers(drafter) == [True, True]


def test_a_static_cpu_target_builds_an_eager_int8_head(model) -> None:
    """What ``from_target`` builds (the named methods' path): on a static-shape CPU target, ``"auto"`` gives an eager
    int8 head and ``"stock"`` a compiled one (nothing compiles until a step runs)."""
    from specdec.drafters import Eagle3Drafter
    from specdec.target import HFTarget
    from tests.factories import random_head

    target = HFTarget(model, max_len=MAX_LEN, static_shapes=True, weights="stock")
    auto = Eagle3Drafter.from_target(target, random_head("eagle3", model))
    stock = Eagle3Drafter.from_target(target, random_head("eagle3", model), weights="stock")
    assert (auto.execution.weights, auto.static) == ("int8", False)
    assert (stock.execution.weights, stock.static) == ("stock", True)

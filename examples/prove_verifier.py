"""Prove your own verifier lossless with specdec.testing, and watch a broken one fail.

    python examples/prove_verifier.py                   # proofs + a tiny random Llama pipeline, seconds
    python examples/prove_verifier.py --model smollm2   # same proofs, then the verifier on SmolLM2-135M-Instruct

The verifier written here, FirstChildVerifier, looks only at the first child of every node: accept it with
probability p(x1); otherwise draw the bonus from p with x1 removed and renormalised. It is lossless for
deterministic candidates (q one-hot) and wastes every other branch of the tree. Tutorial:
docs/tutorials/prove_verifier.md
"""

from __future__ import annotations

import argparse

import torch

from specdec import Drafter, PartialTree, SamplingParams, warp
from specdec.testing import (
    VerifyCase,
    assert_lossless_exact,
    empirical_verify_check,
    exact_output_distribution,
    target_distribution,
)
from specdec.testing.broken import ResidualNotRenormalisedVerifier, StaleQVerifier
from specdec.tree import DraftTree
from specdec.verify import MultiRoundVerifier, PlanVerifier, StochasticMultiRoundVerifier, VerifyPlan
from specdec.verify.plan import earlier_siblings, parent_index, safe_div, token_mask

F64 = torch.float64


class FirstChildVerifier(PlanVerifier):
    """Deterministic candidates: at node u try only its first child x1, accepted with probability p_u(x1).

    If x1 is rejected (or u is a leaf) the bonus is drawn from ``norm(p_u with x1 zeroed)`` (a leaf: p_u).
    Lossless: P(emit x1) = p(x1); P(emit y != x1) = (1 - p(x1)) * p(y) / (1 - p(x1)) = p(y).
    Contract: the candidates do not depend on this verifier's coins (``tree.q_dist is None``).
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        if tree.is_stochastic:
            raise ValueError("FirstChildVerifier takes deterministic candidates (q one-hot)")
        p = warp(target_logits, sampling, self.dtype)  # [N, V] p_target for the children of each node
        n, vocab = p.shape
        idx = torch.arange(n, device=tree.device)
        first = (idx > 0) & ~earlier_siblings(tree).any(-1)  # [N] first child of its parent
        p_x = p[parent_index(tree), tree.tokens]  # [N] p_parent(x)
        accept_prob = torch.where(idx == 0, 1.0, torch.where(first, p_x, 0.0))
        tried = token_mask(parent_index(tree), tree.tokens, first, n, vocab)  # [N, V]: [u, x1 of u]
        rest = p.masked_fill(tried, 0.0)
        rest_sum = rest.sum(-1, keepdim=True)
        residual = torch.where(rest_sum > 0, safe_div(rest, rest_sum), p)  # p(x1) = 1: never rejected
        return VerifyPlan(accept_prob=accept_prob, residual=residual)


def target_fn(prefix: tuple[int, ...]) -> torch.Tensor:
    """A fixed random target over V=3: logits after each prefix (seeded by the prefix)."""
    seed = 1 + sum(t * 3**i for i, t in enumerate(prefix)) + 100 * len(prefix)
    return 1.5 * torch.randn(3, generator=torch.Generator().manual_seed(seed), dtype=F64)


def deterministic_cases() -> list[VerifyCase]:
    """Two levels, siblings, a duplicate token, under four sampling settings (T = 0 included)."""
    parents = (-1, 0, 0, 1, 1, 2)
    settings = [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=2),
        SamplingParams(temperature=1.3, top_p=0.8),
        SamplingParams(temperature=0.0),
    ]
    cases = []
    for s in settings:
        for tokens in [(0, 0, 1, 2, 0, 1), (0, 2, 1, 1, 1, 0)]:  # the second has a duplicate sibling token
            name = f"T={s.temperature},k={s.top_k},p={s.top_p},tokens={tokens}"
            cases.append(VerifyCase.from_functions(target_fn, 3, parents, s, tokens=tokens, name=name))
    return cases


def stochastic_case() -> VerifyCase:
    """Two children of the root drawn without replacement from a draft q that differs from p."""

    def draft_fn(prefix: tuple[int, ...]) -> torch.Tensor:
        return torch.softmax(target_fn(prefix[::-1] + (2,)), -1)  # some other distribution, full support

    return VerifyCase.from_functions(
        target_fn, 3, (-1, 0, 0), SamplingParams(temperature=1.0), draft_fn=draft_fn, name="sampled siblings"
    )


def expect_failure(label: str, check) -> None:
    try:
        check()
    except AssertionError as err:
        print(f"FAIL (as expected) {label}:\n    AssertionError: {err}")
    else:
        raise SystemExit(f"{label} passed, but it should have failed")


def proofs() -> None:
    cases = deterministic_cases()
    mine = FirstChildVerifier(dtype=F64)  # float64 plans: the exact check compares at 1e-9
    assert_lossless_exact(mine, cases)
    worst = max(float((exact_output_distribution(mine, c) - target_distribution(c)).abs().max()) for c in cases)
    print(f"PASS exact: FirstChildVerifier on {len(cases)} cases, max |P_spec - P_target| = {worst:.1e}")
    sampled = cases[0]
    p_value = empirical_verify_check(FirstChildVerifier(), sampled, n_samples=4000, seed=0)
    print(f"PASS statistical: FirstChildVerifier.verify, 4000 cycles, G-test p-value {p_value:.3f}")

    expect_failure(
        "exact, ResidualNotRenormalisedVerifier",
        lambda: assert_lossless_exact(ResidualNotRenormalisedVerifier(F64), cases),
    )
    expect_failure(
        "statistical, ResidualNotRenormalisedVerifier",
        lambda: empirical_verify_check(ResidualNotRenormalisedVerifier(), sampled, n_samples=4000, seed=0),
    )

    case = stochastic_case()
    assert_lossless_exact(StochasticMultiRoundVerifier(F64), case)
    print("PASS exact: StochasticMultiRoundVerifier on sampled candidates (without replacement)")
    expect_failure("exact, StaleQVerifier", lambda: assert_lossless_exact(StaleQVerifier(F64), case))


def load(model_name: str):
    if model_name == "tiny":
        from specdec.models import tiny_llama

        model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2, logit_scale=4.0)
        return model, torch.tensor([1, 2, 3, 4, 5, 1, 2, 3]), [], 512, 2
    from specdec.assets import chat_ids
    from specdec.models import load_smollm2

    model, tokenizer = load_smollm2()
    return model, chat_ids(tokenizer, "Name three planets."), [tokenizer.eos_token_id], 2048, 6


def in_the_loop(model_name: str, max_new_tokens: int) -> None:
    """Plug the proven verifier into a real pipeline: at T=0 the output must equal vanilla greedy."""
    from specdec.drafters import SmallLMDrafter
    from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
    from specdec.target import HFTarget
    from specdec.trees import DynamicTreePolicy

    model, prompt, eos, max_len, layers = load(model_name)
    target = HFTarget(model, max_len=max_len)
    drafter = SmallLMDrafter.from_target_layers(model, layers, max_len=max_len)
    policy = DynamicTreePolicy(topk=4, depth=4, total_tokens=16)
    stop = StopCondition(max_new_tokens=max_new_tokens, eos_token_ids=eos)
    for temperature in (0.0, 0.8):
        sampling = SamplingParams(temperature=temperature, seed=0)
        base = VanillaGenerator(target).generate(prompt, sampling, stop)
        for verifier in (FirstChildVerifier(), MultiRoundVerifier()):
            result = SpeculativeGenerator(target, drafter, policy, verifier).generate(prompt, sampling, stop)
            line = f"T={temperature} {type(verifier).__name__:<20} tau={result.metrics.tau:.2f}"
            if sampling.greedy:
                line += f"  identical to vanilla greedy: {'yes' if result.tokens == base.tokens else 'NO'}"
            print(line)


class UnigramDrafter(Drafter):
    """A custom drafter as docs/tutorials/custom_drafter.md writes one: q(x) from how often x occurs in the node's
    context (committed tokens + root path), add-0.1 smoothed. Deterministic in the context, as top-k trees need."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.reset()

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        counts = [torch.bincount(c, minlength=self.vocab_size).float() for c in self.contexts(tree, frontier)]
        return torch.log(torch.stack(counts) + 0.1).to(tree.device)  # [F, V] logits


def whole_pipeline(n_samples: int = 300) -> None:
    """The kit on a whole decoder, with the report of what the check could have caught.

    Pipeline: a tiny random Llama (V = 6), UnigramDrafter, a dynamic top-2 tree of 6 nodes, FirstChildVerifier.
    ``e2e_check`` samples ``n_samples`` runs of 3 tokens, G-tests them, enumerates the pipeline's exact law through its
    own loop (deterministic candidates), and plants every applicable bug of specdec.testing.broken in the same
    pipeline.
    Then the issue's case: ResidualNotRenormalisedVerifier swapped in, with top-k 3 (the bug cannot show: the
    report must say so, not pass) and without (the exact law catches it where the G-test at n = 300 does not); the
    first of those two runs plants only that bug, the second none (the pipeline fails the check itself).
    """
    import time

    from specdec.generate import SpeculativeGenerator
    from specdec.models import tiny_llama
    from specdec.target import HFTarget
    from specdec.testing import e2e_check
    from specdec.trees import DynamicTreePolicy

    model = tiny_llama(vocab_size=6, hidden_size=16, num_layers=2, logit_scale=1.5, seed=1)
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])

    def pipeline(verifier) -> SpeculativeGenerator:
        return SpeculativeGenerator(
            HFTarget(model, max_len=64), UnigramDrafter(6), DynamicTreePolicy(2, 3, 6), verifier
        )

    t0 = time.perf_counter()
    hot = SamplingParams(temperature=1.0)
    report = e2e_check(pipeline(FirstChildVerifier()), model, prompt, hot, n_samples=n_samples)
    print(f"whole decoder, FirstChildVerifier, T=1 ({time.perf_counter() - t0:.1f} s): {report.summary()}")
    for sampling in (SamplingParams(temperature=1.0, top_k=3), SamplingParams(temperature=1.0)):
        only = ["ResidualNotRenormalisedVerifier"]
        bugged = e2e_check(
            pipeline(ResidualNotRenormalisedVerifier()), model, prompt, sampling, n_samples, controls=only
        )
        # a pipeline that fails the check itself gets no planted bug (its failure would say nothing): the report
        # says so instead of a line per bug
        planted = "; ".join(r.describe(n_samples) for r in bugged.power.controls)
        print(f"ResidualNotRenormalisedVerifier swapped in, {sampling}: {bugged.verdict}")
        print(
            f"    G-test p-value {bugged.p_value:.3g}; exact max |P_pipeline - P_target| "
            f"{bugged.power.pipeline_max_diff:.1e}; {planted or 'power not measured: ' + bugged.power.unmeasured}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--skip-model", action="store_true", help="only the proofs, no model")
    parser.add_argument("--samples", type=int, default=300, help="runs the kit samples per check on the decoder")
    args = parser.parse_args(argv)
    proofs()
    if not args.skip_model:
        whole_pipeline(args.samples)
        in_the_loop(args.model, args.max_new_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

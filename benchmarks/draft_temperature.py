"""How a sampled tree's root acceptance depends on the draft's temperature, from real (p, q) pairs, exactly.

    python benchmarks/draft_temperature.py [--method eagle3] [--prompts 8] [--new-tokens 96] [--temperature 1.0]
                                           [--top-p 1.0] [--draws 3] [--mc 256] [--q-top-ps 0.9]
                                           [--threads 2]

Decodes MT-bench prompts with ``--method`` at ``--temperature`` (its sampled tree) and records, at every cycle's
root, the target's ``p`` (after the sampling warp) and the draft's ``q`` the root's children were drawn from. Then,
for draft temperatures ``alpha * T`` (``q_alpha ∝ q^(1/alpha)``, any q is lossless since the verifier reads the q
the draws came from), it prints the probability that one of ``--draws`` children drawn without replacement from
``q_alpha`` is accepted by stochastic multi-round verification (the library's own plan, averaged over ``--mc``
draws per row), the one-draw acceptance ``sum min(p, q_alpha)``, and the ceiling: the mass of p's ``--draws``
most likely tokens, which no rule drawing that many children can beat in expectation. ``--q-top-ps`` also cuts
each ``q_alpha`` to its own nucleus (a draft the verifier judges as any other: it reads the q drawn from).
"""

from __future__ import annotations

import argparse

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.models import load_smollm2
from specdec.tree import DraftTree
from specdec.verify import stochastic as stochastic_verify


def record_roots(method: str, prompts: int, new_tokens: int, sampling: SamplingParams) -> list[tuple]:
    """(p [V], q [V]) at every cycle's root, recorded from the verifier's plan."""
    model, tokenizer = load_smollm2()
    target = HFTarget(model, max_len=1024, weights="auto", in_place=True)
    gen = build_method(method, target)
    rows: list[tuple] = []
    native = stochastic_verify.native_plan  # the verifier's plan (native on a CPU; None: it runs the Python plan)

    def recording_native(tree, p, q, *args, **kwargs):
        rows.append((p[0].clone(), q[0].clone()))
        return native(tree, p, q, *args, **kwargs)

    stochastic_verify.native_plan = recording_native
    stop = StopCondition(max_new_tokens=new_tokens, eos_token_ids=())
    try:
        for i, prompt in enumerate(mtbench_prompts()[:prompts]):  # every cycle a tree: its root recorded
            gen.generate(chat_ids(tokenizer, prompt), sampling.model_copy(update={"seed": i}), stop, speculate="always")
    finally:
        stochastic_verify.native_plan = native
    print(f"cpu={cpu_name()} method={method} sampling={sampling}: {len(rows)} roots recorded")
    return rows


def root_acceptance(p: torch.Tensor, q: torch.Tensor, draws: int, mc: int, gen: torch.Generator) -> float:
    """P(one of ``draws`` children drawn from q without replacement is accepted), averaged over ``mc`` draws."""
    keys = torch.log(q.double().clamp_min(1e-300))[None, :] - torch.log(
        -torch.log(torch.rand(mc, q.shape[0], generator=gen, dtype=torch.float64))
    )
    keys = torch.where(q[None, :] > 0, keys, -torch.inf)
    tokens = keys.topk(draws, dim=-1).indices  # [mc, draws]: Gumbel top-k = sequential draws without replacement
    parents = torch.tensor([-1] + [0] * draws)
    total = 0.0
    for row in tokens:
        tree = DraftTree.from_parents(torch.cat([torch.zeros(1, dtype=torch.long), row]), parents, 1)
        n = draws + 1
        pp = p[None, :].expand(n, -1)
        qq = torch.zeros(n, q.shape[0], dtype=q.dtype)
        qq[0] = q
        accept = stochastic_verify.stochastic_multiround_plan(tree, pp, qq).accept_prob[1:].double()
        total += float(1 - torch.prod(1 - accept))
    return total / mc


def nucleus(q: torch.Tensor, top_p: float, keep: int) -> torch.Tensor:
    """``q [V]`` cut to its smallest most likely set of mass >= ``top_p`` (at least ``keep`` tokens), renormalised."""
    if top_p >= 1.0:
        return q
    values, order = q.sort(descending=True)
    inside = (values.cumsum(0) - values) < top_p  # a token is kept while the mass before it is below top_p
    inside[:keep] = True
    cut = torch.zeros_like(q)
    cut[order[inside]] = values[inside]
    return cut / cut.sum()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="eagle3")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--mc", type=int, default=64)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.5, 0.7, 0.85, 1.0, 1.2])
    parser.add_argument(
        "--q-top-ps", type=float, nargs="*", default=[], help="also each alpha with q cut to its nucleus of this mass"
    )
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    rows = record_roots(args.method, args.prompts, args.new_tokens, sampling)[: args.rows]
    gen = torch.Generator().manual_seed(0)
    ceiling = sum(float(p.double().topk(args.draws).values.sum()) for p, _ in rows) / len(rows)
    print(f"ceiling (mass of p's top {args.draws}): {ceiling:.3f}")
    for k in range(1, args.draws + 2):  # deterministic candidates accept with the p mass they cover (multi-round)
        topk = sum(float(p.double()[q.topk(k).indices].sum()) for p, q in rows) / len(rows)
        print(f"q's top {k} as deterministic candidates: {topk:.3f}")
    for alpha in args.alphas:
        for q_top_p in [1.0, *args.q_top_ps]:
            one = many = 0.0
            for p, q in rows:
                qa = torch.where(q > 0, q.double().clamp_min(1e-300) ** (1 / alpha), 0.0)
                qa = nucleus(qa / qa.sum(), q_top_p, args.draws).to(q.dtype)
                one += float(torch.minimum(p.double(), qa.double()).sum())
                many += root_acceptance(p, qa, args.draws, args.mc, gen)
            cut = "" if q_top_p == 1.0 else f", q cut to its top-p {q_top_p}"
            print(f"alpha={alpha:.2f}{cut}: one draw {one / len(rows):.3f}, {args.draws} draws {many / len(rows):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CPU fast path against the stock path, measured side by side in one run (SmolLM2-135M-Instruct, CPU).

    python benchmarks/fastpath.py [--dtype float32|bfloat16] [--context 120] [--repeats 7] [--prompts 8]
                                  [--new-tokens 64] [--threads 2] [--out results.json]

Copies of the model live in one process, all in ``--dtype``: ``stock`` (as loaded: MKL or oneDNN linears,
transformers' sdpa) and ``fast`` (``HFTarget(..., weights="auto")``: oneDNN-prepacked linears where that pays on this
CPU, GQA attention without key/value copies; in bfloat16 with row-invariant numerics). Where ``auto`` does not pack
every linear on this CPU, a third side ``packed`` (every linear packed) shows what it would give; in bfloat16 a side
``fast-var`` (``invariant=False``) shows what the row-invariant numerics cost. Printed:

1. The target forward curve ``T(n)`` for a chain of ``n`` tree tokens after ``--context`` tokens, ``n = 1..32``,
   all sides interleaved round by round (medians), and ``T(n) / T(1)`` for each (targets: fast ``n=8 <= 1.3``,
   ``n=16 <= 1.6``; Intel issue: float32 ``<= 1.25`` and ``<= 1.4``, bfloat16 ``n=16 <= 1.2``).
2. Our 1-token step (fast ``decode_one``) against transformers' own 1-token step (stock model, ``DynamicCache``),
   same prompt, interleaved (target <= 0.75); in bfloat16 also against transformers' float32 step (targets <= 0.8
   of its bfloat16 step, <= 0.6 of its float32 step).
3. Our vanilla loop (fast) against HF ``generate`` (stock model) at T=0 on the first ``--prompts`` MT-bench
   questions, same number of tokens (no EOS), interleaved per prompt (target >= 1.3); token agreement, and for any
   difference the stock model's top-2 logit gap at the first differing position (a near-tie: < 1e-2 for float32
   logits, at most two ulps for bfloat16 ones, as in ``specdec.bench.records.near_tie_threshold``).
4. The draft share of an EAGLE-3 cycle (shipped head, fast path, adaptive tree) on the same prompts (target <= 10 %).
5. Resident memory of a process holding the model on each path (separate subprocesses, same forwards), split into
   anonymous memory and pages of the memory-mapped weights file; in bfloat16 against the float32 ``auto`` path too
   (target <= 0.6).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from cycle_split import phase_split  # benchmarks/ is on sys.path when this script runs
from transformers import DynamicCache

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.generate import StopCondition, VanillaGenerator
from specdec.methods import MethodOptions, build_method
from specdec.models import DTYPES, load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.tree import DraftTree

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def chain(n: int, vocab: int, g: torch.Generator) -> DraftTree:
    return DraftTree.from_parents(torch.randint(0, vocab, (n,), generator=g), torch.arange(-1, n - 1), n - 1)


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


@torch.no_grad()
def forward_curve(targets: dict[str, HFTarget], context: int, repeats: int) -> dict[str, dict[int, float]]:
    g = torch.Generator().manual_seed(0)
    vocab = next(iter(targets.values())).vocab_size
    prompt = torch.randint(0, vocab, (context,), generator=g)
    trees = {n: chain(n, vocab, g) for n in SIZES}
    times = {k: {n: [] for n in SIZES} for k in targets}
    for t in targets.values():
        t.prefill(prompt)
    for round_ in range(repeats + 1):
        for name, t in targets.items():
            for n, tree in trees.items():
                t0 = time.perf_counter()
                t.forward_tree(tree)
                if round_:  # round 0 warms every shape up
                    times[name][n].append(time.perf_counter() - t0)
    return {k: {n: median_ms(v) for n, v in r.items()} for k, r in times.items()}


@torch.no_grad()
def one_token_steps(fast: HFTarget, hf_models: dict[str, object], context: int, repeats: int) -> dict[str, float]:
    """Our 1-token step against transformers' own on each of ``hf_models`` (name -> stock model), interleaved."""
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, fast.vocab_size, (context,), generator=g)
    fast.prefill(prompt)
    caches = {}
    for name, model in hf_models.items():
        caches[name] = DynamicCache(config=model.config)
        model(input_ids=prompt[None], use_cache=True, **{fast.layout.cache_kwarg: caches[name]})
    token = torch.tensor([[5]])
    times: dict[str, list[float]] = {"ours": [], **{name: [] for name in hf_models}}
    for round_ in range(3 * repeats + 1):
        t0 = time.perf_counter()
        fast.decode_one(token[0, 0])
        step = {"ours": time.perf_counter() - t0}
        fast.length = context  # the next step overwrites the same slot
        for name, model in hf_models.items():
            t0 = time.perf_counter()
            model(input_ids=token, use_cache=True, **{fast.layout.cache_kwarg: caches[name]})
            step[name] = time.perf_counter() - t0
            caches[name].crop(-1)  # drop the step just taken
        if round_:
            for name, dt in step.items():
                times[name].append(dt)
    out = {"ours_ms": median_ms(times["ours"])}
    for name in hf_models:
        out[f"hf_{name}_ms"] = median_ms(times[name])
        out[f"ratio_{name}"] = out["ours_ms"] / out[f"hf_{name}_ms"]
    return out


def top2_gap(model, ids: torch.Tensor, tokens: list[int], position: int) -> float:
    with torch.no_grad():
        seq = torch.cat([ids, torch.tensor(tokens[:position], dtype=torch.long)])
        logits = model(input_ids=seq[None]).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def vanilla_vs_generate(fast: HFTarget, stock_model, tokenizer, prompts, new_tokens: int) -> dict:
    sampling = SamplingParams()
    stop = StopCondition(max_new_tokens=new_tokens)
    config = copy.deepcopy(stock_model.generation_config)
    config.update(eos_token_id=None, do_sample=False, min_new_tokens=None, pad_token_id=0)
    ours, hf, rows = [], [], []
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        if i == 0:
            VanillaGenerator(fast).generate(ids, sampling, StopCondition(max_new_tokens=4))
            with torch.no_grad():
                stock_model.generate(ids[None], generation_config=config, max_new_tokens=4)
        pair = {}
        for side in ("ours", "hf") if i % 2 == 0 else ("hf", "ours"):
            t0 = time.perf_counter()
            if side == "ours":
                tokens = VanillaGenerator(fast).generate(ids, sampling, stop).tokens
            else:
                with torch.no_grad():
                    out = stock_model.generate(ids[None], generation_config=config, max_new_tokens=new_tokens)
                tokens = out[0, ids.shape[0] :].tolist()
            pair[side] = (tokens, len(tokens) / (time.perf_counter() - t0))
        ours.append(pair["ours"][1])
        hf.append(pair["hf"][1])
        a, b = pair["ours"][0], pair["hf"][0]
        diff = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        row = {"prompt": prompt.id, "ours_tok_s": ours[-1], "hf_tok_s": hf[-1], "same_tokens": a == b}
        if diff is not None:
            row["first_diff"] = diff
            row["stock_top2_gap"] = top2_gap(stock_model, ids, b, diff)
        rows.append(row)
        extra = "" if diff is None else f", first difference at {diff}, stock top-2 gap {row['stock_top2_gap']:.2e}"
        speeds = f"ours {ours[-1]:.1f} tok/s, HF generate {hf[-1]:.1f} tok/s"
        print(f"   {prompt.id}: {speeds}, same tokens: {a == b}{extra}")
    return {"ratio": sum(ours) / sum(hf), "prompts": rows}


def eagle3_draft_share(fast: HFTarget, tokenizer, prompts, new_tokens: int) -> dict:
    sampling = SamplingParams()
    gen = build_method("eagle3", fast, MethodOptions())
    r = phase_split(gen, [chat_ids(tokenizer, p) for p in prompts], sampling, new_tokens)
    return {"split": r["share"], "ms_per_cycle": r["ms_per_cycle"], "tau": r["tau"]}


def rss_probe(backend: str, context: int, dtype: str) -> None:
    """Subprocess body: load, run a prefill and 8 steps on ``backend``, print resident memory in MB.

    ``RssFile`` counts the touched pages of the memory-mapped safetensors file the weights were loaded from: clean
    page cache the kernel can drop, still mapped while any tensor of the file (the embedding) is alive. ``RssAnon`` is
    the process's own memory (the packed weights live there).
    """
    model, _ = load_smollm2(dtype=DTYPES[dtype])
    # "auto" transforms the loaded model in place (what the command line does); "auto-copy" is the library's default,
    # a transformed copy that shares the caller's tensors while the caller keeps its model
    weights, copy_mode = backend.removesuffix("-copy"), backend.endswith("-copy")
    invariant = False if weights == "stock" else "auto"  # the stock side is the model as loaded, on purpose
    target = HFTarget(
        model, max_len=context + 16, weights=weights, in_place=not copy_mode, invariant=invariant, static_shapes=False
    )
    with torch.no_grad():
        target.prefill(torch.arange(context) % target.vocab_size)
        for _ in range(8):
            target.decode_one(torch.tensor(5))
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    mb = {k: int(status[k].split()[0]) / 1024 for k in ("VmRSS", "RssAnon", "RssFile")}
    print(json.dumps({"backend": target.execution.label + ("-copy" if copy_mode else ""), **mb}))


def rss(context: int, dtype: str) -> dict:
    """Resident memory per path (``{probe: {label, VmRSS, RssAnon, RssFile}}`` for the probes ``stock``, ``auto``
    and ``auto-copy``); a bfloat16 run adds the float32 ``auto`` path as ``float32:auto``."""
    out = {}
    probes = [(dtype, b) for b in ("stock", "auto", "auto-copy")] + [("float32", "auto")] * (dtype != "float32")
    for probe_dtype, backend in probes:
        proc = subprocess.run(
            [sys.executable, __file__, "--rss-probe", backend, "--context", str(context), "--dtype", probe_dtype],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["label"] = row.pop("backend")
        out[backend if probe_dtype == dtype else f"float32:{backend}"] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--rss-probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.rss_probe:
        rss_probe(args.rss_probe, args.context, args.dtype)
        return 0
    stock_model, tokenizer = load_smollm2(dtype=DTYPES[args.dtype])
    eager = {"static_shapes": False}  # the eager fast path, even where a package is cached (specdec.backends.aot)
    fast = HFTarget(stock_model, max_len=1024, **eager)  # a transformed copy sharing the stock model's tensors
    sides = {"stock": HFTarget(stock_model, max_len=1024, weights="stock", invariant=False, **eager), "fast": fast}
    if fast.execution.weights != "packed":  # what packing every linear would give on this CPU
        sides["packed"] = HFTarget(stock_model, max_len=1024, weights="packed", **eager)
    if fast.execution.invariant:  # what the row-invariant numerics cost
        sides["fast-var"] = HFTarget(stock_model, max_len=1024, invariant=False, **eager)
    print(
        f"device=cpu threads={args.threads} torch={torch.__version__} cpu={cpu_name()} dtype={args.dtype} "
        f"fast: {fast.execution.describe()}, attention={fast.model.config._attn_implementation}"
    )
    report: dict = {
        "threads": args.threads,
        "context": args.context,
        "torch": torch.__version__,
        "dtype": args.dtype,
        "cpu": cpu_name(),
        "fast": fast.execution.describe(),
    }

    print(f"1) target forward T(n) after {args.context} tokens, chain of n nodes (median ms; ratio to n=1)")
    curve = forward_curve(sides, args.context, args.repeats)
    print("   n        " + " ".join(f"{n:>6}" for n in SIZES))
    for name, row in curve.items():
        print(f"   {name:8s} " + " ".join(f"{row[n]:6.1f}" for n in SIZES))
        print(f"   {'ratio':8s} " + " ".join(f"{row[n] / row[1]:6.2f}" for n in SIZES))
    fast_ratio = {n: curve["fast"][n] / curve["fast"][1] for n in SIZES}
    print(f"   fast T(8)/T(1) = {fast_ratio[8]:.2f} (target <= 1.3), T(16)/T(1) = {fast_ratio[16]:.2f} (target <= 1.6)")
    report["curve_ms"] = curve

    print("2) 1-token step: ours (fast) vs transformers' own (stock model, DynamicCache), same prompt")
    hf_models = {args.dtype: stock_model}
    if args.dtype != "float32":
        hf_models["float32"] = load_smollm2()[0]
    steps = one_token_steps(fast, hf_models, args.context, args.repeats)
    for name in hf_models:
        goal = {"float32": 0.75 if args.dtype == "float32" else 0.6}.get(name, 0.8)
        print(
            f"   ours {steps['ours_ms']:.1f} ms, HF {name} {steps[f'hf_{name}_ms']:.1f} ms, "
            f"ratio {steps[f'ratio_{name}']:.2f} (target <= {goal})"
        )
    del hf_models  # the float32 copy of a bfloat16 run is not needed further
    report["one_token_step"] = steps

    prompts = mtbench_prompts()[: args.prompts]
    print(f"3) vanilla loop (fast) vs HF generate (stock), T=0, {args.new_tokens} tokens, {len(prompts)} MT-bench")
    vg = vanilla_vs_generate(fast, stock_model, tokenizer, prompts, args.new_tokens)
    print(f"   ratio ours/HF generate = {vg['ratio']:.2f} (target >= 1.3)")
    report["vanilla_vs_hf_generate"] = vg

    print("4) EAGLE-3 cycle time split (shipped head, fast path, adaptive tree)")
    share = eagle3_draft_share(fast, tokenizer, prompts, args.new_tokens)
    split = " ".join(f"{k}={v:.1%}" for k, v in share["split"].items())
    print(f"   {split}; tau {share['tau']:.2f} (target: draft <= 10%)")
    report["eagle3_split"] = share

    print("5) resident memory, MB (separate processes, prefill + 8 steps; RssFile: pages of the mapped weights file)")
    mem = rss(args.context, args.dtype)
    for probe, row in mem.items():
        if probe in ("stock", "float32:auto"):
            continue
        name = row["label"]
        cells = ", ".join(
            f"{kind} {row[kind]:.0f} ({row[kind] / max(mem['stock'][kind], 1e-9):.2f}x stock)"
            for kind in ("VmRSS", "RssAnon", "RssFile")
        )
        print(f"   {name:16s} {cells}")
    print(
        "   stock            "
        + ", ".join(f"{kind} {mem['stock'][kind]:.0f}" for kind in ("VmRSS", "RssAnon", "RssFile"))
    )
    if "float32:auto" in mem:
        ratio = mem["auto"]["VmRSS"] / mem["float32:auto"]["VmRSS"]
        fp32 = mem["float32:auto"]["VmRSS"]
        print(f"   float32 auto VmRSS {fp32:.0f}; {args.dtype} auto / float32 auto: {ratio:.2f} (target <= 0.6)")
    report["rss_mb"] = mem
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

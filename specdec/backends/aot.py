"""Ahead-of-time packages: the static-shape forward compiled once per machine, loaded in seconds by every process.

On a CPU, ``torch.compile``'s frozen graphs are compiled again in every process (minutes per bucket for SmolLM2 on 2
cores, :mod:`specdec.backends.compiled`): the static path was the fastest one there (plain decoding 1.77x the eager
path) and still off by default. An AOTInductor package holds the same frozen forward, its GEMMs tuned on the CPU at
hand, as a shared library: exported once (``torch.export``), compiled once, cached under ``cache_dir()/aot/``, and
loaded by later processes in seconds (``static_shapes="aot"``; :mod:`specdec.backends.choice`).

One package per model serves every forward the static runner makes: the number of rows ``n`` (``1 ..``
:data:`MAX_ROWS`) and the cache's capacity ``C`` are dynamic dimensions, so trees need no padding to a bucket and one
package serves every ``max_len``. Several sequences at once (a batched call, :mod:`specdec.rows`) run on a second
package of the same forward with the batch ``B`` (``2 ..`` :data:`MAX_BATCH`) dynamic too, built (minutes) at the
first batched forward that needs it and named as the first with ``-batch``: exported with ``B`` dynamic, one
sequence's forwards ran 1.00-1.02x as long as on the package exported at ``B = 1`` (their logits bitwise equal at
1-16 rows; SmolLM2, Xeon family 6 model 207, one process, 2026-12-02), so one sequence keeps its own package.

The package's function (:class:`AotStep`) takes what :class:`~specdec.runner.ModelRunner`'s static forward takes
and writes the cache in place:

* ``ids``, ``positions``: ``[B, n]`` long; ``mask``: the layout's mask over the whole capacity, ``[B, 1, n, C]`` (or
  its dict of them for hybrid layouts); ``write_pos``: a 0-d long tensor, the slot of the first row (every sequence's:
  a batch shares one clock);
* ``keys``, ``values``: every layer's ``[B, H_kv, C, D]`` cache tensors (transformers' ``StaticLayer`` s);
* returns the logits ``[B, n, V]`` and the hidden states (embeddings, then every layer's output) ``[B, n, d]``.

Contract (exactness: a package is never run for another model): the file name holds a digest of everything that
decides the compiled code and its constants: the model's weights (every tensor's bytes), its config, dtype and
attention implementation (and whether the package runs it on the few-row kernel: :func:`package_attention`), which
linears run on the skinny kernel (:mod:`specdec.backends.skinny`) and which on their exact block codes, the machine (CPU
model and flags, torch version, thread count: :func:`~specdec.backends.kernel_times.machine_key`), transformers'
version and :data:`FORMAT`. A package that fails to build or load raises :class:`PackageError`; the runner then warns
once and runs the same static forward eagerly (:func:`~specdec.backends.compiled.run_compiled`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from specdec.backends.compiled import PackageError, cpu_options
from specdec.backends.gqa import GQA_NAMES, GQA_SKINNY, set_attention, use_gqa_attention
from specdec.backends.kernels import plain_linear
from specdec.backends.measured import machine_key
from specdec.backends.skinny import coded_names, package_options, skinny_names, uses_skinny
from specdec.kvcache import PositionCache

__all__ = [
    "FORMAT",
    "MAX_BATCH",
    "MAX_ROWS",
    "AotForward",
    "AotStep",
    "PackageError",
    "cached_package",
    "package_attention",
    "package_attention_set",
    "package_path",
    "packages",
]

#: The environment switch that hides cached packages from ``static_shapes="auto"`` (:func:`cached_package`).
PACKAGES_ENV = "SPECDEC_PACKAGES"
#: Bump when :class:`AotStep`'s inputs or outputs change: older packages are then never found.
FORMAT = 1
#: The most rows a package's forward takes per sequence (the adaptive budget's largest tree, as the largest bucket).
MAX_ROWS = 64
#: The most sequences one forward of the batch package takes (a batched call's rows, :mod:`specdec.rows`).
MAX_BATCH = 64
#: Batch (the batch package's), rows and capacity of the example a package is exported from (not 0 or 1: torch.export
#: specializes those).
_EXAMPLE_BATCH, _EXAMPLE_ROWS, _EXAMPLE_CAPACITY = 2, 4, 16

log = logging.getLogger(__name__)


class AotStep(nn.Module):
    """The static forward with the cache's tensors as inputs (the module docstring's contract)."""

    def __init__(self, model: nn.Module, cache_kwarg: str) -> None:
        super().__init__()
        self.model, self.cache_kwarg = model, cache_kwarg

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: Any,
        write_pos: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
    ) -> tuple[torch.Tensor, ...]:
        cache = PositionCache(len(keys), keys[0].shape[2], static=True)
        for layer, k, v in zip(cache.layers, keys, values, strict=True):
            layer.lazy_initialization(k[:, :, :1], v[:, :, :1])  # sets the layer's dtype, device and flags
            layer.keys, layer.values = k, v
            layer.cumulative_length = write_pos.clone()  # StaticLayer advances it in place: a private copy
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            output_hidden_states=True,
            **{self.cache_kwarg: cache},
        )
        return (out.logits, *out.hidden_states)


def _model_digest(model: nn.Module) -> str:
    """sha256 over the model's config, dtype, attention implementation and every tensor's name, shape and bytes."""
    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    digest.update((config.to_json_string() if config is not None else type(model).__name__).encode())
    attention = str(getattr(config, "_attn_implementation", ""))
    digest.update(("sdpa" if attention in GQA_NAMES else attention).encode())  # as given: apply's switch not seen
    if package_attention(model):  # the few-row kernel's C shim in place of SDPA: another compiled graph
        digest.update(b"specdec::skinny_attention")
    if skinny := skinny_names(model):  # its linears call the skinny kernel: another package than the stock one
        digest.update(b"specdec::skinny_linear")
        if any(plain_linear(m) for m in model.modules()):  # some linears, not all (a measured choice): which ones
            digest.update(",".join(skinny).encode())
    if coded := coded_names(model):  # on their exact codes (derived from the weights hashed below): which ones
        digest.update(b"specdec::skinny_linear_q:" + ",".join(coded).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:20]


def _machine_digest(dtype: torch.dtype) -> str:
    key = {**machine_key(dtype), "transformers": transformers.__version__, "format": FORMAT, "options": cpu_options()}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def package_attention(model: nn.Module) -> bool:
    """Whether ``model``'s package runs its attention on the few-row kernel (``specdec::skinny_attention``, through
    its C shim) instead of SDPA: where its linears run on the skinny kernel (a stock package stays stock) and, for a
    model as its caller gave it (``sdpa`` attention), where the few-row kernel measured faster than SDPA on this CPU
    or was asked for (:func:`~specdec.backends.attention_choice.skinny_attention_fits`); a model already prepared
    answers by the attention it runs (the few-row function or another), whatever the environment says now, so the
    package's name (which holds the answer) is the same before and after :func:`~specdec.backends.choice.apply`
    switches the attention. Another attention (``eager``) stays as it is: no.

    Why: inside SmolLM2's package SDPA took 3.8 ms of a 21.7 ms 1-token forward and 6.8 of 35 ms for 8 rows (kernel
    profile, Xeon family 6 model 207, 2026-12-01); the package with the few-row kernel ran forwards of 1-16 rows in
    0.81-0.92x the time (one process)."""
    from specdec.backends.attention_choice import skinny_attention_fits

    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if not uses_skinny(model) or attention not in ("sdpa", *GQA_NAMES):
        return False
    return attention == GQA_SKINNY or (attention == "sdpa" and skinny_attention_fits(model)[0])


def package_attention_set(model: nn.Module) -> str:
    """Switch ``model`` (as its caller gave it) to the attention its package runs, :func:`package_attention`'s answer
    (decided once, so the name and the compiled graph agree), SDPA without key/value copies otherwise; returns the
    attention implementation now in force."""
    few = package_attention(model)
    attention = use_gqa_attention(model, skinny=False)
    return GQA_SKINNY if few and set_attention(model, GQA_SKINNY) else attention


def package_path(model: nn.Module, batch: bool = False) -> Path:
    """Where ``model``'s package (or its ``batch`` package) lives on this machine (the module docstring's key). Hashes
    the weights (~0.4 s per 500 MB) once per model object and state: a tensor replaced or changed in place is hashed
    again, a config change alone is not (the static preparation switches the attention function after naming the
    package from the model as the caller gave it, :func:`specdec.backends.choice.apply`)."""
    from specdec.models import cache_dir

    dtype = next(model.parameters()).dtype
    state = model.state_dict()
    seen = tuple((t.data_ptr(), t._version) for t in state.values())  # an in-place change bumps a tensor's version
    seen += (
        tuple(skinny_names(model)),
        tuple(coded_names(model)),
        package_attention(model),
    )  # swapped linears keep their tensors: other packages; the attention's choice may change with the environment
    memo = getattr(model, "_specdec_aot_name", None)
    if memo is None or memo[0] != seen:
        memo = (seen, f"{_machine_digest(dtype)}-{_model_digest(model)}.pt2")
        model._specdec_aot_name = memo
    name = memo[1]
    return cache_dir() / "aot" / (name.removesuffix(".pt2") + "-batch.pt2" if batch else name)


def cached_package(model: nn.Module) -> Path | None:
    """``model``'s package if one is on disk for this machine, else None (cheap where no package of this machine is
    cached: the weights are hashed only then). ``SPECDEC_PACKAGES=off`` hides every package from this lookup (what
    ``static_shapes="auto"`` consults; the test suite runs so, whatever a machine has cached); ``"on"`` (default)."""
    from specdec.models import cache_dir

    switch = os.environ.get(PACKAGES_ENV, "on")
    if switch not in ("on", "off"):
        raise ValueError(f"{PACKAGES_ENV} must be 'on' or 'off', got {switch!r}")
    if switch == "off":
        return None

    folder = cache_dir() / "aot"
    if not any(folder.glob(f"{_machine_digest(next(model.parameters()).dtype)}-*.pt2")):
        return None
    path = package_path(model)
    return path if path.exists() else None


def packages() -> list[dict]:
    """Every package cached under ``cache_dir()/aot/``: its path, size in bytes, whether it was built for this
    machine (its name's machine digest, any dtype), and what its build recorded (model, dtype, parameters, CPU,
    torch, build seconds; empty for a package without that record)."""
    from specdec.models import cache_dir

    ours = {_machine_digest(dtype) for dtype in (torch.float32, torch.bfloat16, torch.float16)}
    found = []
    for path in sorted((cache_dir() / "aot").glob("*.pt2")):
        if path.name.endswith(".partial.pt2"):
            continue
        about = path.with_suffix(".json")
        record = json.loads(about.read_text()) if about.exists() else {}
        this = path.name.split("-")[0] in ours
        found.append({"path": str(path), "bytes": path.stat().st_size, "this_machine": this, **record})
    return found


def _example(keys: list[torch.Tensor], values: list[torch.Tensor], mask_of: Any, batch: bool) -> tuple:
    """Inputs of :class:`AotStep` at the example's sizes (one sequence or a ``batch``), shaped like ``keys`` and
    ``values`` (every layer's cache tensors)."""
    n, capacity = _EXAMPLE_ROWS, _EXAMPLE_CAPACITY
    b = _EXAMPLE_BATCH if batch else 1
    device = keys[0].device
    ids = torch.zeros(b, n, dtype=torch.long, device=device)
    positions = torch.arange(n, device=device)
    allowed = torch.ones(n, capacity, dtype=torch.bool, device=device).tril()  # row i sees slots 0 .. i
    one = mask_of(allowed, torch.arange(capacity, device=device), positions)  # [1, 1, n, C] (or a dict of them)
    mask = torch.utils._pytree.tree_map(lambda m: m.expand(b, -1, -1, -1).contiguous(), one)

    def room(t: torch.Tensor) -> torch.Tensor:
        return t.new_zeros(b, t.shape[1], capacity, t.shape[3])

    return (
        ids,
        positions.expand(b, -1).contiguous(),
        mask,
        torch.tensor(0, device=device),
        [room(k) for k in keys],
        [room(v) for v in values],
    )


def build_package(
    model: nn.Module,
    cache_kwarg: str,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    mask_of: Any,
    path: Path,
    batch: bool = False,
) -> None:
    """Export :class:`AotStep` over ``model`` with dynamic rows and capacity (and batch, for the ``batch`` package) and
    compile it into ``path`` (minutes for a 100M-parameter model on 2 cores; written to a temporary name first, so a
    killed build leaves no package)."""
    from torch.export import Dim

    rows, capacity = Dim("rows", min=1, max=MAX_ROWS), Dim("capacity", min=2)
    sequences = {0: Dim("batch", min=1, max=MAX_BATCH)} if batch else {}
    example = _example(keys, values, mask_of, batch)
    layers = len(example[4])
    kv = [{**sequences, 2: capacity}] * layers
    mask = torch.utils._pytree.tree_map(lambda _: {**sequences, 2: rows, 3: capacity}, example[2])
    shapes = ({**sequences, 1: rows}, {**sequences, 1: rows}, mask, None, kv, kv)
    start = time.perf_counter()
    what = "batch package" if batch else "package"
    log.warning("specdec: compiling this model's ahead-of-time %s once for this machine (minutes): %s", what, path)
    try:
        with torch.no_grad():
            program = torch.export.export(AotStep(model, cache_kwarg), example, dynamic_shapes=shapes, strict=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.pt2")
        options = {**cpu_options(), **(package_options() if uses_skinny(model) else {})}  # the kernels' C shims
        torch._inductor.aoti_compile_and_package(program, package_path=str(partial), inductor_configs=options)
        partial.rename(path)
    except Exception as error:  # export or inductor refusing the model: the runner falls back, with this reason
        raise PackageError(f"could not build the ahead-of-time package ({type(error).__name__}: {error})") from error
    seconds = time.perf_counter() - start
    log.warning("specdec: package built in %.0f s", seconds)
    config = getattr(model, "config", None)
    about = {
        "model": str(getattr(config, "_name_or_path", "") or type(model).__name__),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "parameters": sum(p.numel() for p in model.parameters()),
        "cpu": machine_key(next(model.parameters()).dtype)["cpu"],
        "torch": torch.__version__,
        "built_seconds": round(seconds, 1),
        "batch": batch,
    }
    path.with_suffix(".json").write_text(json.dumps(about, indent=1))  # for `specdec doctor` (packages())


class AotForward:
    """The static runner's compiled forward served by ``model``'s package (built on first use if missing).

    Called like the model (the runner's keyword inputs: ``input_ids``, ``position_ids``, ``attention_mask`` and the
    static :class:`~specdec.kvcache.PositionCache` under ``cache_kwarg``); returns a ``CausalLMOutputWithPast`` with
    the logits of every row and every hidden state.
    """

    def __init__(self, model: nn.Module, cache_kwarg: str, mask_of: Any) -> None:
        self.model, self.cache_kwarg, self.mask_of = model, cache_kwarg, mask_of
        self.package: Any = None  # one sequence's
        self.batched: Any = None  # several sequences' (the module docstring), loaded at the first batched forward

    def load(self, keys: list[torch.Tensor], values: list[torch.Tensor], batch: bool = False) -> None:
        """Load the package (or the ``batch`` package), building it first where this machine has none (for caches
        shaped like ``keys`` and ``values``); :class:`PackageError` if impossible."""
        path = package_path(self.model, batch)
        if not path.exists():
            build_package(self.model, self.cache_kwarg, keys, values, self.mask_of, path, batch)
        try:
            loaded = torch._inductor.aoti_load_package(str(path))
        except Exception as error:  # set aside, so "auto" no longer finds it and "aot" builds it again
            path.rename(path.with_suffix(".broken"))
            raise PackageError(f"could not load the ahead-of-time package {path} ({error}); moved aside") from error
        if batch:
            self.batched = loaded
        else:
            self.package = loaded

    def ensure(self, keys: list[torch.Tensor], values: list[torch.Tensor], batch: bool) -> None:
        """The package (or the ``batch`` package) loaded, built first where missing (:meth:`load`)."""
        if (self.batched if batch else self.package) is None:
            self.load(keys, values, batch)

    def __call__(self, **inputs: Any) -> CausalLMOutputWithPast:
        layers = inputs[self.cache_kwarg].layers  # the runner sends at most MAX_ROWS rows here (ModelRunner.forward)
        return self.step(
            inputs["input_ids"],
            inputs["position_ids"],
            inputs["attention_mask"],
            layers[0].cumulative_length,
            [layer.keys for layer in layers],
            [layer.values for layer in layers],
        )

    def step(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: Any,
        write_pos: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
    ) -> CausalLMOutputWithPast:
        """One forward of ``B`` sequences, its inputs as the module docstring says (``keys`` and ``values``:
        contiguous ``[B, H_kv, C, D]``, written in place at ``write_pos``), on the package (``B = 1``) or the batch
        package (each loaded, or built, at its first forward: :meth:`load`); every row's logits and hidden states
        (embeddings, then every layer's output)."""
        batch = ids.shape[0] > 1
        self.ensure(keys, values, batch)
        out = (self.batched if batch else self.package)(ids, positions, mask, write_pos, keys, values)
        return CausalLMOutputWithPast(logits=out[0], hidden_states=tuple(out[1:]))

"""Can *our* static forward go through torch.export and AOTInductor, writing the caller's cache tensors in place?

    python docs/results/2026-11-28-draft-graphs-zen3/aoti_ours.py

A tiny random Llama (2 layers), one bucket of 4 rows: a prompt of 5 tokens is prefilled eagerly into a static-shape
target's ``PositionCache``; then a wrapper takes what the runner's static forward takes (ids, positions, the
full-capacity mask of ``ModelRunner._static_inputs``, the write position, every layer's key and value tensors),
builds a ``PositionCache`` over those tensors and calls the model. Exported (``strict=False``), compiled with
freezing into a package, loaded and run on clones of the cache: prints the largest logit difference to the same
wrapper run eagerly, and whether the package wrote the clones in place as the eager run wrote its own.
"""

import time

import torch
from torch import nn

from specdec.kvcache import PositionCache
from specdec.models import tiny_llama
from specdec.target import HFTarget

CAPACITY, LAYERS = 32, 2
model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=LAYERS, seed=3).eval()
target = HFTarget(model, max_len=CAPACITY, static_shapes=True, buckets=(4,), weights="stock")
runner = target.runner


class Step(nn.Module):
    """The static forward with the cache's tensors as inputs (written in place)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, positions, mask, write_pos, keys, values):
        cache = PositionCache(LAYERS, CAPACITY, static=True)
        for i, layer in enumerate(cache.layers):
            layer.lazy_initialization(keys[i][:, :, :1], values[i][:, :, :1])
            layer.keys, layer.values = keys[i], values[i]
            layer.cumulative_length = write_pos.clone()  # StaticLayer adds to it in place
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        )
        return out.logits


target.prefill(torch.arange(5) % 64)
keys = [layer.keys for layer in runner.cache.layers]
values = [layer.values for layer in runner.cache.layers]
ids, positions, mask = runner._static_inputs(torch.tensor([7, 8, 9]), torch.tensor([5, 6, 7]), 5, None, None, True)
args = (ids[None], positions[None], mask, torch.tensor(5), [k.clone() for k in keys], [v.clone() for v in values])
eager_keys = [k.clone() for k in args[4]]
with torch.no_grad():
    eager_logits = Step(model)(*args[:4], eager_keys, [v.clone() for v in args[5]])
start = time.perf_counter()
program = torch.export.export(Step(model), args, strict=False)
print(f"export {time.perf_counter() - start:.1f} s")
options = {"freezing": True}
path = torch._inductor.aoti_compile_and_package(program, package_path="/tmp/ours.pt2", inductor_configs=options)
package = torch._inductor.aoti_load_package(path)
package_keys, package_values = [k.clone() for k in args[4]], [v.clone() for v in args[5]]
logits = package(*args[:4], package_keys, package_values)
logits = logits[0] if isinstance(logits, (list, tuple)) else logits
print("largest logit difference to eager:", (logits - eager_logits).abs().max().item())
same = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(package_keys, eager_keys, strict=True))
print("cache written in place like eager's:", same, "| written at all:", not torch.equal(package_keys[0], args[4][0]))

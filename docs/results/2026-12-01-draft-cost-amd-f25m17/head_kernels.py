import statistics

import torch

from specdec.backends.kernel_times import sides, time_shape

torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
# EAGLE-3 head (SmolLM2): fc 3*576->576, qkv fused 576->960, o 576->576, gate/up fused 576->3072,
# down 1536->576, lm_head 576->16384
for shape in [
    (1728, 576, False),
    (576, 960, False),
    (576, 576, False),
    (576, 3072, False),
    (1536, 576, False),
    (576, 16384, False),
]:
    mods = sides(shape, torch.float32, g, kernels=("int8", "w8", "packed", "stock"))
    t = time_shape(mods, rows=(1, 2, 4))
    print(
        shape,
        "  ".join(f"{k}: " + "/".join(f"{1e6 * statistics.median(v):.0f}" for v in by.values()) for k, by in t.items()),
        "us (1/2/4 rows)",
    )

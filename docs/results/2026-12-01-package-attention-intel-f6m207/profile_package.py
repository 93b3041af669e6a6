"""Where SmolLM2's package spends a forward of 1 and of 8 rows: inductor's kernel profile under torch.profiler.

    mkdir -p /tmp/profcache && for d in ext kernels budget smollm2-135m-instruct; do
        ln -sfn ~/.cache/specdec/$d /tmp/profcache/$d; done          # a cache of its own for the profiled package
    SPECDEC_CACHE=/tmp/profcache TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1 [SPECDEC_ATTENTION=sdpa] \\
        python docs/results/2026-12-01-package-attention-intel-f6m207/profile_package.py

The kernel profile records every generated C++ kernel (``graph_0_cpp_fused_...``) besides the ops the package
calls; it is not part of the package's name, so the profiled package is built into a cache folder of its own (the
machine's kernel tables and library linked in). After a 128-token prompt, 3 untimed and 10 profiled forwards per row
count; the table's totals are for the 10.
"""

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget

torch.set_num_threads(2)
model, _ = load_smollm2()
target = HFTarget(model, static_shapes="aot", max_len=512)
print(target.execution.describe())
ids = torch.arange(200) % 1000 + 100
runner = target.runner
runner.forward(ids[:128], torch.arange(128), 0)
for n in (1, 8):
    for _ in range(3):
        runner.forward(ids[128 : 128 + n], torch.arange(128, 128 + n), 128)
    with torch.profiler.profile() as profile:
        for _ in range(10):
            runner.forward(ids[128 : 128 + n], torch.arange(128, 128 + n), 128)
    print(f"==== rows {n}")
    print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=45, max_name_column_width=70))

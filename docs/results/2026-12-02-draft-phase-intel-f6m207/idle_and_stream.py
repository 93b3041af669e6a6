"""What makes small ops slow right after other work on this VM, one process (issues 45 and 47).

    python docs/results/2026-12-02-draft-phase-intel-f6m207/idle_and_stream.py   # idle_and_stream.txt

A bundle of a draft phase's kind of small ATen ops (an RMS norm, a softmax's top-k, a 1536 x 576 linear of two rows,
a sort, a cumsum, ...), timed warm (right after itself) and right after: 100 MB read by both threads with ordinary
prefetches, the same with non-temporal ones (``stream_kernel.cpp``: do weights streamed without filling the caches
leave the bundle warm?), an 8 ms sleep, 8 ms of a busy Python loop (the OpenMP worker idle), and both threads reading
a 1 MB buffer 100 times (busy, no traffic beyond the L2). Medians of 30, interleaved. First, single small ops in a
warm loop of 10,000 calls (this VM's per-op floor).
"""

import statistics
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

HERE = Path(__file__).parent


def main() -> None:
    load(
        "stream_proto",
        [str(HERE / "stream_kernel.cpp")],
        extra_cflags=["-O3", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        is_python_module=False,
    )
    torch.set_num_threads(2)
    stream = torch.ops.stream_proto.stream
    big = torch.randint(0, 255, (100 << 20,), dtype=torch.uint8)
    small = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8)
    w, x, weight, idx = torch.randn(576), torch.randn(2, 576), torch.randn(1536, 576), torch.tensor([0, 1])

    def bundle() -> torch.Tensor:
        y = torch.rms_norm(x, (576,), w, 1e-5) * 2 + 1
        z = torch.cat((y, x), 1)
        top = torch.softmax(z, -1).topk(4, -1)
        u = torch.sort(torch.nn.functional.linear(y, weight)[0, :64])[0].cumsum(0)
        v = torch.where(u > 0, u, -u).index_select(0, idx)
        return torch.arange(10).sum() + v.sum() + top.values.sum() + z.mean()

    def busy() -> None:
        start = time.perf_counter()
        while time.perf_counter() - start < 0.008:
            pass

    before = {
        "warm": lambda: None,
        "after 100 MB, ordinary prefetch": lambda: stream(big, 0),
        "after 100 MB, non-temporal": lambda: stream(big, 1),
        "after an 8 ms sleep": lambda: time.sleep(0.008),
        "after 8 ms of busy Python": busy,
        "after both threads on 1 MB": lambda: [stream(small, 0) for _ in range(100)],
    }
    singles = {
        "add": lambda: x + 1,
        "rms_norm [2, 576]": lambda: torch.rms_norm(x, (576,), w, 1e-5),
        "cat": lambda: torch.cat((x, x), 1),
        "arange": lambda: torch.arange(10),
    }
    for name, op in singles.items():
        for _ in range(1000):
            op()
        start = time.perf_counter()
        for _ in range(10000):
            op()
        print(f"warm loop, {name}: {(time.perf_counter() - start) * 1e2:.1f} us a call")
    for _ in range(50):
        bundle()
    times = {name: [] for name in before}
    for _ in range(30):
        for name, first in before.items():
            first()
            start = time.perf_counter()
            bundle()
            times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        print(f"{name:34s} {statistics.median(t) * 1e6:7.1f} us")
    for mode, name in ((0, "ordinary"), (1, "non-temporal")):
        start = time.perf_counter()
        stream(big, mode)
        print(f"100 MB read, {name} prefetch: {(time.perf_counter() - start) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

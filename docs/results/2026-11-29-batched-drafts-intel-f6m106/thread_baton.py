"""Why the rows' tree growing is not interleaved with threads: a second Python thread that runs small torch ops
between the main thread's GEMMs, one thread at a time (a baton: the way rows' policies would take turns to meet at one
head forward), against the same ops on the main thread. Each thread's ops get their own OpenMP team, whose workers spin
while the other thread runs.

    .venv/bin/python docs/results/2026-11-29-batched-drafts-intel-f6m106/thread_baton.py
"""

import threading
import time

import torch

from specdec.backends.cpu import cpu_name

torch.set_num_threads(2)
x, w, y = torch.randn(8, 576), torch.randn(16384, 576), torch.randn(4, 16384)


def small():
    return torch.softmax(y * 1.1, -1).topk(8, -1)  # a policy's kind of op: a row's draft distribution and top-k


def big():
    return torch.nn.functional.linear(x, w)  # a head's kind of op: the draft lm_head over 8 rows


N = 300
go, back = threading.Semaphore(0), threading.Semaphore(0)
done = False


def worker():
    while True:
        go.acquire()
        if done:
            return
        small()
        back.release()


thread = threading.Thread(target=worker)
thread.start()
print(f"cpu={cpu_name()} threads=2, {N} iterations of (GEMM [8 x 576] x [576 x 16384], softmax + top-k [4 x 16384])")
for round_ in range(3):
    for _ in range(20):
        big()
        small()
    t = time.perf_counter()
    for _ in range(N):
        big()
        small()
    same = time.perf_counter() - t
    for _ in range(20):
        big()
        go.release()
        back.acquire()
    t = time.perf_counter()
    for _ in range(N):
        big()
        go.release()
        back.acquire()
    baton = time.perf_counter() - t
    print(
        f"round {round_}: same thread {1e3 * same / N:.3f} ms per iteration, baton thread {1e3 * baton / N:.3f} ms "
        f"({baton / same:.2f}x)"
    )
done = True
go.release()
thread.join()

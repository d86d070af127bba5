"""The Python package's cost per call over the C API's (SPEC §9, issue
target: under 10 microseconds), for a decode-sized call of Qwen3-Next's
gated attention layer (B=1, 16 query heads, 2 kv heads, head dim 256, one
query row, 64 keys): the same entry, inputs and output buffers through

  * the C API: attn_run in a C++ loop (the native module's
    run_microseconds, no Python between calls);
  * m[entry](..., out=bufs): the package with caller buffers;
  * m[entry](...): the package allocating its outputs;
  * the same with torch CPU tensors (when torch is installed).

Medians of 7 rounds of 2000 calls each, all in one run.

    PYTHONPATH=build/python python3 bench/python-overhead.py
"""
import os
import statistics
import sys
import time

import numpy as np

import attn

here = os.path.dirname(os.path.abspath(__file__))
m = attn.compile(os.path.join(here, os.pardir, "examples", "gated-attention.json"),
                 threads=1)
entry = m.entries[0]
sig = m.signature(entry)
H, HKV, D = sig.inputs[0].shape[1], sig.inputs[1].shape[1], sig.inputs[0].shape[3]
rng = np.random.default_rng(0)
inputs = [rng.standard_normal(s).astype(np.float32)
          for s in ((1, H, 1, D), (1, HKV, 64, D), (1, HKV, 64, D), (1, H, 1, D))]
outputs = [np.empty((1, H, 1, D), np.float32)]
call = m[entry]
ROUNDS, CALLS = 7, 2000


def per_call(fn):
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        times.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(times)


c_api = statistics.median(
    m._native.run_microseconds(entry, inputs, outputs, CALLS) for _ in range(ROUNDS))
with_out = per_call(lambda: call(*inputs, out=outputs))
allocating = per_call(lambda: call(*inputs))
rows = [("C API (attn_run in C++)", c_api),
        ("Python, out=", with_out),
        ("Python, outputs allocated", allocating)]
try:
    import torch
    tensors = [torch.from_numpy(x) for x in inputs]
    torch_out = [torch.from_numpy(outputs[0])]
    rows.append(("Python, torch tensors, out=",
                 per_call(lambda: call(*tensors, out=torch_out))))
except ImportError:
    pass

print(f"{entry}: B=1 H={H} Hkv={HKV} D={D} Lq=1 Lk=64, 1 thread, "
      f"median of {ROUNDS} x {CALLS} calls")
print(f"{'path':32s} {'us/call':>8s} {'over C API':>11s}")
for name, us in rows:
    print(f"{name:32s} {us:8.2f} {us - c_api:11.2f}")

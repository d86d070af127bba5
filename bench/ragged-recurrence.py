"""A ragged batch through a Gated DeltaNet layer of Qwen3-Next's shape (16
key heads, 32 value heads, dims 128, qk_l2norm, rmsnorm-silu gate) on the
CPU (SPEC §8, issue: serving layouts): one long prefill and many short
sequences packed token-major in one call, their states in a pool updated in
place, beside the same work without the ragged layout, all in one run:

  * ragged: one call over `--long` + `--short` x `--count` tokens;
  * padded: the dense entry on [count + 1, H, long] (every sequence padded
    to the longest, what a batch of equal lengths needs);
  * separate: one dense call per sequence (the long one, then each short
    one), the state carried by the caller.

The target is ragged at most the separate calls' time (both do the same
arithmetic) and well under the padded call's. Medians of 5 runs after a
warm-up, milliseconds.

    PYTHONPATH=build/python python3 bench/ragged-recurrence.py [--threads N]
"""
import argparse
import statistics
import time

import numpy as np

import attn

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--long", type=int, default=2048)
parser.add_argument("--short", type=int, default=128)
parser.add_argument("--count", type=int, default=15)
args = parser.parse_args()

HK, HV, DK, DV = 16, 32, 128, 128
layer = {"name": "gdn", "type": "linear_attention", "rule": "gated_delta",
         "num_k_heads": HK, "num_v_heads": HV, "k_dim": DK, "v_dim": DV,
         "qk_l2norm": True, "output_gate": "rmsnorm_silu"}
dense = attn.compile({"model": "gdn", "layers": [layer]}, threads=args.threads)
ragged = attn.compile({"model": "gdn-ragged", "layers": [
    dict(layer, layout={"ragged": True})]}, threads=args.threads)

lengths = [args.long] + [args.short] * args.count
B, T = len(lengths), sum(lengths)
rng = np.random.default_rng(0)
f = lambda *s: rng.standard_normal(s).astype(np.float32)
q, k, v, z = f(T, HK, DK), f(T, HK, DK), f(T, HV, DV), f(T, HV, DV)
g = -rng.uniform(0.0, 1.0, (T, HV)).astype(np.float32)
beta = rng.uniform(0.0, 1.0, (T, HV)).astype(np.float32)
w = f(DV)
pool = f(B, HV, DK, DV) * 0.1
slots = np.arange(B, dtype=np.int32)
cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def median_ms(fn, runs=5):
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def per_sequence(x, b):
    """Sequence b of a packed [T, H(, F)] array as [1, H, L(, F)]."""
    return np.ascontiguousarray(np.moveaxis(x[cu[b]:cu[b + 1]], 0, 1)[None])


ragged_ms = median_ms(lambda: ragged["gdn"](q, k, v, g, beta, pool, slots, z,
                                            w, cu))

sequences = [[per_sequence(x, b) for x in (q, k, v, g, beta, z)]
             for b in range(B)]
states = [pool[b:b + 1].copy() for b in range(B)]


def separate():
    for b in range(B):
        qb, kb, vb, gb, bb, zb = sequences[b]
        dense["gdn"](qb, kb, vb, gb, bb, states[b], zb, w)


separate_ms = median_ms(separate)

L = args.long


def padded_inputs():
    """Every sequence padded to the longest with zero steps."""
    out = []
    for x in (q, k, v, g, beta, z):
        shape = (B, x.shape[1], L) + x.shape[2:]
        y = np.zeros(shape, np.float32)
        for b in range(B):
            y[b, :, :lengths[b]] = per_sequence(x, b)[0]
        out.append(y)
    return out


qp, kp, vp, gp, bp, zp = padded_inputs()
padded_ms = median_ms(lambda: dense["gdn"](qp, kp, vp, gp, bp, pool, zp, w))

print(f"Gated DeltaNet, Hk={HK} Hv={HV} Dk=Dv={DK}, gate; one sequence of "
      f"{args.long} + {args.count} of {args.short} tokens, "
      f"threads={args.threads or 'all'}")
print(f"ragged (one call)       {ragged_ms:9.2f} ms")
print(f"separate (one per seq.) {separate_ms:9.2f} ms   "
      f"ragged/separate = {ragged_ms / separate_ms:.2f}x")
print(f"padded to {L:<5d}         {padded_ms:9.2f} ms   "
      f"ragged/padded = {ragged_ms / padded_ms:.2f}x")

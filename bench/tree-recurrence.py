"""A draft tree through a Gated DeltaNet layer of Qwen3-Next's shape (16 key
heads, 32 value heads, dims 128, qk_l2norm, rmsnorm-silu gate; B = 1) on
the CPU, beside the two ways to get the same states without the tree form,
all in one run (SPEC §10, issue: trees through linear recurrences):

  * the .tree entry on a random 64-node tree (one chunk of 64 nodes);
  * the layer's prefill of a 64-token chain (the chunked form), the target
    being at most 2x its time;
  * 64 decode steps (L = 1 calls, the state carried), what verifying a tree
    node by node would cost at least.

Medians of 9 runs after a warm-up, milliseconds.

    PYTHONPATH=build/python python3 bench/tree-recurrence.py [--threads N]
"""
import argparse
import statistics
import time

import numpy as np

import attn

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--nodes", type=int, default=64)
args = parser.parse_args()

HK, HV, DK, DV, T = 16, 32, 128, 128, args.nodes
m = attn.compile({"model": "gdn-tree", "layers": [
    {"name": "gdn", "type": "linear_attention", "rule": "gated_delta",
     "num_k_heads": HK, "num_v_heads": HV, "k_dim": DK, "v_dim": DV,
     "qk_l2norm": True, "output_gate": "rmsnorm_silu", "tree": True}],
    "speculative": {"max_tree_nodes": max(64, T)}}, threads=args.threads)
rng = np.random.default_rng(0)
f = lambda *s: rng.standard_normal(s).astype(np.float32)
q, k, v, z = f(1, HK, T, DK), f(1, HK, T, DK), f(1, HV, T, DV), f(1, HV, T, DV)
g = -rng.uniform(0.0, 1.0, (1, HV, T)).astype(np.float32)
beta = rng.uniform(0.0, 1.0, (1, HV, T)).astype(np.float32)
w, s0 = f(DV), f(1, HV, DK, DV) * 0.1
parents = np.array([[-1] + [rng.integers(0, t) for t in range(1, T)]], np.int32)


def median_ms(fn, runs=9):
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


tree = median_ms(lambda: m["gdn.tree"](q, k, v, g, beta, parents, s0, z, w))
chain = median_ms(lambda: m["gdn"](q, k, v, g, beta, s0, z, w))


def decode_steps():
    state = s0
    for t in range(T):
        step = lambda x: x[:, :, t:t + 1].copy()
        _, state = m["gdn"](step(q), step(k), step(v), step(g), step(beta),
                            state, step(z), w)


steps = median_ms(decode_steps, runs=5)
depth = 0
for t in range(T):
    d, u = 0, t
    while u >= 0:
        d, u = d + 1, parents[0, u]
    depth = max(depth, d)
print(f"gated_delta, Hk={HK} Hv={HV} Dk={DK} Dv={DV}, B=1, {T} nodes "
      f"(random tree, depth {depth}), {m._native.threads} threads")
print(f"{'path':34s} {'ms':>8s} {'x chain prefill':>16s}")
for name, ms in ((f".tree, {T}-node tree", tree),
                 (f"prefill of a {T}-token chain", chain),
                 (f"{T} decode steps", steps)):
    print(f"{name:34s} {ms:8.3f} {ms / chain:16.2f}")

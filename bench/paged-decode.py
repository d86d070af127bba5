"""Decode over a paged KV cache beside decode over the same keys stored
contiguously, on the CPU, in one run (SPEC §8, issue: serving layouts):
Qwen3-Next's gated attention shape (16 query heads, 2 kv heads, head dim
256) by default, B sequences of L keys each, pages of P keys scattered at
random through a cache with room to spare. The target is paged at most
1.1x the contiguous time. Medians of 21 runs after a warm-up (paged and
contiguous interleaved), milliseconds; the traffic of the keys and values read, against the
machine's copy bandwidth measured in the same run.

    PYTHONPATH=build/python python3 bench/paged-decode.py [--threads N]

With --queries N (N > 8) the call is an extend, chunked prefill of N
queries over the cache, which the flash kernel runs instead of split-KV.
"""
import argparse

import numpy as np

import attn
from paged_cache import median_ms, scatter_into_pages

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--keys", type=int, default=4096)
parser.add_argument("--page", type=int, default=16)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--kv-heads", type=int, default=2)
parser.add_argument("--dim", type=int, default=256)
parser.add_argument("--queries", type=int, default=1,
                    help="query rows per sequence (the last keys' positions)")
parser.add_argument("--in-order", action="store_true",
                    help="pages in order, one sequence after another")
args = parser.parse_args()

B, L, P = args.batch, args.keys, args.page
H, HKV, D = args.heads, args.kv_heads, args.dim
layer = {"name": "attn", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D}
contiguous = attn.compile({"model": "contiguous", "layers": [layer]},
                          threads=args.threads)
paged = attn.compile({"model": "paged", "layers": [
    dict(layer, layout={"page_size": P})]}, threads=args.threads)

rng = np.random.default_rng(0)
q = rng.standard_normal((B, H, args.queries, D)).astype(np.float32)
k = rng.standard_normal((B, HKV, L, D)).astype(np.float32)
v = rng.standard_normal((B, HKV, L, D)).astype(np.float32)
k_cache, v_cache, table = scatter_into_pages(k, v, P, rng, in_order=args.in_order)
lengths = np.full(B, L, np.int32)


o_contiguous = contiguous["attn"](q, k, v)
o_paged = paged["attn"](q, k_cache, v_cache, table, lengths)
assert np.allclose(o_contiguous, o_paged, atol=1e-5), "paged != contiguous"

contiguous_ms, paged_ms = median_ms(
    lambda: contiguous["attn"](q, k, v),
    lambda: paged["attn"](q, k_cache, v_cache, table, lengths))
source = np.ones(k.nbytes // 4, np.float32)
target = np.empty_like(source)
copy_ms, = median_ms(lambda: np.copyto(target, source))
traffic = k.nbytes + v.nbytes
call = "decode" if args.queries == 1 else f"extend of {args.queries} queries"
print(f"{call}, B={B} H={H} Hkv={HKV} D={D}, {L} keys per sequence, pages "
      f"of {P}, threads={args.threads or 'all'}")
print(f"contiguous [B, Hkv, L, D]   {contiguous_ms:8.3f} ms")
print(f"paged [NP, P, Hkv, D]       {paged_ms:8.3f} ms   "
      f"paged/contiguous = {paged_ms / contiguous_ms:.2f}x")
read = (f"; paged at {traffic / paged_ms / 1e6:.1f} GB/s"
        if args.queries == 1 else "")  # an extend is bound by arithmetic
print(f"K and V read: {traffic / 2**20:.0f} MiB; copy bandwidth "
      f"{2 * source.nbytes / copy_ms / 1e6:.1f} GB/s{read}")

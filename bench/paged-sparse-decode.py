"""Quest top-k decode over a paged KV cache beside dense decode over the
same cache, on the CPU, in one run (SPEC §8 and §1.3; issue: serving
layouts): Qwen3-Next's gated attention shape (16 query heads, 2 kv heads,
head dim 256) by default, B sequences of L keys in pages of P keys
scattered through the cache, top_k pages with one sink and one local page
(the selection is Quest's block = page). Times the attention entry alone
(the engine refreshes `<layer>.meta` when pages change, not every step) and
`.meta` over the whole cache, a decode step's `.meta_update` (the pages of
the B new keys, its last slots), and the same top-k over contiguous keys
[B, Hkv, L, D]; medians of 21 interleaved runs after a
warm-up, milliseconds. Also checks the paged top-k output against the same
model over contiguous keys.

    PYTHONPATH=build/python python3 bench/paged-sparse-decode.py [--threads N]
"""
import argparse

import numpy as np

import attn
from paged_cache import median_ms, scatter_into_pages

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--keys", type=int, default=32768)
parser.add_argument("--page", type=int, default=16)
parser.add_argument("--top-k", type=int, default=64)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--kv-heads", type=int, default=2)
parser.add_argument("--dim", type=int, default=256)
args = parser.parse_args()

B, L, P, K = args.batch, args.keys, args.page, args.top_k
H, HKV, D = args.heads, args.kv_heads, args.dim
layer = {"name": "attn", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D}
sparsity = {"method": "top_k", "block_size": P, "top_k": K,
            "sink_blocks": 1, "local_blocks": 1}
dense = attn.compile({"model": "dense", "layers": [
    dict(layer, layout={"page_size": P})]}, threads=args.threads)
sparse = attn.compile({"model": "sparse", "layers": [
    dict(layer, sparsity=sparsity, layout={"page_size": P})]},
    threads=args.threads)
contiguous = attn.compile({"model": "contiguous", "layers": [
    dict(layer, sparsity=sparsity)]}, threads=args.threads)

rng = np.random.default_rng(0)
q = rng.standard_normal((B, H, 1, D)).astype(np.float32)
k = rng.standard_normal((B, HKV, L, D)).astype(np.float32)
v = rng.standard_normal((B, HKV, L, D)).astype(np.float32)
k_cache, v_cache, table = scatter_into_pages(k, v, P, rng)
lengths = np.full(B, L, np.int32)


pages_meta = sparse["attn.meta"](k_cache, table, lengths)
o_sparse = sparse["attn"](q, k_cache, v_cache, table, lengths, pages_meta)
o_contiguous = contiguous["attn"](q, k, v, contiguous["attn.meta"](k))
assert np.allclose(o_sparse, o_contiguous, atol=1e-5), "paged != contiguous"

contiguous_meta = contiguous["attn.meta"](k)
# A decode step's new keys are each sequence's last: their pages' bounds
# refreshed in place (the cache already holds them, so the values stay).
last = L - 1
step_slots = (table[:, last // P] * P + last % P).astype(np.int32)
updated = pages_meta.copy()
sparse["attn.meta_update"](k_cache, step_slots, updated)
assert np.array_equal(updated, pages_meta), ".meta_update != .meta"
dense_ms, sparse_ms, contiguous_ms, meta_ms, update_ms = median_ms(
    lambda: dense["attn"](q, k_cache, v_cache, table, lengths),
    lambda: sparse["attn"](q, k_cache, v_cache, table, lengths, pages_meta),
    lambda: contiguous["attn"](q, k, v, contiguous_meta),
    lambda: sparse["attn.meta"](k_cache, table, lengths),
    lambda: sparse["attn.meta_update"](k_cache, step_slots, updated))
print(f"decode, B={B} H={H} Hkv={HKV} D={D}, {L} keys per sequence, pages "
      f"of {P} scattered, top_k={K} pages, threads={args.threads or 'all'}")
print(f"dense paged decode          {dense_ms:8.3f} ms")
print(f"top-k paged decode          {sparse_ms:8.3f} ms   "
      f"dense/top-k = {dense_ms / sparse_ms:.2f}x")
print(f"top-k contiguous decode     {contiguous_ms:8.3f} ms   "
      f"paged/contiguous = {sparse_ms / contiguous_ms:.2f}x")
print(f"<layer>.meta, whole cache   {meta_ms:8.3f} ms")
print(f"<layer>.meta_update, {B} keys  {update_ms:8.3f} ms   "
      f"(a decode step's pages)")

"""What the paged-cache benchmarks share: the same keys and values written
into pages of a cache (SPEC §8), and interleaved median timings."""
import statistics
import time

import numpy as np


def scatter_into_pages(k, v, page_size, rng, in_order=False):
    """k, v [B, Hkv, L, D] written into pages of `page_size` keys of a
    cache with 25% more pages than needed, at random unless `in_order`
    (one sequence after another): k_cache, v_cache [NP, P, Hkv, D] and
    the page table [B, MP]."""
    B, HKV, L, D = k.shape
    P = page_size
    pages_per_row = -(-L // P)
    num_pages = B * pages_per_row * 5 // 4
    order = (np.arange(B * pages_per_row) if in_order
             else rng.permutation(num_pages)[:B * pages_per_row])
    table = order.reshape(B, pages_per_row).astype(np.int32)
    k_cache = np.zeros((num_pages, P, HKV, D), np.float32)
    v_cache = np.zeros((num_pages, P, HKV, v.shape[3]), np.float32)
    for b in range(B):
        for p in range(pages_per_row):
            rows = slice(p * P, min(L, (p + 1) * P))
            count = rows.stop - rows.start
            k_cache[table[b, p], :count] = np.moveaxis(k[b, :, rows], 0, 1)
            v_cache[table[b, p], :count] = np.moveaxis(v[b, :, rows], 0, 1)
    return k_cache, v_cache, table


def median_ms(*fns, runs=21):
    """Each function's median time in milliseconds, after a warm-up, the
    runs interleaved (this machine's speed drifts over seconds:
    alternating keeps the ratios fair)."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(runs):
        for fn, out in zip(fns, times):
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(t) for t in times]

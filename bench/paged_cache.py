"""What the paged-cache benchmarks share: the same keys and values written
into pages of a cache (SPEC §8), and interleaved median timings."""
import statistics
import time

import numpy as np


def zeroed(shape):
    """A zero float32 array backed like the contiguous arrays it is
    compared with. np.zeros takes large arrays from calloc, which NumPy
    does not advise into transparent huge pages, while np.empty (and every
    array built by arithmetic, such as `astype`) is so advised: on a
    machine whose THP setting is `madvise`, a cache from np.zeros sat on
    4 KiB pages beside contiguous keys on 2 MiB ones (no difference in
    time was measured on a Zen 3 VM, but the comparison should not depend
    on it)."""
    array = np.empty(shape, np.float32)
    array.fill(0.0)
    return array


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
    k_cache = zeroed((num_pages, P, HKV, D))
    v_cache = zeroed((num_pages, P, HKV, v.shape[3]))
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

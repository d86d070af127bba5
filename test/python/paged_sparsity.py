# RUN: %attn_python %s
# Quest top-k over a paged KV cache through the Python package (SPEC §8,
# §1.3, §9): the pages are the blocks, <layer>.meta bounds each page's keys
# (junk past a sequence's last key left out), and <layer> attends to each
# row's top-k pages, in a ragged batch of decode and extend rows; a serving
# step's <layer>.append then <layer>.meta_update with the same slots leaves
# the bounds <layer>.meta computes from scratch. Checked
# against a NumPy float64 reference written from SPEC §1.3 (independent of
# the C++ reference the e2e tests use); a page of the table outside the
# cache is an error naming it, and nothing is returned.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

H, HKV, D = 4, 2, 16
P, TOP_K, SINK, LOCAL = 8, 3, 1, 1
rng = np.random.default_rng(23)


def top_k_pages(q, k):
    """SPEC §1.3's top-k blocks of each row of q [H, Lq, D] over one
    sequence's keys k [Hkv, Lk, D] (causal, bottom-right aligned): the
    first SINK and last LOCAL candidates, then the best by Quest's bound,
    ties to the lower block."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    Lq, Lk = q.shape[1], k.shape[1]
    blocks = -(-Lk // P)
    kmin = np.stack([k[:, b * P:(b + 1) * P].min(axis=1) for b in range(blocks)], 1)
    kmax = np.stack([k[:, b * P:(b + 1) * P].max(axis=1) for b in range(blocks)], 1)
    kept = {}
    for h in range(H):
        g = h // (H // HKV)
        for i in range(Lq):
            pos = Lk - Lq + i
            candidates = list(range(pos // P + 1))
            if len(candidates) <= TOP_K:
                kept[h, i] = candidates
                continue
            qs = q[h, i] / np.sqrt(D)
            bound = np.maximum(qs * kmin[g], qs * kmax[g]).sum(axis=1)
            middle = candidates[SINK:len(candidates) - LOCAL]
            best = sorted(middle, key=lambda b: (-bound[b], b))[:TOP_K - SINK - LOCAL]
            kept[h, i] = sorted(candidates[:SINK] + best + candidates[-LOCAL:])
    return kept


def sparse_reference(q, k, v, kept):
    """o [H, Lq, D] of attention over the visible keys of the kept pages."""
    Lq, Lk = q.shape[1], k.shape[1]
    o = np.zeros((H, Lq, D))
    for h in range(H):
        for i in range(Lq):
            keys = [j for b in kept[h, i] for j in range(b * P, min(Lk, (b + 1) * P))
                    if j <= Lk - Lq + i]
            g = h // (H // HKV)
            ref, _ = attention(q[None, h:h + 1, i:i + 1], k[None, g:g + 1, keys],
                               v[None, g:g + 1, keys], mask="none")
            o[h, i] = ref[0, 0, 0]
    return o


m = attn.compile({"model": "paged-sparsity", "layers": [{
    "name": "attn", "type": "attention", "num_heads": H, "num_kv_heads": HKV,
    "head_dim": D, "sparsity": {"method": "top_k", "top_k": TOP_K,
                                "sink_blocks": SINK, "local_blocks": LOCAL},
    "layout": {"page_size": P, "ragged": True}}]})
names = [a.name for a in m.signature("attn").inputs]
assert names == ["q", "k_cache", "v_cache", "page_table", "seq_lens",
                 "kmeta_pages", "cu_seqlens_q"], names
assert [a.name for a in m.signature("attn.meta").inputs] == [
    "k_cache", "page_table", "seq_lens"]

# Sequences of 70, 9 and 41 keys with 1, 9 and 3 query rows (a decode, a
# prefill of its whole prompt, an extend), pages scattered among junk.
lengths, rows = [70, 9, 41], [1, 9, 3]
needed = [-(-n // P) for n in lengths]
num_pages = sum(needed) + 4
order = rng.permutation(num_pages)
k_cache = (rng.standard_normal((num_pages, P, HKV, D)) * 50).astype(np.float32)
v_cache = (rng.standard_normal((num_pages, P, HKV, D)) * 50).astype(np.float32)
table = np.full((3, max(needed) + 1), 9999, np.int32)
keys, values, used = [], [], 0
for b, n in enumerate(lengths):
    k = rng.standard_normal((HKV, n, D)).astype(np.float32)
    v = rng.standard_normal((HKV, n, D)).astype(np.float32)
    for p in range(needed[b]):
        table[b, p] = order[used]
        used += 1
        span = slice(p * P, min(n, (p + 1) * P))
        k_cache[table[b, p], :span.stop - span.start] = np.moveaxis(k[:, span], 0, 1)
        v_cache[table[b, p], :span.stop - span.start] = np.moveaxis(v[:, span], 0, 1)
    keys.append(k)
    values.append(v)
seq_lens = np.array(lengths, np.int32)
cu = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
queries = [rng.standard_normal((H, r, D)).astype(np.float32) for r in rows]
q = np.ascontiguousarray(np.concatenate([np.moveaxis(x, 0, 1) for x in queries]))  # [T, H, D]

meta = m["attn.meta"](k_cache, table, seq_lens)
assert meta.shape == (num_pages, 2, HKV, D), meta.shape
for b, n in enumerate(lengths):
    for p in range(needed[b]):
        page_keys = keys[b][:, p * P:min(n, (p + 1) * P)]
        assert np.array_equal(meta[table[b, p], 0], page_keys.min(axis=1)), (b, p)
        assert np.array_equal(meta[table[b, p], 1], page_keys.max(axis=1)), (b, p)

o = m["attn"](q, k_cache, v_cache, table, seq_lens, meta, cu)
assert o.shape == (sum(rows), H, D), o.shape
for b in range(3):
    kept = top_k_pages(queries[b], keys[b])
    expected = sparse_reference(queries[b], keys[b], values[b], kept)
    got = np.moveaxis(o[cu[b]:cu[b + 1]], 0, 1)
    close(got, expected, 2e-4, f"o of sequence {b}")

# A page outside the cache is named; nothing is returned.
bad = table.copy()
bad[2, 1] = num_pages
try:
    m["attn.meta"](k_cache, bad, seq_lens)
    raise AssertionError("no error")
except attn.Error as error:
    message = str(error)
    assert f"page_table[2][1] = {num_pages} must be a page in [0, {num_pages})" \
        in message, message
# A serving step: one new token for sequence 0, eleven for sequence 2
# (crossing into a free page), appended, then the written pages' bounds
# refreshed in place; every page of every sequence has the bounds .meta
# computes from scratch, and the pages nothing wrote keep theirs.
assert [a.name for a in m.signature("attn.meta_update").inputs] == [
    "k_cache", "slots", "kmeta_pages"]
new_tokens = [1, 0, 11]
free = [p for p in range(num_pages) if p not in table[table < num_pages]]
slots, k_new, v_new = [], [], []
for b, count in enumerate(new_tokens):
    for j in range(lengths[b], lengths[b] + count):
        if j // P >= needed[b]:
            table[b, j // P] = free.pop()
            needed[b] += 1
        slots.append(table[b, j // P] * P + j % P)
        k_new.append(rng.standard_normal((HKV, D)))
        v_new.append(rng.standard_normal((HKV, D)))
lengths = [n + c for n, c in zip(lengths, new_tokens)]
slots = np.array(slots, np.int32)
k_new = np.array(k_new, np.float32)
m["attn.append"](k_new, np.array(v_new, np.float32), slots, k_cache, v_cache)
before = meta.copy()
m["attn.meta_update"](k_cache, slots, meta)
fresh = m["attn.meta"](k_cache, table, np.array(lengths, np.int32))
written = set(int(s) // P for s in slots)
for b, n in enumerate(lengths):
    for p in range(needed[b]):
        assert np.array_equal(meta[table[b, p]], fresh[table[b, p]]), (b, p)
for page in set(range(num_pages)) - written:
    assert np.array_equal(meta[page], before[page]), page

# Slots outside the cache, or repeated, are named; nothing is written.
for bad_slots, expected in [
        (np.array([3, num_pages * P], np.int32),
         f"slots[1] = {num_pages * P} must be"),
        (np.array([3, 3], np.int32), "slots[1] = 3 is also slots[0]")]:
    before = meta.copy()
    try:
        m["attn.meta_update"](k_cache, bad_slots, meta)
        raise AssertionError("no error")
    except attn.Error as error:
        assert expected in str(error) and "'slots'" in str(error), str(error)
    assert np.array_equal(meta, before)
print("paged sparsity: ok")

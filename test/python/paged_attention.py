# RUN: %attn_python %s
# Softmax attention over a paged KV cache (SPEC §8): random page tables with
# pages scattered through a cache full of junk, page sizes 1, 16 and 5,
# sequences of different lengths in one batch (decode, extend, prefill;
# more keys than queries), GQA, gates, windows, softcap, ALiBi and lse,
# against the float64 reference run on each sequence's gathered keys; the
# cache filled by <layer>.append; bad page tables, key lengths and slots
# are errors that name the index.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

H, HKV, D, DV = 4, 2, 24, 20
rng = np.random.default_rng(11)


def compile_layer(page_size, **extra):
    layer = {"name": "attn", "type": "attention", "num_heads": H,
             "num_kv_heads": HKV, "head_dim": D, "value_dim": DV,
             "layout": {"page_size": page_size}}
    layer.update(extra)
    return attn.compile({"model": "paged", "layers": [layer]})


def paged_cache(lengths, page_size, pages_per_row):
    """The keys and values of each sequence, written to scattered pages of
    a cache whose other slots hold junk, and the page table."""
    needed = [-(-n // page_size) for n in lengths]
    num_pages = sum(needed) + 3
    order = rng.permutation(num_pages)
    k_cache = rng.standard_normal((num_pages, page_size, HKV, D)).astype(np.float32) * 100
    v_cache = rng.standard_normal((num_pages, page_size, HKV, DV)).astype(np.float32) * 100
    table = rng.integers(-5, 1000, (len(lengths), pages_per_row)).astype(np.int32)
    keys, values, used = [], [], 0
    for b, n in enumerate(lengths):
        k = rng.standard_normal((HKV, n, D)).astype(np.float32)
        v = rng.standard_normal((HKV, n, DV)).astype(np.float32)
        for p in range(needed[b]):
            page = order[used]
            used += 1
            table[b, p] = page
            rows = slice(p * page_size, min(n, (p + 1) * page_size))
            count = rows.stop - rows.start
            k_cache[page, :count] = np.moveaxis(k[:, rows], 0, 1)
            v_cache[page, :count] = np.moveaxis(v[:, rows], 0, 1)
        keys.append(k)
        values.append(v)
    return k_cache, v_cache, table, keys, values


def check(page_size, lengths, lq, mask="causal", window=0, gate=None,
          softcap=0.0, alibi=False, lse=False, documents=False):
    extra = {}
    if mask == "none":
        extra["mask"] = "none"
    if window:
        extra["mask"] = {"sliding_window": window}
    if gate:
        extra["gate"] = gate
    if softcap:
        extra["softcap"] = softcap
    if alibi:
        extra["score_mod"] = "alibi"
    if documents:
        extra["mask_mod"] = "document"
    if lse:
        extra["return_lse"] = True
    m = compile_layer(page_size, **extra)
    names = [a.name for a in m.signature("attn").inputs]
    assert names[:5] == ["q", "k_cache", "v_cache", "page_table", "seq_lens"], names
    pages_per_row = -(-max(lengths) // page_size) + 2
    k_cache, v_cache, table, keys, values = paged_cache(lengths, page_size,
                                                        pages_per_row)
    B = len(lengths)
    q = rng.standard_normal((B, H, lq, D)).astype(np.float32)
    args = [q, k_cache, v_cache, table, np.array(lengths, np.int32)]
    g = None
    if gate:
        g = rng.standard_normal((B, H, lq, DV if gate == "elementwise" else 1)).astype(np.float32)
        args.append(g)
    docs = None
    if documents:
        # Document ids per (sequence, position): runs of random lengths.
        docs = np.cumsum(rng.random((B, max(lengths) + 1)) < 0.1,
                         axis=1).astype(np.int32)
        args.append(docs)
    result = m["attn"](*args)
    o, o_lse = (result if lse else (result, None))
    for b in range(B):
        def score_mod(s, h, qp, kp):
            s = softcap * np.tanh(s / softcap) if softcap else s
            if alibi:
                slope = 2.0 ** (-8.0 * (h + 1) / H)
                s = s + slope * (kp - qp)
            if documents:
                s = np.where(docs[b, qp] == docs[b, kp], s, -np.inf)
            return s
        if lengths[b] == 0:
            # No key: o = 0 and lse = -inf (SPEC §1.1).
            ref_o = np.zeros((1, H, lq, DV))
            ref_lse = np.full((1, H, lq), -np.inf)
        else:
            ref_o, ref_lse = attention(
                q[b:b + 1], keys[b][None], values[b][None],
                mask=mask if not window else "window", window=window,
                gate=None if g is None else g[b:b + 1],
                score_mod=score_mod if (softcap or alibi or documents)
                else None)
        what = f"P={page_size} lengths={lengths} Lq={lq} {extra}"
        close(o[b:b + 1], ref_o, 2e-4, f"o of sequence {b}, {what}")
        if lse:
            finite = np.isfinite(ref_lse)
            assert np.array_equal(np.isfinite(o_lse[b:b + 1]), finite), what
            close(o_lse[b:b + 1][finite], ref_lse[finite], 2e-4, f"lse, {what}")


for page_size in (1, 16, 5):
    check(page_size, [37, 1, 16, 80], 1)                  # decode
    check(page_size, [37, 9, 16, 80], 6)                  # extend
    check(page_size, [40, 25, 33], 25, gate="elementwise")  # prefill (flash)
check(16, [100, 3, 64], 1, window=8, gate="headwise", lse=True)
check(5, [50, 70, 20], 20, window=12, lse=True)
check(16, [0, 5, 33], 1, mask="none", lse=True)           # an empty sequence
check(16, [300, 7], 3, softcap=20.0)
check(5, [64, 33], 33, alibi=True)
check(16, [300, 7, 40], 1, documents=True, lse=True)    # a mask_mod, decode
check(5, [64, 33], 33, documents=True)                  # and prefill

# Bad tables and lengths name the index.
m = compile_layer(4)
k_cache, v_cache, table, _, _ = paged_cache([6, 9], 4, 3)
q = np.zeros((2, H, 2, D), np.float32)


def expect_error(fragment, table, lengths):
    try:
        m["attn"](q, k_cache, v_cache, table, np.array(lengths, np.int32))
    except attn.Error as e:
        assert fragment in str(e), str(e)
        return
    raise AssertionError(f"no error: {fragment}")


bad = table.copy()
bad[1, 2] = k_cache.shape[0]
expect_error(f"page_table[1][2] = {k_cache.shape[0]} must be a page in "
             f"[0, {k_cache.shape[0]}) (it holds keys of seq_lens[1] = 9)", bad, [6, 9])
expect_error("seq_lens[0] = 13 must be in [0, 12] (the 3 pages of 4 keys", table, [13, 9])
expect_error("seq_lens[1] = 1 must be at least the 2 queries", table, [6, 1])
# Pages past a sequence's length are never read: junk there is fine.
junk = table.copy()
junk[0, 2] = -7
m["attn"](q, k_cache, v_cache, junk, np.array([6, 9], np.int32))
# <layer>.append writes new rows into their slots, in place; -1 skips a
# token; a decode step then attends over the cache it filled.
m = compile_layer(4)
sig = m.signature("attn.append")
assert [a.name for a in sig.inputs] == ["k_new", "v_new", "slots", "k_cache",
                                        "v_cache"]
assert [a.in_place for a in sig.inputs] == [False, False, False, True, True]
assert sig.outputs == []
k_cache = np.zeros((5, 4, HKV, D), np.float32)
v_cache = np.zeros((5, 4, HKV, DV), np.float32)
# Sequence 0 owns pages 3 and 1, sequence 1 page 4.
table = np.array([[3, 1], [4, 0]], np.int32)
lengths = [6, 3]
k_seq = [rng.standard_normal((HKV, n, D)).astype(np.float32) for n in lengths]
v_seq = [rng.standard_normal((HKV, n, DV)).astype(np.float32) for n in lengths]
k_new = np.concatenate([np.moveaxis(k, 0, 1) for k in k_seq])
v_new = np.concatenate([np.moveaxis(v, 0, 1) for v in v_seq])
slots = np.array([table[b, j // 4] * 4 + j % 4
                  for b, n in enumerate(lengths) for j in range(n)], np.int32)
# An extra token that is skipped.
k_new = np.ascontiguousarray(
    np.concatenate([k_new, np.full((1, HKV, D), 7, np.float32)]))
v_new = np.ascontiguousarray(
    np.concatenate([v_new, np.full((1, HKV, DV), 7, np.float32)]))
slots = np.append(slots, -1).astype(np.int32)
result = m["attn.append"](k_new, v_new, slots, k_cache, v_cache)
assert result == () or result is None or len(result) == 0, result
written = np.zeros(k_cache.shape[:2], bool)
written.reshape(-1)[slots[slots >= 0]] = True
assert not np.any(k_cache[~written]) and not np.any(v_cache[~written])
q = rng.standard_normal((2, H, 1, D)).astype(np.float32)
o = m["attn"](q, k_cache, v_cache, table, np.array(lengths, np.int32))
for b in range(2):
    ref_o, _ = attention(q[b:b + 1], k_seq[b][None], v_seq[b][None])
    close(o[b:b + 1], ref_o, 2e-4, f"o of sequence {b} after append")


def expect_append_error(fragment, slots):
    before = k_cache.copy()
    try:
        m["attn.append"](k_new[:2], v_new[:2], np.array(slots, np.int32),
                         k_cache, v_cache)
    except attn.Error as e:
        assert fragment in str(e), str(e)
        assert np.array_equal(k_cache, before), "a failed append wrote"
        return
    raise AssertionError(f"no error: {fragment}")


expect_append_error("slots[1] = 20 must be -1 or a slot of 'k_cache' in [0, 20)",
                    [0, 20])
expect_append_error("slots[1] = -2 must be -1 or a slot", [0, -2])
expect_append_error("slots[1] = 3 is also slots[0]: each token needs its own "
                    "slot", [3, 3])
print("paged attention: ok")

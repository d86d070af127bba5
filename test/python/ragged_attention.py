# RUN: %attn_python %s
# Ragged softmax batches (SPEC §8): sequences of different lengths packed
# token-major, q [T, H, D] with cu_seqlens_q, keys packed [Tk, Hkv, D] with
# cu_seqlens_k or in a paged cache; decode (split-KV) and prefill (flash)
# rows mixed in one call, sequences of 0 and 1 rows, more keys than
# queries, GQA, gates, windows, softcap, ALiBi, a document mask_mod and
# lse, against the float64 reference run on each sequence alone; bad
# offsets and sequences with more queries than keys are errors that name
# the index.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

H, HKV, D, DV = 4, 2, 24, 20
rng = np.random.default_rng(23)


def compile_layer(page_size=0, **extra):
    layout = {"ragged": True}
    if page_size:
        layout["page_size"] = page_size
    layer = {"name": "attn", "type": "attention", "num_heads": H,
             "num_kv_heads": HKV, "head_dim": D, "value_dim": DV,
             "layout": layout}
    layer.update(extra)
    return attn.compile({"model": "ragged", "layers": [layer]})


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def paged_cache(keys, values, page_size):
    """Each sequence's keys and values in scattered pages of a cache full
    of junk, and the page table."""
    lengths = [k.shape[1] for k in keys]
    needed = [-(-n // page_size) for n in lengths]
    num_pages = sum(needed) + 2
    order = rng.permutation(num_pages)
    k_cache = rng.standard_normal((num_pages, page_size, HKV, D)).astype(np.float32) * 100
    v_cache = rng.standard_normal((num_pages, page_size, HKV, DV)).astype(np.float32) * 100
    table = rng.integers(-5, 1000, (len(lengths), max(needed) + 1)).astype(np.int32)
    used = 0
    for b, n in enumerate(lengths):
        for p in range(needed[b]):
            page = order[used]
            used += 1
            table[b, p] = page
            rows = slice(p * page_size, min(n, (p + 1) * page_size))
            count = rows.stop - rows.start
            k_cache[page, :count] = np.moveaxis(keys[b][:, rows], 0, 1)
            v_cache[page, :count] = np.moveaxis(values[b][:, rows], 0, 1)
    return k_cache, v_cache, table


def check(queries, keys_per_seq, page_size=0, mask="causal", window=0,
          gate=None, softcap=0.0, alibi=False, lse=False, documents=False):
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
    B = len(queries)
    qs = [rng.standard_normal((H, n, D)).astype(np.float32) for n in queries]
    ks = [rng.standard_normal((HKV, n, D)).astype(np.float32) for n in keys_per_seq]
    vs = [rng.standard_normal((HKV, n, DV)).astype(np.float32) for n in keys_per_seq]
    q = np.ascontiguousarray(np.concatenate([np.moveaxis(x, 0, 1) for x in qs]))
    T = q.shape[0]
    g = None
    if gate:
        g = rng.standard_normal((T, H, DV if gate == "elementwise" else 1)).astype(np.float32)
    names = [a.name for a in m.signature("attn").inputs]
    if page_size:
        k_cache, v_cache, table = paged_cache(ks, vs, page_size)
        args = [q, k_cache, v_cache, table, np.array(keys_per_seq, np.int32)]
        expected = ["q", "k_cache", "v_cache", "page_table", "seq_lens"]
    else:
        k = np.ascontiguousarray(np.concatenate([np.moveaxis(x, 0, 1) for x in ks]))
        v = np.ascontiguousarray(np.concatenate([np.moveaxis(x, 0, 1) for x in vs]))
        args = [q, k, v]
        expected = ["q", "k", "v"]
    if gate:
        args.append(g)
        expected.append("gate")
    args.append(offsets(queries))
    expected.append("cu_seqlens_q")
    if not page_size:
        args.append(offsets(keys_per_seq))
        expected.append("cu_seqlens_k")
    docs = None
    if documents:
        # Document ids per (sequence, position), runs of random lengths.
        most = max(keys_per_seq) + 1
        docs = np.cumsum(rng.random((B, most)) < 0.1, axis=1).astype(np.int32)
        args.append(docs)
        expected.append("doc_ids")
    assert names == expected, names
    result = m["attn"](*args)
    o, o_lse = (result if lse else (result, None))
    assert o.shape == (T, H, DV), o.shape
    row = 0
    for b in range(B):
        lq, lk = queries[b], keys_per_seq[b]
        rows = slice(row, row + lq)
        row += lq

        def score_mod(s, h, qp, kp):
            s = softcap * np.tanh(s / softcap) if softcap else s
            if alibi:
                slope = 2.0 ** (-8.0 * (h + 1) / H)
                s = s + slope * (kp - qp)
            if documents:
                same = docs[b, np.minimum(qp, docs.shape[1] - 1)] == \
                    docs[b, np.minimum(kp, docs.shape[1] - 1)]
                s = np.where(same, s, -np.inf)
            return s
        if lq == 0:
            continue
        if lk == 0:
            ref_o = np.zeros((1, H, lq, DV))
            ref_lse = np.full((1, H, lq), -np.inf)
        else:
            ref_o, ref_lse = attention(
                qs[b][None], ks[b][None], vs[b][None],
                mask=mask if not window else "window", window=window,
                gate=None if g is None else np.moveaxis(g[rows], 0, 1)[None],
                score_mod=score_mod if (softcap or alibi or documents) else None)
        what = f"P={page_size} queries={queries} keys={keys_per_seq} {extra}"
        got = np.moveaxis(o[rows], 0, 1)[None]
        close(got, ref_o, 2e-4, f"o of sequence {b}, {what}")
        if lse:
            got_lse = np.moveaxis(o_lse[rows], 0, 1)[None]
            finite = np.isfinite(ref_lse)
            assert np.array_equal(np.isfinite(got_lse), finite), what
            close(got_lse[finite], ref_lse[finite], 2e-4, f"lse, {what}")


# Decode and prefill rows in one batch: 1-row sequences split their keys,
# longer ones take the flash kernel; an empty sequence in the middle.
mixed_q = [1, 37, 0, 8, 9, 1, 70]
mixed_k = [600, 37, 5, 40, 100, 1, 75]
check(mixed_q, mixed_k)
check(mixed_q, mixed_k, gate="elementwise", lse=True)
check(mixed_q, mixed_k, window=16, gate="headwise")
# A window wider than the head dim, which dim 2 of the packed rows is.
check(mixed_q, mixed_k, window=50, lse=True)
check(mixed_q, mixed_k, softcap=20.0, alibi=True)
check(mixed_q, mixed_k, documents=True, lse=True)
check([3, 50], [0, 60], mask="none", lse=True)   # a sequence with no key
check([1] * 5, [1, 2, 1100, 3, 64])                # decode only
check([130], [130])                                # one prefill sequence
for page_size in (1, 16, 5):
    check(mixed_q, mixed_k, page_size=page_size)
check(mixed_q, mixed_k, page_size=16, gate="elementwise", window=12, lse=True)
check(mixed_q, mixed_k, page_size=5, documents=True)

# Many decode rows over long keys: more splits than the plan's budget
# makes them longer, not more.
check([2] * 40, [900] * 40, page_size=16)

# Bad offsets name the index; nothing is written.
m = compile_layer()
q = np.zeros((5, H, D), np.float32)
k = np.zeros((9, HKV, D), np.float32)
v = np.zeros((9, HKV, DV), np.float32)


def expect_error(fragment, cu_q, cu_k):
    try:
        m["attn"](q, k, v, np.array(cu_q, np.int32), np.array(cu_k, np.int32))
    except attn.Error as e:
        assert fragment in str(e), str(e)
        return
    raise AssertionError(f"no error: {fragment}")


expect_error("cu_seqlens_q[0] = 1 must be 0", [1, 2, 5], [0, 4, 9])
expect_error("cu_seqlens_q[2] = 1 must be at least cu_seqlens_q[1] = 3",
             [0, 3, 1, 5], [0, 3, 4, 9])
expect_error("cu_seqlens_q[2] = 4 must be 5, the tokens of 'q'", [0, 2, 4],
             [0, 4, 9])
expect_error("cu_seqlens_k[2] = 8 must be 9, the tokens of 'k'", [0, 2, 5],
             [0, 4, 8])
expect_error("sequence 1 has 2 keys but 3 query rows in 'cu_seqlens_q'",
             [0, 2, 5], [0, 7, 9])
expect_error("input 'cu_seqlens_k' (#4) of entry 'attn': expected shape "
             "[B+1=3], got [4]", [0, 2, 5], [0, 4, 6, 9])
# Without a causal mask, fewer keys than queries are fine.
m = compile_layer(mask="none")
o = m["attn"](q, k, v, np.array([0, 2, 5], np.int32),
              np.array([0, 7, 9], np.int32))
assert o.shape == (5, H, DV)
# A paged ragged batch checks its key lengths against each sequence's rows.
m = compile_layer(page_size=4)
k_cache = np.zeros((6, 4, HKV, D), np.float32)
v_cache = np.zeros((6, 4, HKV, DV), np.float32)
table = np.array([[0, 1], [2, 3]], np.int32)
try:
    m["attn"](q, k_cache, v_cache, table, np.array([8, 2], np.int32),
              np.array([0, 2, 5], np.int32))
    raise AssertionError("no error")
except attn.Error as e:
    assert "seq_lens[1] = 2 must be at least the 3 queries" in str(e), str(e)
try:
    m["attn"](q, k_cache, v_cache, table, np.array([8, 4], np.int32),
              np.array([0, 5], np.int32))
    raise AssertionError("no error")
except attn.Error as e:
    assert "must hold B + 1 = 3 offsets" in str(e), str(e)
print("ragged attention: ok")

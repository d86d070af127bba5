# RUN: %attn_python %s
# A draft tree verified over a paged KV cache (SPEC §8, §1.4): each
# sequence's prefix and its T tree tokens are the seq_lens[b] keys of its
# pages, scattered through a cache full of junk; prefixes of different
# lengths in one batch, page sizes 1, 16 and 5, windows, gates, ALiBi and
# lse, the .tree entry of a ragged layer, and trees over a ragged batch's
# packed keys with their .compact, against a float64 reference of tree
# attention run on each sequence;
# a sequence with fewer keys than tree nodes is an error that names it.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import close

H, HKV, D, DV = 4, 2, 24, 20
rng = np.random.default_rng(5)


def tree_reference(q, k, v, parents, window=0, gate=None, alibi=False):
    """o [H, T, Dv] and lse [H, T] of one sequence: node t sees the prefix
    and its ancestors' (and its own) tree keys, at position P + depth."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    T, L = q.shape[1], k.shape[1]
    P = L - T
    depth = np.zeros(T, int)
    for t in range(1, T):
        depth[t] = depth[parents[t]] + 1
    o = np.zeros((H, T, DV))
    lse = np.full((H, T), -np.inf)
    for t in range(T):
        seen = set()
        u = t
        while u >= 0:
            seen.add(u)
            u = parents[u] if u > 0 else -1
        keys = list(range(P)) + [P + u for u in sorted(seen)]
        kp = np.array(list(range(P)) + [P + depth[u] for u in sorted(seen)])
        qp = P + depth[t]
        visible = np.ones(len(keys), bool)
        if window:
            visible = kp > qp - window
        for h in range(H):
            g = h // (H // HKV)
            s = k[g, keys] @ q[h, t] / np.sqrt(D)
            if alibi:
                s = s + 2.0 ** (-8.0 * (h + 1) / H) * (kp - qp)
            s = np.where(visible, s, -np.inf)
            if not visible.any():
                continue
            m = s.max()
            p = np.exp(s - m)
            o[h, t] = p @ v[g, keys] / p.sum()
            lse[h, t] = m + np.log(p.sum())
    if gate is not None:
        o = o / (1.0 + np.exp(-np.asarray(gate, np.float64)))
    return o, lse


def tree_layer(layout, window, gate, alibi, lse):
    """The model description's tree layer with `layout`."""
    layer = {"name": "attn", "type": "attention", "num_heads": H,
             "num_kv_heads": HKV, "head_dim": D, "value_dim": DV,
             "tree": True, "layout": layout}
    if window:
        layer["mask"] = {"sliding_window": window}
    if gate:
        layer["gate"] = gate
    if alibi:
        layer["score_mod"] = "alibi"
    if lse:
        layer["return_lse"] = True
    return layer


def random_trees(B, T, gate):
    """Random parents [B, T], queries [B, H, T, D] and, with `gate`, the
    gate's input."""
    parents = np.full((B, T), -1, np.int32)
    for b in range(B):
        for t in range(1, T):
            parents[b, t] = rng.integers(0, t)
    q = rng.standard_normal((B, H, T, D)).astype(np.float32)
    g = None
    if gate:
        g = rng.standard_normal((B, H, T, DV if gate == "elementwise" else 1)).astype(np.float32)
    return parents, q, g


def check(page_size, prefixes, T, window=0, gate=None, alibi=False, lse=False,
          ragged=False):
    # A ragged layer's .tree is the paged one: T nodes per sequence.
    layout = {"page_size": page_size, "ragged": True} if ragged else {"page_size": page_size}
    m = attn.compile({"model": "paged-tree",
                      "layers": [tree_layer(layout, window, gate, alibi, lse)]})
    names = [a.name for a in m.signature("attn.tree").inputs]
    expected = ["q", "k_cache", "v_cache", "page_table", "seq_lens", "parents"]
    assert names[:6] == expected, names
    assert "attn.compact" not in m.entries, m.entries
    main = [a.name for a in m.signature("attn").inputs]
    assert ("cu_seqlens_q" in main) == ragged, main
    B = len(prefixes)
    lengths = [p + T for p in prefixes]
    needed = [-(-n // page_size) for n in lengths]
    num_pages = sum(needed) + 2
    order = rng.permutation(num_pages)
    k_cache = rng.standard_normal((num_pages, page_size, HKV, D)).astype(np.float32) * 100
    v_cache = rng.standard_normal((num_pages, page_size, HKV, DV)).astype(np.float32) * 100
    table = rng.integers(-9, 9000, (B, max(needed) + 1)).astype(np.int32)
    keys, values, used = [], [], 0
    for b, n in enumerate(lengths):
        k = rng.standard_normal((HKV, n, D)).astype(np.float32)
        v = rng.standard_normal((HKV, n, DV)).astype(np.float32)
        for p in range(needed[b]):
            table[b, p] = order[used]
            used += 1
            rows = slice(p * page_size, min(n, (p + 1) * page_size))
            k_cache[table[b, p], :rows.stop - rows.start] = np.moveaxis(k[:, rows], 0, 1)
            v_cache[table[b, p], :rows.stop - rows.start] = np.moveaxis(v[:, rows], 0, 1)
        keys.append(k)
        values.append(v)
    parents, q, g = random_trees(B, T, gate)
    args = [q, k_cache, v_cache, table, np.array(lengths, np.int32), parents]
    if gate:
        args.append(g)
    result = m["attn.tree"](*args)
    o, o_lse = result if lse else (result, None)
    for b in range(B):
        ref_o, ref_lse = tree_reference(q[b], keys[b], values[b], parents[b],
                                        window, None if g is None else g[b],
                                        alibi)
        what = f"P={page_size} prefixes={prefixes} T={T} window={window}"
        close(o[b], ref_o, 2e-4, f"o of sequence {b}, {what}")
        if lse:
            finite = np.isfinite(ref_lse)
            close(o_lse[b][finite], ref_lse[finite], 2e-4, f"lse, {what}")


for page_size in (1, 16, 5):
    check(page_size, [37, 0, 100], 6)        # few nodes: split-KV prefix
    check(page_size, [20, 70], 40)           # many nodes: flash prefix
check(16, [50, 3], 12, window=8, lse=True)
check(5, [64, 9], 20, gate="elementwise", alibi=True)
check(16, [200], 70, gate="headwise", lse=True)
check(16, [37, 0, 100], 6, ragged=True)
check(5, [20, 70], 40, gate="headwise", ragged=True)


def check_packed(prefixes, T, window=0, gate=None, alibi=False, lse=False):
    """A ragged layer without pages: keys packed [Tk, Hkv, D] with their
    offsets, each sequence's last T its tree's; .tree, then .compact of
    each sequence's accepted path."""
    m = attn.compile({"model": "packed-tree", "layers": [
        tree_layer({"ragged": True}, window, gate, alibi, lse)]})
    names = [a.name for a in m.signature("attn.tree").inputs]
    assert names[:4] == ["q", "k", "v", "parents"], names
    assert "cu_seqlens_k" in names, names
    B = len(prefixes)
    lengths = [p + T for p in prefixes]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    k = rng.standard_normal((cu[-1], HKV, D)).astype(np.float32)
    v = rng.standard_normal((cu[-1], HKV, DV)).astype(np.float32)
    parents, q, g = random_trees(B, T, gate)
    args = [q, k, v, parents]
    if gate:
        args.append(g)
    args.append(cu)
    result = m["attn.tree"](*args)
    o, o_lse = result if lse else (result, None)
    for b in range(B):
        rows = slice(cu[b], cu[b + 1])
        ref_o, ref_lse = tree_reference(
            q[b], np.moveaxis(k[rows], 0, 1), np.moveaxis(v[rows], 0, 1),
            parents[b], window, None if g is None else g[b], alibi)
        what = f"packed prefixes={prefixes} T={T} window={window}"
        close(o[b], ref_o, 2e-4, f"o of sequence {b}, {what}")
        if lse:
            finite = np.isfinite(ref_lse)
            close(o_lse[b][finite], ref_lse[finite], 2e-4, f"lse, {what}")
    # Each sequence accepts the path from its root to its last node.
    path = np.full((B, T), -1, np.int32)
    length = np.zeros(B, np.int32)
    for b in range(B):
        nodes, t = [], T - 1
        while t >= 0:
            nodes.insert(0, t)
            t = parents[b, t] if t > 0 else -1
        path[b, :len(nodes)] = nodes
        length[b] = len(nodes)
    k2, v2 = m["attn.compact"](k, v, path, length, cu)
    want_k, want_v = k.copy(), v.copy()
    for b in range(B):
        first = cu[b] + prefixes[b]
        for n in range(length[b]):
            want_k[first + n] = k[first + path[b, n]]
            want_v[first + n] = v[first + path[b, n]]
    assert np.array_equal(k2, want_k) and np.array_equal(v2, want_v), prefixes


check_packed([37, 0, 100], 6)                 # few nodes: split-KV prefix
check_packed([20, 70, 1], 40, lse=True)       # many nodes: flash prefix
check_packed([50, 3], 12, window=8, gate="headwise", alibi=True)

# Each sequence must hold its T tree keys.
m = attn.compile({"model": "t", "layers": [{
    "name": "attn", "type": "attention", "num_heads": H, "num_kv_heads": HKV,
    "head_dim": D, "value_dim": DV, "tree": True,
    "layout": {"page_size": 4}}]})
q = np.zeros((2, H, 3, D), np.float32)
k_cache = np.zeros((4, 4, HKV, D), np.float32)
v_cache = np.zeros((4, 4, HKV, DV), np.float32)
try:
    m["attn.tree"](q, k_cache, v_cache, np.array([[0, 1], [2, 3]], np.int32),
                   np.array([5, 2], np.int32),
                   np.array([[-1, 0, 0], [-1, 0, 1]], np.int32))
    raise AssertionError("no error")
except attn.Error as e:
    assert "seq_lens[1] = 2 must be at least the 3 queries" in str(e), str(e)
print("paged tree: ok")

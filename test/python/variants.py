# RUN: %attn_python %s
# Variants written as Python functions (attn.score_mod / attn.mask_mod,
# SPEC §7): traced into attn IR, compiled through a model description's
# {"func": ...} keys, and checked against the float64 reference on awkward
# sizes; a traced ALiBi equals the named one; the extra inputs come last,
# shared by name between the two functions and the .tree entry; every error
# of the tracer and of the function's IR names what is wrong.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

rng = np.random.default_rng(7)
H, HKV, D, DV = 6, 2, 24, 20
B, LQ, LK = 2, 37, 53


def layer(**keys):
    return dict({"name": "attn", "type": "attention", "num_heads": H,
                 "num_kv_heads": HKV, "head_dim": D, "value_dim": DV}, **keys)


def model(**keys):
    return attn.compile({"model": "variants", "layers": [layer(**keys)]})


q = rng.standard_normal((B, H, LQ, D)).astype(np.float32)
k = rng.standard_normal((B, HKV, LK, D)).astype(np.float32)
v = rng.standard_normal((B, HKV, LK, DV)).astype(np.float32)


def alibi_slope(h):
    n = 1 << (H.bit_length() - 1)  # the largest power of two <= H
    return 2.0 ** (-8 * (h + 1) / n) if h < n else \
        2.0 ** (-4 * (2 * (h - n) + 1) / n)


# ALiBi with the slopes as an input: equal to the named variant (whose
# slopes are built in) and to the reference.
slopes = np.array([alibi_slope(h) for h in range(H)], np.float32)
traced = model(score_mod=attn.score_mod(
    lambda s, b, h, qp, kp, slopes: s - slopes[h] * (qp - kp),
    slopes=attn.Input([H])))
named = model(score_mod="alibi")
assert traced.signature("attn").inputs[-1].name == "slopes"
o_traced = traced["attn"](q, k, v, slopes)
o_named = named["attn"](q, k, v)
close(o_traced, o_named, 1e-5, "traced alibi vs named")
ref, _ = attention(q, k, v, score_mod=lambda s, h, qp, kp:
                   s - alibi_slope(h) * (qp - kp))
close(o_traced, ref, 1e-5, "traced alibi")

# The same traced variant on a ragged batch over a paged cache (SPEC §8):
# the input still comes last, and one sequence's output equals the dense
# call's.
P = 8
paged = model(layout={"ragged": True, "page_size": P},
              score_mod=attn.score_mod(
                  lambda s, b, h, qp, kp, slopes: s - slopes[h] * (qp - kp),
                  slopes=attn.Input([H])))
names = [a.name for a in paged.signature("attn").inputs]
assert names == ["q", "k_cache", "v_cache", "page_table", "seq_lens",
                 "cu_seqlens_q", "slopes"], names
pages = -(-LK // P)
order = rng.permutation(pages + 3)[:pages]  # scattered, with spare pages
k_cache = np.zeros((pages + 3, P, HKV, D), np.float32)
v_cache = np.zeros((pages + 3, P, HKV, DV), np.float32)
for j in range(LK):
    k_cache[order[j // P], j % P] = k[0, :, j]
    v_cache[order[j // P], j % P] = v[0, :, j]
o_paged = paged["attn"](np.ascontiguousarray(q[0].transpose(1, 0, 2)),
                        k_cache, v_cache, order[None].astype(np.int32),
                        np.array([LK], np.int32),
                        np.array([0, LQ], np.int32), slopes)
close(o_paged, o_traced[0].transpose(1, 0, 2), 1e-5, "paged traced alibi")

# A score_mod and a mask_mod sharing one input, over arithmetic that
# exercises the tracer: softcap by tanh, floor division and modulo of
# positions, where, abs, minimum, booleans in arithmetic.
docs = np.sort(rng.integers(0, 4, size=(B, LK)), axis=1).astype(np.int32)


def score(s, b, h, qp, kp, doc_ids):
    capped = attn.tanh(s / 8.0) * np.float32(8)  # NumPy scalars too
    near = abs(qp - kp) < 5
    return attn.where(near, capped + 0.25 * (doc_ids[b, kp] % 3),
                      attn.minimum(capped, (kp // 7) - 2.5)) - (h == 1)


def mask(b, h, qp, kp, doc_ids):
    return (doc_ids[b, qp] == doc_ids[b, kp]) | (kp < 3) & ~(kp == 1)


m = model(mask="none", gate="headwise",
          score_mod=attn.score_mod(score, doc_ids=attn.Input([None, None],
                                                             "i32")),
          mask_mod=attn.mask_mod(mask, doc_ids=attn.Input([None, None],
                                                          "i32")),
          tree=True)
names = [a.name for a in m.signature("attn").inputs]
assert names == ["q", "k", "v", "gate", "doc_ids"], names
tree_names = [a.name for a in m.signature("attn.tree").inputs]
assert tree_names == ["q", "k", "v", "parents", "gate", "doc_ids"], tree_names
q_rows = rng.standard_normal((B, H, LK, D)).astype(np.float32)
gate = rng.standard_normal((B, H, LK, 1)).astype(np.float32)
o = m["attn"](q_rows, k, v, gate, docs)


def reference(b):
    """Batch row b in float64 (the reference's score_mod takes no b)."""
    def score_b(s, h, qp, kp):
        capped = np.tanh(s / 8.0) * 8
        near = np.abs(qp - kp) < 5
        return np.where(near, capped + 0.25 * (docs[b][kp] % 3),
                        np.minimum(capped, (kp // 7) - 2.5)) - (h == 1)

    def mask_b(_, h, qp, kp):
        return (docs[b][qp] == docs[b][kp]) | (kp < 3) & ~(kp == 1)

    o_b, _ = attention(q_rows[b:b + 1], k[b:b + 1], v[b:b + 1], mask="none",
                       gate=gate[b:b + 1], score_mod=score_b, mask_mod=mask_b)
    return o_b


close(o, np.concatenate([reference(b) for b in range(B)]), 1e-5,
      "score_mod and mask_mod")

# T5's relative-position buckets (log-spaced past a few exact distances),
# indexing a learned [H, buckets] table: floats become indices with
# .long(), which rounds toward zero as torch's does.
BUCKETS, FAR = 8, 40
bias = rng.standard_normal((H, BUCKETS)).astype(np.float32)


def t5_bucket(distance, log=np.log, minimum=np.minimum, where=np.where,
              to_int=lambda x: x.astype(np.int64)):
    exact = BUCKETS // 2
    far = exact + to_int(log(np.maximum(distance, 1) / exact)
                         / np.log(FAR / exact) * (BUCKETS - exact))
    return where(distance < exact, distance, minimum(far, BUCKETS - 1))


def t5(s, b, h, qp, kp, bias):
    d = abs(qp - kp)
    exact = BUCKETS // 2
    far = exact + (attn.log(attn.maximum(d, 1) / exact)
                   / np.log(FAR / exact) * (BUCKETS - exact)).long()
    return s + bias[h, attn.where(d < exact, d, attn.minimum(far, BUCKETS - 1))]


m = model(score_mod=attn.score_mod(t5, bias=attn.Input([H, BUCKETS])))
ref, _ = attention(q, k, v, score_mod=lambda s, h, qp, kp:
                   s + bias[h][t5_bucket(np.abs(qp - kp))])
close(m["attn"](q, k, v, bias), ref, 1e-5, "t5 buckets")

# ALiBi with its slopes computed in the function, 2 ** (-8 (h + 1) / H) as
# FlexAttention's examples write them, and powers of integers and floats.
def alibi_by_power(s, b, h, qp, kp):
    slope = 2 ** (-8 * (h + 1) / H)
    return s - slope * (qp - kp) + 0.01 * ((kp % 4) ** 2) - 0.1 * (s ** 2)


m = model(score_mod=attn.score_mod(alibi_by_power))
ref, _ = attention(q, k, v, score_mod=lambda s, h, qp, kp:
                   s - 2.0 ** (-8 * (h + 1) / H) * (qp - kp)
                   + 0.01 * ((kp % 4) ** 2) - 0.1 * s ** 2)
close(m["attn"](q, k, v), ref, 1e-5, "powers")

# Where PyTorch would raise, a compiled variant is defined: // by 0 gives
# 0 and % by 0 the dividend (a table entry of 0 must not trap the process);
# .long() saturates, NaN giving 0; floor and ceil.
periods = np.array([0, 3, -1, 0, 5, 2], np.int32)
levels = np.array([np.nan, np.inf, -3e9, 2.5, -np.inf, -2.5], np.float32)


def level(x):
    return np.where(np.isnan(x), 0, np.clip(x, -2.0**31, 2.0**31 - 1)
                    ).astype(np.int64)


def periodic(b, h, qp, kp, periods):
    return ((qp - kp) % periods[h] == 0) | ((kp // periods[h]) == 2)


def leveled(s, b, h, qp, kp, levels):
    return s + 1e-9 * levels[h].long() + attn.floor(qp / 4) * 0.25 \
        - attn.ceil((kp + 0.5) / 3) * 0.125


m = model(mask_mod=attn.mask_mod(periodic, periods=attn.Input([H], "i32")),
          score_mod=attn.score_mod(leveled, levels=attn.Input([H])))


def py_mod(x, d):
    return np.where(d == 0, x, np.mod(x, np.where(d == 0, 1, d)))


def py_floordiv(x, d):
    return np.where(d == 0, 0, np.floor_divide(x, np.where(d == 0, 1, d)))


ref, _ = attention(
    q, k, v,
    mask_mod=lambda b, h, qp, kp: (py_mod(qp - kp, periods[h]) == 0)
    | (py_floordiv(kp, periods[h]) == 2),
    score_mod=lambda s, h, qp, kp: s + 1e-9 * level(levels[h])
    + np.floor(qp / 4) * 0.25 - np.ceil((kp + 0.5) / 3) * 0.125)
close(m["attn"](q, k, v, levels, periods), ref, 1e-5,
      "division by 0 and saturating conversions")

# attn IR on index values wider than the CPU's 32-bit lanes: a constant
# past them compares as in 64 bits (kp < 2^32 holds), and index_castui of a
# negative position (no mask, Lq > Lk) keeps the 64-bit index's bits, a
# negative i64.
WIDE = """func.func @s(%s: f32, %b: index, %h: index, %qp: index, %kp: index)
    -> f32 {
  %u = arith.index_castui %qp : index to i64
  %z = arith.constant 0 : i64
  %negative = arith.cmpi slt, %u, %z : i64
  %big = arith.constant 4294967296 : index
  %below = arith.cmpi slt, %kp, %big : index
  %both = arith.andi %negative, %below : i1
  %kpi = arith.index_cast %kp : index to i32
  %kpf = arith.sitofp %kpi : i32 to f32
  %zero = arith.constant 0.0 : f32
  %bump = arith.select %both, %kpf, %zero : f32
  %r = arith.addf %s, %bump : f32
  return %r : f32
}"""
q_more = rng.standard_normal((B, H, 2 * LK, D)).astype(np.float32)
m = model(mask="none", score_mod={"func": WIDE})
ref, _ = attention(q_more, k, v, mask="none",
                   score_mod=lambda s, h, qp, kp: s + (qp < 0) * kp)
close(m["attn"](q_more, k, v), ref, 1e-5, "index values past 32 bits")

# Errors of the tracer: TypeError, before anything is compiled.
def raises(error, fn, text):
    try:
        fn()
    except error as e:
        assert text in str(e), f"{text!r} not in {e}"
        return
    raise AssertionError(f"no {error.__name__} ({text})")


raises(TypeError, lambda: attn.score_mod(lambda s, b, h, qp, kp:
                                         s if s > 0 else 0.0),
       "attn.where(c, a, b) for if/else")
captured = np.ones(H, np.float32)
raises(TypeError, lambda: attn.score_mod(lambda s, b, h, qp, kp:
                                         s + captured[h]),
       "reads tensors only through arguments declared with attn.Input")
raises(TypeError, lambda: attn.mask_mod(lambda b, h, qp, kp: qp - kp),
       "returns an integer; expected a boolean")
raises(TypeError, lambda: attn.mask_mod(lambda b, h, qp: qp > 0),
       "takes 3 arguments; expected (b, h, qp, kp)")
raises(TypeError, lambda: attn.score_mod(lambda s, b, h, qp, kp: s & s),
       "& takes booleans (comparisons), got a float and a float")
raises(IndexError, lambda: attn.score_mod(
    lambda s, b, h, qp, kp, t: s + t[h], t=attn.Input([H, 2])),
    "input 't' has 2 dims, indexed with 1")
raises(TypeError, lambda: attn.score_mod(lambda s, b, h, qp, kp, t: s,
                                         t=np.zeros(3)),
       "input 't' must be an attn.Input")
raises(ValueError, lambda: attn.Input([4], "f64"), "dtype 'f64'")

# Errors of a function's attn IR: attn.Error naming the JSON path, then
# line and column in the text.
IR = """func.func @f(%s: f32, %b: index, %h: index, %qp: index, %kp: index,
    %t: tensor<?xf32> {attn.name = "bias"}) -> f32 {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %t, %c0 : tensor<?xf32>
  %i = arith.index_cast %n : index to i64
  %f = arith.sitofp %i : i64 to f32
  %r = arith.addf %s, %f : f32
  return %r : f32
}"""
raises(attn.Error, lambda: model(score_mod={"func": IR}),
       "$.layers[0].score_mod.func:1:1: error: 'attn.sdpa' op 'score_mod' "
       "may hold only arith, math and tensor.extract ops and attn.yield, got "
       "'tensor.dim'")
raises(attn.Error, lambda: model(mask_mod={"func": IR}),
       "$.layers[0].mask_mod.func:1:1: error: a mask_mod function takes "
       "(b, h, qp, kp: index), then the tensors it reads")
raises(attn.Error, lambda: model(score_mod={"func": IR.replace("{", "(", 1)}),
       "$.layers[0].score_mod.func:2:")
raises(attn.Error, lambda: model(score_mod={"func": IR.replace('"bias"',
                                                               '"k"')}),
       "$.layers[0].score_mod.func:2:5: error: input 'k' is already an "
       "input of the entry")
print("variants: all checks passed")

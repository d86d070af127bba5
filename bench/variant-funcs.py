"""Variants written as Python functions (attn.score_mod / attn.mask_mod,
traced into a model description's {"func": ...} attn IR) beside the same
variants named in the description and plain causal attention, on the CPU,
in one run with the calls interleaved: what a traced variant costs over
the built-in one. Causal prefill, B = 1, H = 8, Hkv = 2, D = 128 by default
(the shape of bench/RESULTS.md's variants table); medians of 11 calls after
a warm-up, milliseconds.

    PYTHONPATH=build/python python3 bench/variant-funcs.py [--length L]
"""
import argparse

import numpy as np

import attn
from paged_cache import median_ms

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--length", type=int, default=4096)
parser.add_argument("--documents", type=int, default=8)
args = parser.parse_args()

H, HKV, D, L = 8, 2, 128, args.length
layer = {"name": "attn", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D}


def compile_layer(**keys):
    return attn.compile({"model": "m", "layers": [dict(layer, **keys)]},
                        threads=args.threads)["attn"]


def alibi_slope(h):
    n = 1 << (H.bit_length() - 1)
    return 2.0 ** (-8 * (h + 1) / n) if h < n else \
        2.0 ** (-4 * (2 * (h - n) + 1) / n)


rng = np.random.default_rng(0)
q = rng.standard_normal((1, H, L, D)).astype(np.float32)
k = rng.standard_normal((1, HKV, L, D)).astype(np.float32)
v = rng.standard_normal((1, HKV, L, D)).astype(np.float32)
slopes = np.array([alibi_slope(h) for h in range(H)], np.float32)
docs = np.repeat(np.arange(args.documents, dtype=np.int32),
                 -(-L // args.documents))[None, :L]

plain = compile_layer()
named_alibi = compile_layer(score_mod="alibi")
traced_alibi = compile_layer(score_mod=attn.score_mod(
    lambda s, b, h, qp, kp, slopes: s - slopes[h] * (qp - kp),
    slopes=attn.Input([H])))
named_document = compile_layer(mask_mod="document")
traced_document = compile_layer(mask_mod=attn.mask_mod(
    lambda b, h, qp, kp, doc_ids: doc_ids[b, qp] == doc_ids[b, kp],
    doc_ids=attn.Input([None, None], "i32")))

calls = {
    "plain causal": lambda: plain(q, k, v),
    "ALiBi, named (\"alibi\")": lambda: named_alibi(q, k, v),
    "ALiBi, traced (slopes an input)": lambda: traced_alibi(q, k, v, slopes),
    "document mask, named (\"document\")": lambda: named_document(q, k, v,
                                                                  docs),
    "document mask, traced": lambda: traced_document(q, k, v, docs),
}
assert np.allclose(calls["ALiBi, named (\"alibi\")"](),
                   calls["ALiBi, traced (slopes an input)"](), atol=1e-5)
assert np.allclose(calls["document mask, named (\"document\")"](),
                   calls["document mask, traced"](), atol=1e-5)

times = median_ms(*calls.values(), runs=11)
print(f"causal prefill, B=1 H={H} Hkv={HKV} D={D} L={L}, "
      f"{args.documents} documents, threads={args.threads or 'all'}")
print("| variant | ms | x plain causal |")
print("|---|---|---|")
for name, ms in zip(calls, times):
    print(f"| {name} | {ms:.2f} | {ms / times[0]:.3f} |")

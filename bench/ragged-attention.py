"""A ragged batch through a softmax attention layer on the CPU (SPEC §8,
issue: serving layouts): one long prefill and many short sequences packed
token-major in one call, causal, GQA, beside the same work without the
ragged layout, all in one run:

  * ragged: one call over `--long` + `--short` x `--count` tokens, its
    work planned over the real lengths (flash tiles of each sequence);
  * separate: one dense call per sequence (what a caller does without the
    ragged layout);
  * padded: the dense entry on [count + 1, H, long, D] (every sequence
    padded to the longest, what a batch of equal lengths needs; the causal
    mask leaves each short sequence attending over its padding), timed
    once.

The targets: ragged at most the separate calls' time (the same arithmetic,
one call) and a small fraction of the padded call's. A mixed batch (the
long prefill beside `--count` decode rows over `--context` keys each) is
timed too, against its sequences called separately. Medians of `--runs`
runs after a warm-up (the ragged and separate runs interleaved), in
milliseconds.

    PYTHONPATH=build/python python3 bench/ragged-attention.py [--threads N]
"""
import argparse
import statistics
import time

import numpy as np

import attn

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--long", type=int, default=8192)
parser.add_argument("--short", type=int, default=128)
parser.add_argument("--count", type=int, default=63)
parser.add_argument("--context", type=int, default=2048)
parser.add_argument("--heads", type=int, default=8)
parser.add_argument("--kv-heads", type=int, default=2)
parser.add_argument("--dim", type=int, default=64)
parser.add_argument("--runs", type=int, default=9)
parser.add_argument("--skip-padded", action="store_true",
                    help="the padded call takes minutes at the defaults")
args = parser.parse_args()

H, HKV, D = args.heads, args.kv_heads, args.dim
layer = {"name": "attn", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D}
dense = attn.compile({"model": "dense", "layers": [layer]},
                     threads=args.threads)
ragged = attn.compile({"model": "ragged", "layers": [
    dict(layer, layout={"ragged": True})]}, threads=args.threads)
rng = np.random.default_rng(0)
f = lambda *s: rng.standard_normal(s).astype(np.float32)


def median_ms(*fns):
    """Each function's median time, the runs interleaved (this machine's
    speed drifts over seconds: alternating keeps the ratio fair)."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(args.runs):
        for fn, out in zip(fns, times):
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(t) for t in times]


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def per_sequence(x, cu, b):
    """Sequence b of a packed [T, H, F] array as [1, H, L, F]."""
    return np.ascontiguousarray(np.moveaxis(x[cu[b]:cu[b + 1]], 0, 1)[None])


def compare(title, q_lengths, k_lengths, padded):
    cu_q, cu_k = offsets(q_lengths), offsets(k_lengths)
    q = f(cu_q[-1], H, D)
    k, v = f(cu_k[-1], HKV, D), f(cu_k[-1], HKV, D)
    sequences = [(per_sequence(q, cu_q, b), per_sequence(k, cu_k, b),
                  per_sequence(v, cu_k, b)) for b in range(len(q_lengths))]

    def separate():
        for qb, kb, vb in sequences:
            dense["attn"](qb, kb, vb)

    ragged_ms, separate_ms = median_ms(
        lambda: ragged["attn"](q, k, v, cu_q, cu_k), separate)
    print(title)
    print(f"  ragged (one call)       {ragged_ms:10.2f} ms")
    print(f"  separate (one per seq.) {separate_ms:10.2f} ms   "
          f"ragged/separate = {ragged_ms / separate_ms:.2f}x")
    if not padded:
        return
    B, Lq, Lk = len(q_lengths), max(q_lengths), max(k_lengths)
    qp, kp, vp = (np.zeros((B, H, Lq, D), np.float32),
                  np.zeros((B, HKV, Lk, D), np.float32),
                  np.zeros((B, HKV, Lk, D), np.float32))
    for b, (qb, kb, vb) in enumerate(sequences):
        qp[b, :, Lq - q_lengths[b]:] = qb[0]
        kp[b, :, Lk - k_lengths[b]:] = kb[0]
        vp[b, :, Lk - k_lengths[b]:] = vb[0]
    # One run: it takes 60x the others.
    start = time.perf_counter()
    dense["attn"](qp, kp, vp)
    padded_ms = (time.perf_counter() - start) * 1e3
    print(f"  padded to {Lq:<6d}        {padded_ms:10.2f} ms   "
          f"ragged/padded = {ragged_ms / padded_ms:.3f}x")


print(f"softmax attention, causal, H={H} Hkv={HKV} D={D}, "
      f"threads={args.threads or 'all'}")
prefill = [args.long] + [args.short] * args.count
compare(f"prefill: one sequence of {args.long} + {args.count} of "
        f"{args.short} tokens", prefill, prefill, not args.skip_padded)
compare(f"mixed: one prefill of {args.long} + {args.count} decode rows over "
        f"{args.context} keys", [args.long] + [1] * args.count,
        [args.long] + [args.context] * args.count, False)

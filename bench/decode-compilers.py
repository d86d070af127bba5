"""CPU decode compiled by two (or more) attnc builds, side by side in one
run: for judging a change to the split-KV kernel on this machine, whose
speed drifts too much between runs for separate ones to compare. Each
shape is a decode call (Lq = 1, f32 unless --dtype) of B sequences over Lk
keys each from DRAM; medians of interleaved runs, milliseconds, the GB/s
of K and V read, and each build's time over the first's. With --page P,
each build also runs the same keys from a paged cache (pages of P keys
scattered as bench/paged-decode.py scatters them), and each cell adds its
paged time and paged / contiguous. With --top-k K the layer is Quest top-k sparse decode
(K blocks of 16 keys, or of a page; one sink and one local block), each
build's block bounds computed by its own `.meta` entry before the timing.

    PYTHONPATH=build/python python3 bench/decode-compilers.py \\
        OLD_ATTNC NEW_ATTNC [--shape B,H,HKV,D,LK ...] [--page P] [--top-k K]

Build the old compiler in a worktree of the old commit
(`git worktree add /tmp/old COMMIT`, then the README's build there).
"""
import argparse
import os

import numpy as np

import attn
from paged_cache import median_ms, scatter_into_pages

parser = argparse.ArgumentParser()
parser.add_argument("attnc", nargs="+", help="attnc binaries, the first the base")
parser.add_argument("--shape", action="append",
                    help="B,H,HKV,D,LK (default: Qwen3-Next's 1,16,2,256 at "
                         "32K keys, GQA-4 at D = 256, GQA-8 and -4 at "
                         "D = 128, MHA)")
parser.add_argument("--page", type=int, default=0)
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--top-k", type=int, default=0,
                    help="Quest top-k decode of this many blocks")
args = parser.parse_args()

shapes = [tuple(int(x) for x in s.split(",")) for s in args.shape or
          ["1,16,2,256,32768", "1,8,2,256,32768", "1,32,4,128,32768",
           "1,8,2,128,65536", "1,8,8,128,16384"]]
element_bytes = {"f32": 4, "bf16": 2}[args.dtype]


def stored(x):
    """x as the entry's storage: bf16 as its bit patterns (uint16,
    rounded to nearest even), which the package takes for bf16."""
    if args.dtype == "f32":
        return x
    bits = x.view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def widened(o):
    o = np.asarray(o)
    if o.dtype == np.uint16:
        return (o.astype(np.uint32) << 16).view(np.float32)
    return o


def compile_with(attnc, layer):
    """The decode entry of `layer` compiled by `attnc`; with --top-k, a
    function of the entry's other inputs that passes it their block
    bounds, which the build's `.meta` entry computes once here."""
    os.environ["ATTN_ATTNC"] = attnc
    model = attn.compile({"model": "decode", "dtype": args.dtype,
                          "layers": [layer]}, threads=args.threads)
    if not args.top_k:
        return model["attn"]

    def sparse(q, k, v, *table_and_lengths):
        if not hasattr(sparse, "meta"):
            sparse.meta = model["attn.meta"](k, *table_and_lengths)
        return model["attn"](q, k, v, *table_and_lengths, sparse.meta)
    return sparse


def sparsified(layer, block):
    if not args.top_k:
        return layer
    return dict(layer, sparsity={"method": "top_k", "block_size": block,
                                 "top_k": args.top_k, "sink_blocks": 1,
                                 "local_blocks": 1})


print(f"decode, Lq = 1, {args.dtype}, threads={args.threads or 'all'}"
      + (f", Quest top-{args.top_k}" if args.top_k else "")
      + (f", paged: pages of {args.page} scattered" if args.page else "")
      + f"; base: {args.attnc[0]}")
rng = np.random.default_rng(0)
for B, H, HKV, D, LK in shapes:
    layer = sparsified({"name": "attn", "type": "attention",
                        "num_heads": H, "num_kv_heads": HKV, "head_dim": D},
                       args.page or 16)
    q, k, v = (rng.standard_normal(shape).astype(np.float32)
               for shape in ((B, H, 1, D), (B, HKV, LK, D), (B, HKV, LK, D)))
    calls = [[lambda f=compile_with(a, layer), x=stored(q), y=stored(k),
              z=stored(v): f(x, y, z)] for a in args.attnc]
    if args.page:
        paged_layer = sparsified(dict(layer, layout={"page_size": args.page}),
                                 args.page)
        k_cache, v_cache, table = scatter_into_pages(k, v, args.page, rng)
        lengths = np.full(B, LK, np.int32)
        for a, pair in zip(args.attnc, calls):
            pair.append(lambda f=compile_with(a, paged_layer), x=stored(q),
                        y=stored(k_cache), z=stored(v_cache): f(
                            x, y, z, table, lengths))
    outputs = [widened(call()) for pair in calls for call in pair]
    for o in outputs[1:]:
        assert np.allclose(o, outputs[0], atol=1e-2 if args.dtype == "bf16"
                           else 1e-5), "the builds or layouts disagree"
    traffic = 2 * B * HKV * LK * D * element_bytes
    for _ in range(args.rounds):
        times = median_ms(*[call for pair in calls for call in pair])
        per_build = len(calls[0])
        cells = []
        for n in range(len(calls)):
            t = times[n * per_build]
            # Top-k reads only its blocks: no dense traffic to divide.
            rate = "" if args.top_k else f"{traffic / t / 1e6:5.1f} GB/s "
            cell = f"{t:7.2f} ms {rate}{t / times[0]:.2f}x"
            if args.page:
                paged = times[n * per_build + 1]
                cell += f", paged {paged:7.2f} ms {paged / t:.2f}x"
            cells.append(cell)
        print(f"B={B} H={H:2} Hkv={HKV} D={D:3} Lk={LK:6}: "
              + " | ".join(cells), flush=True)

"""DeepSeek-V3's MLA decode on the CPU, its two forms side by side in one
run (one tensor-parallel rank's 16 heads by default, B sequences of L
keys): `latent_attention` over the compressed cache (one kv head of 512 +
64 features, the values its first 512, read in place) against
`full_attention` over the same keys expanded per head (16 kv heads of 192
features, values of 128), which is what a cache without MLA's absorption
would hold. The latent form reads 9x fewer bytes per key and does 3.4x more
multiply-adds (every head scores 576 features and sums 512); which wins
depends on whether the machine is bound by memory or by arithmetic. Medians
of 21 interleaved runs after a warm-up, milliseconds, beside the machine's
ceilings measured in the same run: its copy bandwidth and NumPy's sgemm
(OpenBLAS) GFLOP/s. The outputs are checked to agree through W_UV first.

    PYTHONPATH=build/python python3 bench/mla-decode.py [--threads N]
"""
import argparse
import json
import math
import os

import numpy as np

import attn
from paged_cache import median_ms

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--keys", type=int, nargs="+", default=[4096, 16384])
parser.add_argument("--heads", type=int, default=16)
args = parser.parse_args()

here = os.path.dirname(os.path.abspath(__file__))
config = json.load(open(os.path.join(here, os.pardir, "examples",
                                     "deepseek-v3", "config.json")))
config["num_attention_heads"] = args.heads
model = attn.compile(config, threads=args.threads)
H, B = args.heads, args.batch
NOPE, ROPE = config["qk_nope_head_dim"], config["qk_rope_head_dim"]
RANK, DV = config["kv_lora_rank"], config["v_head_dim"]

rng = np.random.default_rng(0)
w_uk = (rng.standard_normal((H, NOPE, RANK)) / math.sqrt(RANK)).astype(np.float32)
w_uv = (rng.standard_normal((H, DV, RANK)) / math.sqrt(RANK)).astype(np.float32)
print(f"MLA decode, B={B} H={H}, latent {RANK}+{ROPE} vs expanded "
      f"{NOPE + ROPE}/{DV}, f32, threads={args.threads or 'all'}")
for L in args.keys:
    latent = rng.standard_normal((B, L, RANK)).astype(np.float32)
    k_pe = rng.standard_normal((B, L, ROPE)).astype(np.float32)
    q_nope = rng.standard_normal((B, H, 1, NOPE)).astype(np.float32)
    q_pe = rng.standard_normal((B, H, 1, ROPE)).astype(np.float32)
    kv = np.ascontiguousarray(np.concatenate([latent, k_pe], -1)[:, None])
    q_absorbed = np.ascontiguousarray(np.concatenate(
        [np.einsum("bhqn,hnr->bhqr", q_nope, w_uk), q_pe], -1))
    k = np.ascontiguousarray(np.concatenate(
        [np.einsum("blr,hnr->bhln", latent, w_uk),
         np.broadcast_to(k_pe[:, None], (B, H, L, ROPE))], -1))
    v = np.ascontiguousarray(np.einsum("blr,hvr->bhlv", latent, w_uv))
    q = np.ascontiguousarray(np.concatenate([q_nope, q_pe], -1))

    o_expanded = model["full_attention"](q, k, v)
    o_latent = model["latent_attention"](q_absorbed, kv)
    through = np.einsum("bhqr,hvr->bhqv", o_latent, w_uv)
    error = np.abs(through - o_expanded).max() / np.abs(o_expanded).max()
    assert error < 1e-4, error

    latent_ms, expanded_ms = median_ms(
        lambda: model["latent_attention"](q_absorbed, kv),
        lambda: model["full_attention"](q, k, v))
    source = np.ones(kv.nbytes // 4, np.float32)
    target = np.empty_like(source)
    a = rng.standard_normal((1024, 1024)).astype(np.float32)
    copy_ms, sgemm_ms = median_ms(lambda: np.copyto(target, source),
                                  lambda: a @ a)
    bandwidth = 2 * source.nbytes / copy_ms / 1e6
    sgemm = 2 * 1024 ** 3 / sgemm_ms / 1e6
    # A multiply-add per head and feature of each key's scores and values.
    latent_flops = 2 * B * H * L * (RANK + ROPE + RANK)
    expanded_flops = 2 * B * H * L * (NOPE + ROPE + DV)
    print(f"L={L:6d}  latent {latent_ms:7.3f} ms "
          f"({kv.nbytes / latent_ms / 1e6:5.1f} GB/s, "
          f"{latent_flops / latent_ms / 1e6:5.1f} GFLOP/s)  expanded "
          f"{expanded_ms:7.3f} ms "
          f"({(k.nbytes + v.nbytes) / expanded_ms / 1e6:5.1f} GB/s, "
          f"{expanded_flops / expanded_ms / 1e6:5.1f} GFLOP/s)  "
          f"latent/expanded = {latent_ms / expanded_ms:.2f}x;  ceilings: "
          f"copy {bandwidth:.1f} GB/s, sgemm {sgemm:.1f} GFLOP/s")

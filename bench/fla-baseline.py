#!/usr/bin/env python3
"""The anchor of cuda-attention-bench's Gated DeltaNet table (issue: GPU
speed, item 3): flash-linear-attention's Triton kernels at the same sizes,
timed the same way (CUDA events around the call, median of --repeat after
a warm-up; and again replayed from a CUDA graph, without Python's
launches), on the same GPU in the same session:

  * chunk_gated_delta_rule (prefill): Qwen3-Next's linear layers, 16 key
    heads, 32 value heads, Dk = Dv = 128, bf16, q and k l2-normalised in
    the kernel, log-decays in [-0.1, 0), beta in (0, 1], an f32 initial
    state in and the final state out; B = 1 at L = 4K, 16K and 64K, B = 8
    at 4K;
  * fused_recurrent_gated_delta_rule (decode): one token per sequence with
    its state in and out, B = 1 and 32;
  * chunk_kda and fused_recurrent_kda: Kimi Linear's KDA layers (32 heads
    for q, k and v, Dk = Dv = 128, a log-decay per key feature in
    [-0.1, 0)), B = 1 and 8 at L = 4K, and decode at B = 32.

FLA and einops come from bench/third_party (the GPU machines reach no
package index); FLA needs PyTorch >= 2.7 with Triton.

    python3 bench/fla-baseline.py [--repeat N] [--quick]
"""
import pathlib
import sys

import torch

from cuda_events import graph_median_ms, median_ms, session_args

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "third_party"))

K_HEADS, V_HEADS, DIM = 16, 32, 128


def inputs(batch, length):
    """FLA's layout, [B, T, H, D], with cuda-attention-bench's values."""
    def uniform(*shape):
        return torch.rand(*shape, device="cuda") * 2 - 1
    q = uniform(batch, length, K_HEADS, DIM).bfloat16()
    k = uniform(batch, length, K_HEADS, DIM).bfloat16()
    v = uniform(batch, length, V_HEADS, DIM).bfloat16()
    g = (-0.05 * (uniform(batch, length, V_HEADS) + 1) - 1e-3).bfloat16()
    beta = (0.5 * (uniform(batch, length, V_HEADS) + 1)).bfloat16()
    state = 0.01 * uniform(batch, V_HEADS, DIM, DIM)
    return q, k, v, g, beta, state


KDA_HEADS = 32


def kda_inputs(batch, length):
    """Kimi Linear's shape: q, k, v and g [B, T, 32, 128], beta [B, T, 32]."""
    def uniform(*shape):
        return torch.rand(*shape, device="cuda") * 2 - 1
    q, k, v = (uniform(batch, length, KDA_HEADS, DIM).bfloat16()
               for _ in range(3))
    g = (-0.05 * (uniform(batch, length, KDA_HEADS, DIM) + 1) - 1e-3).bfloat16()
    beta = (0.5 * (uniform(batch, length, KDA_HEADS) + 1)).bfloat16()
    state = 0.01 * uniform(batch, KDA_HEADS, DIM, DIM)
    return q, k, v, g, beta, state


def main():
    args = session_args()
    try:
        import triton
        from fla.ops.gated_delta_rule import (chunk_gated_delta_rule,
                                              fused_recurrent_gated_delta_rule)
    except Exception as error:
        print(f"FLA: unavailable: {error!r}")
        return 1
    print("triton", triton.__version__)

    print("\n| FLA (Hk = 16, Hv = 32, D = 128, bf16) | B | L | ms | M tokens/s |")
    print("|---|---|---|---|---|")
    # B = 8 even when quick: attn's chain takes other blocks there.
    sizes = ([(1, 4096), (8, 4096)] if args.quick
             else [(1, 4096), (1, 16384), (1, 65536), (8, 4096)])

    def row(name, kernel, batch, length, make_inputs=inputs):
        """Times `kernel` on a batch of `batch` sequences of `length`
        tokens, each with its state in and out, as two table rows: called
        from Python as a model would (launches included), and replayed
        from a CUDA graph (the kernels alone, the steadier anchor: on an
        H100 the first varied 2x between two sessions)."""
        q, k, v, g, beta, state = make_inputs(batch, length)

        def call():
            return kernel(q, k, v, g=g, beta=beta, initial_state=state,
                          output_final_state=True,
                          use_qk_l2norm_in_kernel=True)

        for suffix, timer in (("", median_ms), (", CUDA graph", graph_median_ms)):
            label = f"| FLA {name}{suffix} | {batch} | {length} |"
            try:
                ms = timer(call, args.repeat)
                print(label, f"{ms:.4f} | {batch * length / ms / 1e3:.2f} |")
            except Exception as error:
                print(label, f"failed: {error!r} | |")

    for batch, length in sizes:
        row("chunk_gated_delta_rule", chunk_gated_delta_rule, batch, length)
    for batch in (1, 32):
        row("fused_recurrent_gated_delta_rule",
            fused_recurrent_gated_delta_rule, batch, 1)
    try:
        from fla.ops.kda import chunk_kda, fused_recurrent_kda
    except Exception as error:
        print(f"FLA KDA: unavailable: {error!r}")
        return 0
    print("\n| FLA KDA (H = 32, D = 128, bf16) | B | L | ms | M tokens/s |")
    print("|---|---|---|---|---|")
    for batch, length in ((1, 4096), (8, 4096)):
        row("chunk_kda", chunk_kda, batch, length, kda_inputs)
    row("fused_recurrent_kda", fused_recurrent_kda, 32, 1, kda_inputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

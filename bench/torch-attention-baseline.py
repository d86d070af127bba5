#!/usr/bin/env python3
"""The ceilings of bench/cuda-attention-bench, measured with PyTorch on the
same GPU in the same session (issue NVVM's benchmark):

  * prefill, bf16, dense and causal, D = 64, 128 and 256 (H = 2048 / D) at
    L = 4K, 8K and 16K (B = 16K / L): TFLOP/s of visible work for
    scaled_dot_product_attention's flash and cuDNN backends, and
    FlexAttention (torch.compile'd) at D = 128;
  * the card's copy bandwidth (a 1 GiB device-to-device copy, counted as
    bytes read + written, as the CPU benchmarks count memcpy);
  * FlexAttention on the variants of cuda-attention-bench's variants table
    (ALiBi, a relative-bias table, a document mask), the anchor to beat.

Timed with CUDA events, median of --repeat runs after warm-up. Divide
cuda-attention-bench's numbers by these for the ratios in RESULTS.md.
"""

import torch
import torch.nn.functional as F

from cuda_events import median_ms, session_args


def variants(args, length):
    """FlexAttention's times for cuda-attention-bench's variants table
    (SPEC §7): causal prefill, B=4, H=32, Hkv=8, D=128, bf16, with ALiBi, a
    relative-bias table (R = 64) and a document mask of 8 documents, beside
    plain causal."""
    batch, heads, kv_heads, dim, radius = 4, 32, 8, 128, 64
    try:
        from torch.nn.attention.flex_attention import (create_block_mask,
                                                       flex_attention)
    except Exception as error:  # an older torch
        print(f"\nFlexAttention variants: failed: {error!r}")
        return
    flex = torch.compile(flex_attention)
    q = torch.randn(batch, heads, length, dim, device="cuda",
                    dtype=torch.bfloat16)
    k, v = (torch.randn(batch, kv_heads, length, dim, device="cuda",
                        dtype=torch.bfloat16) for _ in range(2))
    n = 1 << (heads.bit_length() - 1)
    slopes = torch.tensor(
        [2.0 ** (-8.0 * (h + 1) / n) if h < n
         else 2.0 ** (-4.0 * (2 * (h - n) + 1) / n) for h in range(heads)],
        device="cuda")
    table = (torch.arange(heads * (2 * radius + 1), device="cuda") % 17
             ).float().reshape(heads, 2 * radius + 1) * 0.01
    docs = (torch.arange(length, device="cuda") * 8 // length).int()

    def causal(b, h, qi, ki):
        return qi >= ki

    def document(b, h, qi, ki):
        return (qi >= ki) & (docs[qi] == docs[ki])

    def alibi(score, b, h, qi, ki):
        return score - slopes[h] * (qi - ki)

    def relative_bias(score, b, h, qi, ki):
        return score + table[h, (ki - qi).clamp(-radius, radius) + radius]

    causal_mask = create_block_mask(causal, None, None, length, length)
    document_mask = create_block_mask(document, None, None, length, length)
    rows = [("plain causal", None, causal_mask),
            ("alibi", alibi, causal_mask),
            ("relative_bias R = 64", relative_bias, causal_mask),
            ("document (8 documents)", None, document_mask)]
    print("\n| causal prefill variant | FlexAttention ms | x plain causal |")
    print("|---|---|---|")
    plain = None
    for name, score_mod, mask in rows:
        try:
            ms = median_ms(lambda: flex(q, k, v, score_mod=score_mod,
                                        block_mask=mask, enable_gqa=True),
                           args.repeat)
        except Exception as error:
            print(f"| {name} | failed: {error!r} | |")
            continue
        plain = plain or ms
        print(f"| {name} | {ms:.3f} | {ms / plain:.3f} |")


def prefill(args):
    """Prefill as cuda-attention-bench sweeps it (FlashAttention-3's setup:
    16K tokens per call, B = 16K / L, H = 2048 / D), through each of
    PyTorch's SDPA backends that runs here, SDPA's memory-efficient
    backend on f32 copies, and FlexAttention at D = 128 (each shape is a
    compilation of its own)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("SDPA flash", SDPBackend.FLASH_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append(("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION))
    try:
        from torch.nn.attention.flex_attention import (create_block_mask,
                                                       flex_attention)
        import torch._dynamo
        torch._dynamo.config.cache_size_limit = 64
        flex = torch.compile(flex_attention)
    except Exception as error:  # no Triton, an older torch, ...
        print(f"FlexAttention: unavailable: {error!r}")
        flex = None
    lengths = [4096] if args.quick else [4096, 8192, 16384]
    dims = [128] if args.quick else [64, 128, 256]
    print("| prefill | implementation | B | H | L | D | ms | TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for dim in dims:
        heads = 2048 // dim
        for causal in (False, True):
            name = "causal" if causal else "dense"
            for length in lengths:
                batch = max(1, 16384 // length)
                q, k, v = (torch.randn(batch, heads, length, dim,
                                       device="cuda", dtype=torch.bfloat16)
                           for _ in range(3))
                pairs = length * (length + 1) / 2 if causal else length ** 2
                flops = 4.0 * dim * pairs * batch * heads
                row = f"| {name} | {{}} | {batch} | {heads} | {length} | {dim} |"
                for label, backend in backends:
                    try:
                        with sdpa_kernel(backend):
                            ms = median_ms(
                                lambda: F.scaled_dot_product_attention(
                                    q, k, v, is_causal=causal), args.repeat)
                        print(row.format(label),
                              f"{ms:.3f} | {flops / ms / 1e9:.1f} |")
                    except Exception as error:
                        print(row.format(label), f"failed: {error!r} | |")
                # The f32 anchor (SPEC's default dtype; cuda-attention-bench's
                # "mma.sync, f32" row): SDPA's memory-efficient backend,
                # which takes f32, as PyTorch's defaults leave it.
                label = "SDPA efficient, f32"
                try:
                    q32, k32, v32 = (x.float() for x in (q, k, v))
                    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                        ms = median_ms(
                            lambda: F.scaled_dot_product_attention(
                                q32, k32, v32, is_causal=causal), args.repeat)
                    print(row.format(label),
                          f"{ms:.3f} | {flops / ms / 1e9:.1f} |")
                    del q32, k32, v32
                except Exception as error:
                    print(row.format(label), f"failed: {error!r} | |")
                if flex is None or dim != 128:
                    continue
                try:
                    mask = None
                    if causal:
                        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki,
                                                 None, None, length, length)
                    ms = median_ms(lambda: flex(q, k, v, block_mask=mask),
                                   args.repeat)
                    print(row.format("FlexAttention"),
                          f"{ms:.3f} | {flops / ms / 1e9:.1f} |")
                except Exception as error:
                    print(row.format("FlexAttention"), f"failed: {error!r} | |")
                del q, k, v


def main():
    args = session_args()
    prefill(args)
    length = 1024 if args.quick else 4096
    variants(args, length)
    source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    ms = median_ms(lambda: target.copy_(source), args.repeat)
    print(f"\ncopy: {2 * source.numel() / ms / 1e6:.1f} GB/s "
          "(read + written)")


if __name__ == "__main__":
    main()

// RUN: attn-opt %s -verify-diagnostics -attn-warp-mma-to-nvvm=chip=sm_80 -o /dev/null
// RUN: attn-opt %s -verify-diagnostics -attn-warp-mma-to-nvvm=chip=sm_100a -o /dev/null

// wgmma exists on sm_90a alone.
func.func @not_sm90a(%q: memref<8x2x8x8xbf16>, %k: memref<1x2x8x8xbf16>, %s: memref<1x4xf32>, %row: index, %lane: index) {
  // expected-error @+1 {{a warpgroup product (wgmma) needs sm_90a, not}}
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(8) k(16) {rhs_transposed, acc_fragment, warpgroup}
      : memref<8x2x8x8xbf16>, memref<1x2x8x8xbf16>, memref<1x4xf32>
  return
}

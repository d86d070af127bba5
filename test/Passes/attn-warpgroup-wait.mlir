// RUN: attn-opt %s -attn-warp-mma-to-loops | FileCheck %s

// On the CPU (-attn-warp-mma-to-loops) an async warpgroup product is done
// when it runs, so attn_kernel.warpgroup_wait has nothing to wait for and
// is erased; the product becomes its loops like any other.
// CHECK-LABEL: func.func @overlapped
// CHECK-NOT:     attn_kernel
// CHECK:         scf.for
// CHECK-NOT:     attn_kernel
// CHECK:         return
func.func @overlapped(%q: memref<8x16x8x8xbf16>, %k: memref<8x16x8x8xbf16>, %s: memref<8x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(64) k(128) {rhs_transposed, acc_fragment, warpgroup, async}
      : memref<8x16x8x8xbf16>, memref<8x16x8x8xbf16>, memref<8x4xf32>
  attn_kernel.warpgroup_wait {pending = 1}
  attn_kernel.warpgroup_wait
  return
}

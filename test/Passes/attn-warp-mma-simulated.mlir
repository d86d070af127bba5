// RUN: attn-opt %s -attn-warp-mma-to-nvvm=chip=sm_90a -canonicalize -cse | %python %S/Inputs/simulate-warp-mma.py %s | FileCheck %s

// The tensor-core form of attn_kernel.warp_mma (WarpMma.cpp) run on a
// simulated warp (Inputs/simulate-warp-mma.py): 32 lanes in lockstep over
// random operands, each mma.sync and ldmatrix taking and giving its
// fragments where PTX's ISA puts them, the result compared with the op's
// definition in float64. A fragment element placed on the wrong lane, k
// or register gives a wrong sum; for f32 (three tf32 mma.sync a step of
// 8), one tf32 rounding instead of the three-product split gives errors
// near 2^-11, past the bound of 2^-19 of sum |a b|.

// Natural k slots (t, t + 4): B is k's rows (transposed); rows from 16.
// CHECK: scores_f32: max error {{.+}}: ok
func.func @scores_f32(%q: memref<32x20xf32>, %k: memref<16x20xf32>, %s: memref<32x16xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(16) k(16) {rhs_transposed}
      : memref<32x20xf32>, memref<16x20xf32>, memref<32x16xf32>
  return
}

// Paired k slots (2t, 2t + 1): B read down its columns, accumulating.
// CHECK: pv_f32: max error {{.+}}: ok
func.func @pv_f32(%p: memref<16x36xf32>, %v: memref<32x20xf32>, %o: memref<16x16xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(16) k(32) {accumulate}
      : memref<16x36xf32>, memref<32x20xf32>, memref<16x16xf32>
  return
}

// A from the lane's own fragments (P in registers) into a fragment
// accumulator, two row tiles sharing each B fragment.
// CHECK: pv_own_fragments_f32: max error {{.+}}: ok
func.func @pv_own_fragments_f32(%p: memref<8x4xf32>, %v: memref<32x20xf32>, %o: memref<4x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(16) k(32) {acc_fragment, accumulate, lhs_fragment, row_tiles = 2 : i64}
      : memref<8x4xf32>, memref<32x20xf32>, memref<4x4xf32>
  return
}

// Scores into a fragment accumulator, B transposed, two row tiles.
// CHECK: scores_fragment_f32: max error {{.+}}: ok
func.func @scores_fragment_f32(%q: memref<48x20xf32>, %k: memref<24x20xf32>, %s: memref<6x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(24) k(16) {acc_fragment, rhs_transposed, row_tiles = 2 : i64}
      : memref<48x20xf32>, memref<24x20xf32>, memref<6x4xf32>
  return
}

// bf16 (mma.sync m16n8k16): A and k's rows through ldmatrix .x4, rows from
// 16.
// CHECK: scores_bf16: max error {{.+}}: ok
func.func @scores_bf16(%q: memref<32x24xbf16, #gpu.address_space<workgroup>>, %k: memref<16x24xbf16, #gpu.address_space<workgroup>>, %s: memref<2x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(16) k(16) {acc_fragment, rhs_transposed}
      : memref<32x24xbf16, #gpu.address_space<workgroup>>, memref<16x24xbf16, #gpu.address_space<workgroup>>, memref<2x4xf32>
  return
}

// v read down its columns by ldmatrix .trans, three blocks of 8 columns
// (the last an .x2), accumulating.
// CHECK: pv_bf16: max error {{.+}}: ok
func.func @pv_bf16(%p: memref<16x40xbf16, #gpu.address_space<workgroup>>, %v: memref<32x40xbf16, #gpu.address_space<workgroup>>, %o: memref<3x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(24) k(32) {acc_fragment, accumulate}
      : memref<16x40xbf16, #gpu.address_space<workgroup>>, memref<32x40xbf16, #gpu.address_space<workgroup>>, memref<3x4xf32>
  return
}

// P from the lane's own f32 fragments, rounded to bf16 and packed; two
// row tiles sharing each B fragment.
// CHECK: pv_own_fragments_bf16: max error {{.+}}: ok
func.func @pv_own_fragments_bf16(%p: memref<8x4xf32>, %v: memref<32x24xbf16, #gpu.address_space<workgroup>>, %o: memref<4x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(16) k(32) {acc_fragment, accumulate, lhs_fragment, row_tiles = 2 : i64}
      : memref<8x4xf32>, memref<32x24xbf16, #gpu.address_space<workgroup>>, memref<4x4xf32>
  return
}

// Buffers outside shared memory: pairs loaded adjacent, or down a column.
// CHECK: scores_bf16_pairs: max error {{.+}}: ok
func.func @scores_bf16_pairs(%q: memref<16x16xbf16>, %k: memref<8x16xbf16>, %s: memref<16x8xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(8) k(16) {rhs_transposed}
      : memref<16x16xbf16>, memref<8x16xbf16>, memref<16x8xf32>
  return
}
// CHECK: pv_bf16_pairs: max error {{.+}}: ok
func.func @pv_bf16_pairs(%p: memref<16x16xbf16>, %v: memref<16x8xbf16>, %o: memref<16x8xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(8) k(16) {accumulate}
      : memref<16x16xbf16>, memref<16x8xbf16>, memref<16x8xf32>
  return
}

// Views of a part of a shared operand at a dynamic offset (%first = 8 on
// the simulated warp), as the recurrence chain's warps read theirs: a
// range of k's columns read down its columns (ldmatrix .trans), and a
// range of the state's rows as a transposed B.
// CHECK: columns_view_bf16: max error {{.+}}: ok
func.func @columns_view_bf16(%u: memref<16x40xbf16, #gpu.address_space<workgroup>>, %k: memref<32x40xbf16, #gpu.address_space<workgroup>>, %s: memref<2x4xf32>, %row: index, %lane: index, %first: index) {
  %view = memref.subview %k[0, %first] [32, 16] [1, 1] : memref<32x40xbf16, #gpu.address_space<workgroup>> to memref<32x16xbf16, strided<[40, 1], offset: ?>, #gpu.address_space<workgroup>>
  attn_kernel.warp_mma %u, %view, %s rows(%row) lane(%lane) n(16) k(32) {acc_fragment, accumulate}
      : memref<16x40xbf16, #gpu.address_space<workgroup>>, memref<32x16xbf16, strided<[40, 1], offset: ?>, #gpu.address_space<workgroup>>, memref<2x4xf32>
  return
}
// CHECK: rows_view_bf16: max error {{.+}}: ok
func.func @rows_view_bf16(%w: memref<16x40xbf16, #gpu.address_space<workgroup>>, %s: memref<32x40xbf16, #gpu.address_space<workgroup>>, %v: memref<2x4xf32>, %row: index, %lane: index, %first: index) {
  %view = memref.subview %s[%first, 0] [16, 40] [1, 1] : memref<32x40xbf16, #gpu.address_space<workgroup>> to memref<16x40xbf16, strided<[40, 1], offset: ?>, #gpu.address_space<workgroup>>
  attn_kernel.warp_mma %w, %view, %v rows(%row) lane(%lane) n(16) k(32) {acc_fragment, rhs_transposed}
      : memref<16x40xbf16, #gpu.address_space<workgroup>>, memref<16x40xbf16, strided<[40, 1], offset: ?>, #gpu.address_space<workgroup>>, memref<2x4xf32>
  return
}
// CHECK: columns_view_f32: max error {{.+}}: ok
func.func @columns_view_f32(%u: memref<16x36xf32>, %k: memref<32x36xf32>, %s: memref<2x4xf32>, %row: index, %lane: index, %first: index) {
  %view = memref.subview %k[0, %first] [32, 16] [1, 1] : memref<32x36xf32> to memref<32x16xf32, strided<[36, 1], offset: ?>>
  attn_kernel.warp_mma %u, %view, %s rows(%row) lane(%lane) n(16) k(32) {acc_fragment, accumulate}
      : memref<16x36xf32>, memref<32x16xf32, strided<[36, 1], offset: ?>>, memref<2x4xf32>
  return
}

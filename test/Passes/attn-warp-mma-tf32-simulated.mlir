// RUN: attn-opt %s -attn-warp-mma-to-nvvm=chip=sm_90a -canonicalize -cse | %python %S/Inputs/simulate-warp-mma.py %s | FileCheck %s

// The f32 products' tensor-core form (three tf32 mma.sync a step of 8,
// WarpMma.cpp) run on a simulated warp (Inputs/simulate-warp-mma.py): 32
// lanes in lockstep over random operands, each mma.sync taking its
// fragments from the lanes where PTX's ISA puts them, the result compared
// with the op's definition in float64. A fragment element placed on the
// wrong lane or k gives a wrong sum; one tf32 rounding instead of the
// three-product split gives errors near 2^-11, past the bound of 2^-19 of
// sum |a b|.

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

// RUN: attn-opt %s -attn-defer-warpgroup-products | FileCheck %s --check-prefix=IR
// RUN: attn-opt %s -attn-defer-warpgroup-products -attn-warp-mma-to-loops \
// RUN:   | mlir-opt -convert-scf-to-cf -convert-vector-to-llvm \
// RUN:       -arith-expand=include-bf16=true -expand-strided-metadata \
// RUN:       -lower-affine -finalize-memref-to-llvm \
// RUN:       -convert-math-to-llvm -convert-arith-to-llvm -convert-func-to-llvm \
// RUN:       -convert-cf-to-llvm \
// RUN:       -reconcile-unrealized-casts \
// RUN:   | mlir-runner -e main -entry-point-result=void \
// RUN:       -shared-libs=%mlir_c_runner_utils \
// RUN:   | FileCheck %s

// An asynchronous warpgroup product's result appears only at the wait
// that completes it: one warpgroup (128 threads) computes S = Q K^T of
// ones (64 x 128 by 128 x 64: every score 128) into its lanes' register
// fragments, asynchronously, then a second product of the same; thread 0
// reads its first score after each, after a wait that leaves one product
// pending, and after a wait for all.

// After the product, the thread's fragment goes to its queue and NaN stays
// in its place; the waits move back what they complete.
// IR-LABEL: func.func private @scores__complete_products
// IR-SAME:    (%{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: memref<128x8x4xindex>, %{{.+}}: memref<128xindex>, %{{.+}}: memref<128xindex>, %{{.+}}: memref<128x8x32xf32>, %{{.+}}: memref<4096xf32>, %{{.+}}: memref<4096xf32>)
// IR:         scf.while
// IR:           scf.index_switch
// IR-LABEL: func.func @scores
// IR:         %[[REGS:.+]] = memref.alloca() {attn.registers} : memref<128x8x4xf32>
// IR-NEXT:    %[[FLAT:.+]] = memref.collapse_shape %[[REGS]]
// IR:         attn_kernel.warp_mma {{.+}} {acc_fragment, async, rhs_transposed, warpgroup}
// IR:         memref.extract_strided_metadata
// IR:         arith.constant 0x7FC00000 : f32
// IR:         memref.store %{{.+}}, %[[FLAT]][%{{.+}}] : memref<4096xf32>
// IR:         attn_kernel.warpgroup_wait {pending = 1 : i64}
// IR:         call @scores__complete_products

// The first product's score: hidden until the wait with one pending, which
// completes it (not the second, hidden until the wait for all).
// CHECK:      nan
// CHECK-NEXT: 128
// CHECK-NEXT: nan
// CHECK-NEXT: 128
func.func @scores(%block: index) attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  %c8192 = arith.constant 8192 : index
  %one = arith.constant 1.0 : bf16
  %q = memref.alloca() {attn.shared} : memref<8x16x8x8xbf16>
  %k = memref.alloca() {attn.shared} : memref<8x16x8x8xbf16>
  %qf = memref.collapse_shape %q [[0, 1, 2, 3]]
      : memref<8x16x8x8xbf16> into memref<8192xbf16>
  %kf = memref.collapse_shape %k [[0, 1, 2, 3]]
      : memref<8x16x8x8xbf16> into memref<8192xbf16>
  scf.for %i = %c0 to %c8192 step %c1 {
    memref.store %one, %qf[%i] : memref<8192xbf16>
    memref.store %one, %kf[%i] : memref<8192xbf16>
  }
  %first = memref.alloca() {attn.registers} : memref<128x8x4xf32>
  %second = memref.alloca() {attn.registers} : memref<128x8x4xf32>
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    %warp = arith.divui %t, %c32 : index
    %row = arith.muli %warp, %c16 : index
    %lane = arith.remui %t, %c32 : index
    %s1 = memref.subview %first[%t, 0, 0] [1, 8, 4] [1, 1, 1]
        : memref<128x8x4xf32> to memref<8x4xf32, strided<[4, 1], offset: ?>>
    %s2 = memref.subview %second[%t, 0, 0] [1, 8, 4] [1, 1, 1]
        : memref<128x8x4xf32> to memref<8x4xf32, strided<[4, 1], offset: ?>>
    attn_kernel.warp_mma %q, %k, %s1 rows(%row) lane(%lane) n(64) k(128)
        {acc_fragment, async, rhs_transposed, warpgroup}
        : memref<8x16x8x8xbf16>, memref<8x16x8x8xbf16>,
          memref<8x4xf32, strided<[4, 1], offset: ?>>
    attn_kernel.warp_mma %q, %k, %s2 rows(%row) lane(%lane) n(64) k(128)
        {acc_fragment, async, rhs_transposed, warpgroup}
        : memref<8x16x8x8xbf16>, memref<8x16x8x8xbf16>,
          memref<8x4xf32, strided<[4, 1], offset: ?>>
    %isFirst = arith.cmpi eq, %t, %c0 : index
    %before = memref.load %s1[%c0, %c0] : memref<8x4xf32, strided<[4, 1], offset: ?>>
    attn_kernel.warpgroup_wait {pending = 1}
    %after = memref.load %s1[%c0, %c0] : memref<8x4xf32, strided<[4, 1], offset: ?>>
    %pending = memref.load %s2[%c0, %c0] : memref<8x4xf32, strided<[4, 1], offset: ?>>
    attn_kernel.warpgroup_wait
    %done = memref.load %s2[%c0, %c0] : memref<8x4xf32, strided<[4, 1], offset: ?>>
    scf.if %isFirst {
      vector.print %before : f32
      vector.print %after : f32
      vector.print %pending : f32
      vector.print %done : f32
    }
    scf.reduce
  } {attn.threads}
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  call @scores(%c0) : (index) -> ()
  return
}

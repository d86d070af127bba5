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
// in its place; the first thread of the warpgroup to issue it
// fingerprints its shared operands. The waits move back what they
// complete, each product at its site: where the fragment still holds its
// NaN, and its operands did not change in flight.
// IR-LABEL: func.func private @scores__complete_products
// IR-SAME:    (%{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: memref<128x8x6xindex>, %{{.+}}: memref<128xindex>, %{{.+}}: memref<128xindex>, %{{.+}}: memref<128x8x32xf32>, %[[FLIGHTS:.+]]: memref<1x8x5xindex>, %{{.+}}: memref<4096xf32>, %[[K:.+]]: memref<8192xbf16>, %[[Q:.+]]: memref<8192xbf16>, %{{.+}}: memref<4096xf32>)
// IR:         scf.while
// IR:           scf.index_switch
// IR:           case 0 {
// IR:             memref.load %[[FLIGHTS]]
// IR:             memref.load %[[K]]
// IR:             memref.load %[[Q]]
// IR:             arith.cmpi ne
// IR-LABEL: func.func @scores
// IR:         %[[REGS:.+]] = memref.alloca() {attn.registers} : memref<128x8x4xf32>
// IR-NEXT:    %[[FLAT:.+]] = memref.collapse_shape %[[REGS]]
// IR:         attn_kernel.warp_mma {{.+}} {acc_fragment, async, rhs_transposed, warpgroup}
// IR:         scf.if
// IR:           memref.load %{{.+}} : memref<8192xbf16>
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

// Nothing may touch what a product in flight reads or writes: its shared
// operands (any thread), the lane's own fragments of lhs, its accumulator.
// A product whose operands or accumulator changed between its issue and
// its wait leaves NaN. One warpgroup issues S = Q K^T (every score 128)
// and O = P V (every element 64) in one thread loop, a second loop writes
// something or not (`mode`), and the third waits for both and may write
// after the wait; threads 0 and 127 print their first S and O.
// Mode 0, nothing written:
// CHECK-NEXT: 128
// CHECK-NEXT: 64
// CHECK-NEXT: 128
// CHECK-NEXT: 64
// Mode 1, K written in flight: every thread's S is NaN, O is not.
// CHECK-NEXT: nan
// CHECK-NEXT: 64
// CHECK-NEXT: nan
// CHECK-NEXT: 64
// Mode 2, K written after the wait (by each thread after its own wait):
// CHECK-NEXT: 128
// CHECK-NEXT: 64
// CHECK-NEXT: 128
// CHECK-NEXT: 64
// Mode 3, each lane's own P written in flight: O is NaN.
// CHECK-NEXT: 128
// CHECK-NEXT: nan
// CHECK-NEXT: 128
// CHECK-NEXT: nan
// Mode 4, thread 0's S fragment written in flight: its S is NaN.
// CHECK-NEXT: nan
// CHECK-NEXT: 64
// CHECK-NEXT: 128
// CHECK-NEXT: 64
// Mode 5, each lane's own P written after the wait:
// CHECK-NEXT: 128
// CHECK-NEXT: 64
// CHECK-NEXT: 128
// CHECK-NEXT: 64
func.func @in_flight(%mode: index, %block: index) attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c127 = arith.constant 127 : index
  %c128 = arith.constant 128 : index
  %c4096 = arith.constant 4096 : index
  %c8192 = arith.constant 8192 : index
  %one = arith.constant 1.0 : bf16
  %two = arith.constant 2.0 : bf16
  %onef = arith.constant 1.0 : f32
  %twof = arith.constant 2.0 : f32
  %q = memref.alloca() {attn.shared} : memref<8x16x8x8xbf16>
  %k = memref.alloca() {attn.shared} : memref<8x16x8x8xbf16>
  %v = memref.alloca() {attn.shared} : memref<8x8x8x8xbf16>
  %qf = memref.collapse_shape %q [[0, 1, 2, 3]]
      : memref<8x16x8x8xbf16> into memref<8192xbf16>
  %kf = memref.collapse_shape %k [[0, 1, 2, 3]]
      : memref<8x16x8x8xbf16> into memref<8192xbf16>
  %vf = memref.collapse_shape %v [[0, 1, 2, 3]]
      : memref<8x8x8x8xbf16> into memref<4096xbf16>
  scf.for %i = %c0 to %c8192 step %c1 {
    memref.store %one, %qf[%i] : memref<8192xbf16>
    memref.store %one, %kf[%i] : memref<8192xbf16>
  }
  scf.for %i = %c0 to %c4096 step %c1 {
    memref.store %one, %vf[%i] : memref<4096xbf16>
  }
  %s = memref.alloca() {attn.registers} : memref<128x8x4xf32>
  %o = memref.alloca() {attn.registers} : memref<128x8x4xf32>
  %p = memref.alloca() {attn.registers} : memref<128x8x4xf32>
  %pf = memref.collapse_shape %p [[0, 1, 2]]
      : memref<128x8x4xf32> into memref<4096xf32>
  scf.for %i = %c0 to %c4096 step %c1 {
    memref.store %onef, %pf[%i] : memref<4096xf32>
  }
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    %warp = arith.divui %t, %c32 : index
    %row = arith.muli %warp, %c16 : index
    %lane = arith.remui %t, %c32 : index
    %first = arith.muli %warp, %c32 : index
    %st = memref.subview %s[%t, 0, 0] [1, 8, 4] [1, 1, 1]
        : memref<128x8x4xf32> to memref<8x4xf32, strided<[4, 1], offset: ?>>
    %ot = memref.subview %o[%t, 0, 0] [1, 8, 4] [1, 1, 1]
        : memref<128x8x4xf32> to memref<8x4xf32, strided<[4, 1], offset: ?>>
    %pw = memref.subview %p[%first, 0, 0] [32, 8, 4] [1, 1, 1]
        : memref<128x8x4xf32> to memref<32x8x4xf32, strided<[32, 4, 1], offset: ?>>
    attn_kernel.warp_mma %q, %k, %st rows(%row) lane(%lane) n(64) k(128)
        {acc_fragment, async, rhs_transposed, warpgroup}
        : memref<8x16x8x8xbf16>, memref<8x16x8x8xbf16>,
          memref<8x4xf32, strided<[4, 1], offset: ?>>
    attn_kernel.warp_mma %pw, %v, %ot rows(%row) lane(%lane) n(64) k(64)
        {acc_fragment, async, lhs_fragment, warpgroup}
        : memref<32x8x4xf32, strided<[32, 4, 1], offset: ?>>,
          memref<8x8x8x8xbf16>, memref<8x4xf32, strided<[4, 1], offset: ?>>
    scf.reduce
  } {attn.threads}
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    %isFirst = arith.cmpi eq, %t, %c0 : index
    %writesK = arith.cmpi eq, %mode, %c1 : index
    %writesP = arith.cmpi eq, %mode, %c3 : index
    %writesS = arith.cmpi eq, %mode, %c4 : index
    %firstWritesK = arith.andi %isFirst, %writesK : i1
    %firstWritesS = arith.andi %isFirst, %writesS : i1
    scf.if %firstWritesK {
      memref.store %two, %k[%c0, %c0, %c0, %c0] : memref<8x16x8x8xbf16>
    }
    scf.if %writesP {
      memref.store %twof, %p[%t, %c0, %c0] : memref<128x8x4xf32>
    }
    scf.if %firstWritesS {
      memref.store %twof, %s[%t, %c0, %c0] : memref<128x8x4xf32>
    }
    scf.reduce
  } {attn.threads}
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    attn_kernel.warpgroup_wait
    %isFirst = arith.cmpi eq, %t, %c0 : index
    %isLast = arith.cmpi eq, %t, %c127 : index
    %prints = arith.ori %isFirst, %isLast : i1
    %score = memref.load %s[%t, %c0, %c0] : memref<128x8x4xf32>
    %out = memref.load %o[%t, %c0, %c0] : memref<128x8x4xf32>
    scf.if %prints {
      vector.print %score : f32
      vector.print %out : f32
    }
    %writesK = arith.cmpi eq, %mode, %c2 : index
    %writesP = arith.cmpi eq, %mode, %c5 : index
    scf.if %writesK {
      memref.store %two, %k[%c0, %c0, %c0, %c0] : memref<8x16x8x8xbf16>
    }
    scf.if %writesP {
      memref.store %twof, %p[%t, %c0, %c0] : memref<128x8x4xf32>
    }
    scf.reduce
  } {attn.threads}
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  call @scores(%c0) : (index) -> ()
  scf.for %mode = %c0 to %c6 step %c1 {
    func.call @in_flight(%mode, %c0) : (index, index) -> ()
  }
  return
}

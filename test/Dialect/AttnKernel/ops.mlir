// RUN: attn-opt %s | attn-opt | FileCheck %s
// RUN: attn-opt %s --mlir-print-op-generic | attn-opt | FileCheck %s
// RUN: attn-opt %s --emit-bytecode | attn-opt | FileCheck %s

// The ops below the dispatch boundary (attn_kernel): host dispatches and
// the CUDA kernels' warp-level ops.

// CHECK-LABEL: func.func @dispatch
// CHECK:         attn_kernel.dispatch @kernel workgroups(%{{.+}}) bindings(%{{.+}}, %{{.+}}) : memref<?x8xf32>, memref<?x8xf32>
func.func private @kernel(%a: memref<?x8xf32>, %b: memref<?x8xf32>, %wg: index)
func.func @dispatch(%a: memref<?x8xf32>, %b: memref<?x8xf32>, %n: index) {
  attn_kernel.dispatch @kernel workgroups(%n) bindings(%a, %b)
      : memref<?x8xf32>, memref<?x8xf32>
  return
}

// CHECK-LABEL: func.func @worker_count
// CHECK:         %[[N:.+]] = attn_kernel.worker_count : index
// CHECK:         return %[[N]] : index
func.func @worker_count() -> index {
  %n = attn_kernel.worker_count : index
  return %n : index
}

// CHECK-LABEL: func.func @warp_mma
// CHECK:         attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(32) k(48) {rhs_transposed} : memref<64x56xbf16>, memref<32x56xbf16>, memref<64x33xf32>
// CHECK:         attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(24) k(32) {accumulate} : memref<64x34xf16>, memref<32x32xf16>, memref<64x25xf32>
// CHECK:         attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(24) k(32) {acc_fragment, accumulate} : memref<64x34xf16>, memref<32x32xf16>, memref<3x4xf32, strided<[4, 1], offset: ?>>
// CHECK:         attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(24) k(32) {acc_fragment, accumulate, row_tiles = 2 : i64} : memref<64x34xf16>, memref<32x32xf16>, memref<6x4xf32>
// CHECK:         attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(24) k(32) {acc_fragment, accumulate, lhs_fragment} : memref<32x4x4xf32, strided<[16, 4, 1], offset: ?>>, memref<32x32xf16>, memref<3x4xf32, strided<[4, 1], offset: ?>>
// CHECK:         attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(24) k(32) {acc_fragment, accumulate, lhs_fragment} : memref<4x4xf32>, memref<32x32xf16>, memref<3x4xf32, strided<[4, 1], offset: ?>>
// Buffers wider than the product (padded rows); a lane's fragment (3
// blocks of 8 columns, 4 elements each) as the accumulator.
func.func @warp_mma(%q: memref<64x56xbf16>, %k: memref<32x56xbf16>,
                    %s: memref<64x33xf32>, %p: memref<64x34xf16>,
                    %v: memref<32x32xf16>, %o: memref<64x25xf32>,
                    %frag: memref<3x4xf32, strided<[4, 1], offset: ?>>,
                    %frag2: memref<6x4xf32>,
                    %warpP: memref<32x4x4xf32, strided<[16, 4, 1], offset: ?>>,
                    %ownP: memref<4x4xf32>,
                    %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(32) k(48) {rhs_transposed}
      : memref<64x56xbf16>, memref<32x56xbf16>, memref<64x33xf32>
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(24) k(32) {accumulate}
      : memref<64x34xf16>, memref<32x32xf16>, memref<64x25xf32>
  attn_kernel.warp_mma %p, %v, %frag rows(%row) lane(%lane) n(24) k(32)
      {accumulate, acc_fragment}
      : memref<64x34xf16>, memref<32x32xf16>,
        memref<3x4xf32, strided<[4, 1], offset: ?>>
  // Two row tiles of 16: the fragment holds 3 blocks for each.
  attn_kernel.warp_mma %p, %v, %frag2 rows(%row) lane(%lane) n(24) k(32)
      {accumulate, acc_fragment, row_tiles = 2}
      : memref<64x34xf16>, memref<32x32xf16>, memref<6x4xf32>
  // P as the warp's fragments of an earlier product (32 keys: 4 blocks of
  // 8 per lane), and as a lane's own after the CUDA outliner.
  attn_kernel.warp_mma %warpP, %v, %frag rows(%row) lane(%lane) n(24) k(32)
      {accumulate, acc_fragment, lhs_fragment}
      : memref<32x4x4xf32, strided<[16, 4, 1], offset: ?>>, memref<32x32xf16>,
        memref<3x4xf32, strided<[4, 1], offset: ?>>
  attn_kernel.warp_mma %ownP, %v, %frag rows(%row) lane(%lane) n(24) k(32)
      {accumulate, acc_fragment, lhs_fragment}
      : memref<4x4xf32>, memref<32x32xf16>,
        memref<3x4xf32, strided<[4, 1], offset: ?>>
  return
}

// CHECK-LABEL: func.func @async_copy
// CHECK:         attn_kernel.async_copy %{{.+}}[%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}], %{{.+}}[%{{.+}}, %{{.+}}] if(%{{.+}}) elements(8) : memref<?x?x?x128xbf16>, memref<64x136xbf16>
// CHECK:         attn_kernel.async_copy %{{.+}}[%{{.+}}], %{{.+}}[%{{.+}}] if(%{{.+}}) elements(1) : memref<?xf32>, memref<4xf32>
// CHECK:         attn_kernel.async_wait
// 16 bytes of a bf16 row into a padded shared row; 4 bytes of a 1-D
// buffer.
func.func @async_copy(%k: memref<?x?x?x128xbf16>, %ks: memref<64x136xbf16>,
                      %x: memref<?xf32>, %xs: memref<4xf32>, %i: index,
                      %valid: i1) {
  attn_kernel.async_copy %k[%i, %i, %i, %i], %ks[%i, %i] if(%valid) elements(8)
      : memref<?x?x?x128xbf16>, memref<64x136xbf16>
  attn_kernel.async_copy %x[%i], %xs[%i] if(%valid) elements(1)
      : memref<?xf32>, memref<4xf32>
  attn_kernel.async_wait
  return
}

// CHECK-LABEL: func.func @device_fence
// CHECK:         attn_kernel.device_fence
func.func @device_fence() {
  attn_kernel.device_fence
  return
}

// CHECK-LABEL: func.func @warpgroup_async
// CHECK:         attn_kernel.warp_mma {{.*}} {acc_fragment, async, rhs_transposed, warpgroup}
// CHECK:         attn_kernel.warpgroup_wait {pending = 1 : i64}
// CHECK:         attn_kernel.warpgroup_wait{{$}}
func.func @warpgroup_async(%q: memref<8x16x8x8xbf16>, %k: memref<8x16x8x8xbf16>, %s: memref<8x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(64) k(128) {rhs_transposed, acc_fragment, warpgroup, async}
      : memref<8x16x8x8xbf16>, memref<8x16x8x8xbf16>, memref<8x4xf32>
  attn_kernel.warpgroup_wait {pending = 1}
  attn_kernel.warpgroup_wait
  return
}

// CHECK-LABEL: func.func @mbarriers
// CHECK:         attn_kernel.mbarrier_init %{{.+}}[%{{.+}}] arrivals(128) : memref<2xi64>
// CHECK:         attn_kernel.mbarrier_arrive %{{.+}}[%{{.+}}] after_copies : memref<2xi64>
// CHECK:         attn_kernel.mbarrier_arrive %{{.+}}[%{{.+}}] : memref<2xi64, #gpu.address_space<workgroup>>
// CHECK:         attn_kernel.mbarrier_wait %{{.+}}[%{{.+}}] parity(%{{.+}}) : memref<2xi64>
// CHECK:         attn_kernel.mbarrier_arrive %{{.+}}[%{{.+}}] expect_bytes(%{{.+}}) : memref<2xi64>
// CHECK:         attn_kernel.bulk_copy %{{.+}}[%{{.+}}, %{{.+}}], %{{.+}}[%{{.+}}, %{{.+}}] elements(128) on(%{{.+}}[%{{.+}}]) : memref<?x128xbf16>, memref<64x136xbf16>, memref<2xi64>
// A stage's barriers: a producer arrives once its copies land, a consumer
// waits for the stage's phase; a producer announces a row's bytes and
// copies it in bulk.
func.func @mbarriers(%full: memref<2xi64>,
                     %empty: memref<2xi64, #gpu.address_space<workgroup>>,
                     %stage: index, %round: index, %bytes: index,
                     %k: memref<?x128xbf16>, %ks: memref<64x136xbf16>) {
  attn_kernel.mbarrier_init %full[%stage] arrivals(128) : memref<2xi64>
  attn_kernel.mbarrier_arrive %full[%stage] after_copies : memref<2xi64>
  attn_kernel.mbarrier_arrive %empty[%stage]
      : memref<2xi64, #gpu.address_space<workgroup>>
  attn_kernel.mbarrier_wait %full[%stage] parity(%round) : memref<2xi64>
  attn_kernel.mbarrier_arrive %full[%stage] expect_bytes(%bytes) : memref<2xi64>
  attn_kernel.bulk_copy %k[%round, %stage], %ks[%round, %stage] elements(128)
      on(%full[%stage]) : memref<?x128xbf16>, memref<64x136xbf16>, memref<2xi64>
  return
}

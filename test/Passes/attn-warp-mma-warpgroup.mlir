// RUN: attn-opt %s -split-input-file -attn-warp-mma-to-nvvm=chip=sm_90a -canonicalize -cse | FileCheck %s --check-prefix=WGMMA
// RUN: not attn-opt %s -split-input-file -attn-warp-mma-to-nvvm=chip=sm_80 2>&1 | FileCheck %s --check-prefix=SM80

// (The loops form, which the CPU runs, reads the same elements through the
// tiling, A[r, k] at [r / 8, k / 8, r % 8, k % 8]: the e2e suite's
// SoftmaxAttentionWarpgroups cases run it.)

// Warpgroup products (attn_kernel.warp_mma {warpgroup}): the 4 warps of a
// warpgroup compute 64 rows with wgmma.mma_async on sm_90a, reading the
// core-matrix tiled shared operands through matrix descriptors.
//
// A descriptor (PTX ISA, "Matrix Descriptor Format", no swizzling) is
// (address & 0x3FFFF) >> 4 | (LBO >> 4) << 16 | (SBO >> 4) << 32, LBO the
// byte stride between core matrices along K, SBO along M or N. Here q and
// k are [64, 128] bf16 tiles as [8, 16, 8, 8] (K-major): a core matrix is
// 128 bytes, so LBO = 128 and SBO = 16 x 128 = 2048, the constant
// 8 << 16 | 128 << 32 = 549756338176; each step of 16 along K starts two
// core matrices (256 bytes) further. The group's rows start at its warp
// 0's: row - 16 ((thread / 32) % 4).
// WGMMA-LABEL: func.func @scores
// WGMMA-SAME:    %[[Q:[a-z0-9]+]]: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %[[K:[a-z0-9]+]]: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %[[S:[a-z0-9]+]]: memref<8x4xf32>, %[[ROW:[a-z0-9]+]]: index
// WGMMA-DAG:     %[[STRIDES:.+]] = arith.constant 549756338176 : i64
// WGMMA-DAG:     %[[TID:.+]] = gpu.thread_id x
// WGMMA:         %[[WARP:.+]] = arith.divui %[[TID]], %c32
// WGMMA:         %[[WIG:.+]] = arith.remui %[[WARP]], %c4
// WGMMA:         %[[OFF:.+]] = arith.muli %[[WIG]], %c16
// WGMMA:         %[[GROUP:.+]] = arith.subi %[[ROW]], %[[OFF]]
// WGMMA:         %[[CM:.+]] = arith.divui %[[GROUP]], %c8
// WGMMA:         %[[CM64:.+]] = arith.index_castui %[[CM]] : index to i64
// WGMMA:         %[[ROWBYTES:.+]] = arith.muli %[[CM64]], %c2048_i64
// WGMMA:         %[[QPTR:.+]] = memref.extract_aligned_pointer_as_index %[[Q]]
// WGMMA:         %[[QADDR:.+]] = arith.index_castui %[[QPTR]]
// WGMMA:         %[[QBASE:.+]] = arith.addi %[[QADDR]], %[[ROWBYTES]]
// WGMMA:         %[[KPTR:.+]] = memref.extract_aligned_pointer_as_index %[[K]]
// WGMMA:         %[[KBASE:.+]] = arith.index_castui %[[KPTR]]
// WGMMA:         nvvm.wgmma.fence.aligned
// WGMMA:         %[[KM:.+]] = arith.andi %[[KBASE]], %c262143_i64
// WGMMA:         %[[KS:.+]] = arith.shrui %[[KM]], %c4_i64
// WGMMA:         %[[KD:.+]] = arith.ori %[[KS]], %[[STRIDES]]
// WGMMA:         %[[QM:.+]] = arith.andi %[[QBASE]], %c262143_i64
// WGMMA:         %[[QS:.+]] = arith.shrui %[[QM]], %c4_i64
// WGMMA:         %[[QD:.+]] = arith.ori %[[QS]], %[[STRIDES]]
// The scores do not accumulate: the first product has scale-d 0
// (D = A B) and takes its accumulators unset (poison, no zeroing), the
// other seven scale-d 1.
// WGMMA:         %[[D0:.+]] = nvvm.wgmma.mma_async %[[QD]], %[[KD]], %{{.+}}, <m = 64, n = 64, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// WGMMA:         %[[K1:.+]] = arith.addi %[[KBASE]], %c256_i64
// WGMMA:         %[[Q1:.+]] = arith.addi %[[QBASE]], %c256_i64
// WGMMA:         nvvm.wgmma.mma_async %{{.+}}, %{{.+}}, %{{.+}}, <m = 64, n = 64, k = 16>, D[<f32>, <one>]
// WGMMA-COUNT-6: nvvm.wgmma.mma_async {{.+}} D[<f32>, <one>]
// WGMMA-NOT:     nvvm.wgmma.mma_async
// WGMMA:         nvvm.wgmma.commit.group.sync.aligned
// WGMMA-NEXT:    nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA:         memref.store %{{.+}}, %[[S]][%c0, %c0]
func.func @scores(%q: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %k: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %s: memref<8x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(64) k(128) {rhs_transposed, acc_fragment, warpgroup}
      : memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, memref<8x4xf32>
  return
}

// -----

// P v with P in the lane's registers: wgmma's A from registers (4 pairs
// of bf16 per step, all made before the fence), written as PTX since
// nvvm.wgmma.mma_async takes descriptors only. v is a [64 keys, 128] tile
// read as [k, n], N-major (imm-trans-b 1): core matrices along K (keys)
// are 16 x 128 = 2048 bytes apart (LBO), along N 128 (SBO), so the
// constant is 128 << 16 | 8 << 32 = 34368126976, and each step of 16 keys
// starts 4096 bytes further. The accumulators are tied in and out.
// WGMMA-LABEL: func.func @pv
// WGMMA-DAG:     %[[STRIDES:.+]] = arith.constant 34368126976 : i64
// WGMMA:         vector.from_elements
// WGMMA-COUNT-15: vector.from_elements
// WGMMA-NOT:     vector.from_elements
// WGMMA:         nvvm.wgmma.fence.aligned
// WGMMA:         arith.ori %{{.+}}, %[[STRIDES]]
// WGMMA:         llvm.inline_asm has_side_effects asm_dialect = att "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {$0, {{.+}}, $63}, {$128, $129, $130, $131}, $132, 1, 1, 1, 1;", "=f,{{.+}},=f,0,1,{{.+}},63,r,r,r,r,l"
// WGMMA:         arith.addi %{{.+}}, %c4096_i64
// WGMMA-COUNT-3: llvm.inline_asm
// WGMMA:         nvvm.wgmma.commit.group.sync.aligned
// WGMMA-NEXT:    nvvm.wgmma.wait.group.sync.aligned 0
func.func @pv(%p: memref<8x4xf32>, %v: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %o: memref<16x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(128) k(64) {lhs_fragment, acc_fragment, accumulate, warpgroup}
      : memref<8x4xf32>, memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, memref<16x4xf32>
  return
}


// -----

// Async products (FlashAttention-3's overlap): the scores and P v are
// issued as two groups (commit, no wait), the accumulators stored in
// program order; attn_kernel.warpgroup_wait is wgmma.wait_group, first for
// all but the newest group (the scores), then for all. (On the CPU the
// products are done when issued and the waits go: attn-warpgroup-wait.mlir.)
// WGMMA-LABEL: func.func @overlapped
// WGMMA:         nvvm.wgmma.fence.aligned
// WGMMA-COUNT-8: nvvm.wgmma.mma_async
// WGMMA:         nvvm.wgmma.commit.group.sync.aligned
// WGMMA-NOT:     nvvm.wgmma.wait.group.sync.aligned
// WGMMA:         nvvm.wgmma.fence.aligned
// WGMMA-COUNT-4: llvm.inline_asm
// WGMMA:         nvvm.wgmma.commit.group.sync.aligned
// WGMMA-NOT:     nvvm.wgmma.wait.group.sync.aligned
// WGMMA:         memref.store
// WGMMA:         nvvm.wgmma.wait.group.sync.aligned 1
// WGMMA-NEXT:    memref.load %{{.+}}[%c0, %c0] : memref<8x4xf32>
// WGMMA:         nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA-NEXT:    memref.load %{{.+}}[%c0, %c0] : memref<16x4xf32>
// SM80: error: 'attn_kernel.warp_mma' op a warpgroup product (wgmma) needs sm_90a, not sm_80
func.func @overlapped(%q: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %k: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %s: memref<8x4xf32>, %p: memref<8x4xf32>, %v: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, %o: memref<16x4xf32>, %row: index, %lane: index) -> (f32, f32) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(64) k(128) {rhs_transposed, acc_fragment, warpgroup, async}
      : memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, memref<8x4xf32>
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(128) k(64) {lhs_fragment, acc_fragment, accumulate, warpgroup, async}
      : memref<8x4xf32>, memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>, memref<16x4xf32>
  attn_kernel.warpgroup_wait {pending = 1}
  %c0 = arith.constant 0 : index
  %score = memref.load %s[%c0, %c0] : memref<8x4xf32>
  attn_kernel.warpgroup_wait
  %out = memref.load %o[%c0, %c0] : memref<16x4xf32>
  return %score, %out : f32, f32
}

// -----

// A wait with no warpgroup products to wait for on the chip is an error too.
// SM80: error: 'attn_kernel.warpgroup_wait' op waits for warpgroup products (wgmma), which need sm_90a, not sm_80
func.func @lone_wait() {
  attn_kernel.warpgroup_wait
  return
}

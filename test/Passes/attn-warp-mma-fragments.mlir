// RUN: attn-opt %s -attn-warp-mma-to-nvvm=chip=sm_90a -canonicalize -cse | FileCheck %s --check-prefix=MMA
// RUN: attn-opt %s -attn-warp-mma-to-nvvm=chip=sm_75 -canonicalize -cse | FileCheck %s --check-prefix=SHUFFLE
// RUN: attn-opt %s -split-input-file -verify-diagnostics -attn-warp-mma-to-loops -canonicalize -cse | FileCheck %s --check-prefix=LOOPS

// attn_kernel.warp_mma with lhs_fragment: A is the warp's accumulator fragments
// of an earlier product (P in registers, as FlashAttention-2 keeps it).
// Lane l (g = l / 4, 2t = 2 (l % 4)) holds A's rows g and g + 8, columns
// 8 b + 2t and 8 b + 2t + 1 of each block b of 8: [b, 0..1] and [b, 2..3].

// On the GPU, after the outliner, lhs is the lane's own [k / 8, 4]. The
// tensor cores take A of step s from blocks 2s and 2s + 1: a0 = (c0, c1)
// of the first, a1 = (c2, c3), a2 and a3 the same of the second, each
// pair rounded to bf16 and packed; no load from shared memory. K = 32:
// 2 steps.
// MMA-LABEL: func.func @pv_own_fragments
// MMA-SAME:    %[[P:[a-z0-9]+]]: memref<4x4xf32>
// MMA:         %[[X0:.+]] = memref.load %[[P]][%c0, %c0] : memref<4x4xf32>
// MMA-NEXT:    %[[Y0:.+]] = arith.truncf %[[X0]] : f32 to bf16
// MMA-NEXT:    %[[X1:.+]] = memref.load %[[P]][%c0, %c1] : memref<4x4xf32>
// MMA-NEXT:    %[[Y1:.+]] = arith.truncf %[[X1]] : f32 to bf16
// MMA-NEXT:    %[[PAIR0:.+]] = vector.from_elements %[[Y0]], %[[Y1]] : vector<2xbf16>
// MMA:         memref.load %[[P]][%c0, %c2]
// MMA:         memref.load %[[P]][%c0, %c3]
// MMA:         memref.load %[[P]][%c1, %c0]
// MMA:         memref.load %[[P]][%c1, %c1]
// MMA:         memref.load %[[P]][%c1, %c2]
// MMA:         memref.load %[[P]][%c1, %c3]
// MMA:         %[[WORD0:.+]] = vector.bitcast %[[PAIR0]] : vector<2xbf16> to vector<1xi32>
// MMA-NEXT:    %[[A0:.+]] = vector.extract %[[WORD0]][0] : i32 from vector<1xi32>
// MMA:         %[[D0:.+]] = nvvm.mma.sync A[%[[A0]], %{{.+}}, %{{.+}}, %{{.+}}]
// The second step: blocks 2 and 3.
// MMA:         memref.load %[[P]][%c2, %c0]
// MMA:         memref.load %[[P]][%c3, %c3]
// MMA:         nvvm.mma.sync
// MMA-NOT:     nvvm.mma.sync
// MMA-NOT:     nvgpu.ldmatrix

// Without bf16 mma.sync (sm_75), the loops take each element of A from the
// lane that holds it: A[g + 8 h, k] is lane 4 g + (k % 8) / 2's [k / 8,
// 2 h + k % 2], and every lane offers its own element at that place. The
// steps k are unrolled so that the place is a constant (a variable one
// would put the lane's registers in local memory): two shuffles a step,
// each for all of the lane's columns; the accumulators are values.
// SHUFFLE-LABEL: func.func @pv_own_fragments
// SHUFFLE-SAME:    %[[P:[a-z0-9]+]]: memref<4x4xf32>, %{{.+}}: memref<32x8xbf16>, %[[O:[a-z0-9]+]]: memref<1x4xf32>, %{{.+}}: index, %[[LANE:[a-z0-9]+]]: index
// SHUFFLE-NOT:     scf.for
// SHUFFLE:         %[[G:.+]] = arith.divui %[[LANE]], %c4
// SHUFFLE:         %[[ACC0:.+]] = memref.load %[[O]][%c0, %c0]
// SHUFFLE:         %[[QUAD:.+]] = arith.muli %[[G]], %c4
// SHUFFLE:         %[[X0:.+]] = memref.load %[[P]][%c0, %c0]
// SHUFFLE:         %[[OWNER0:.+]] = arith.index_cast %[[QUAD]] : index to i32
// SHUFFLE:         %[[A0:.+]], %{{.+}} = gpu.shuffle  idx %[[X0]], %[[OWNER0]], %c32_i32 : f32
// SHUFFLE:         %[[X0H:.+]] = memref.load %[[P]][%c0, %c2]
// SHUFFLE:         gpu.shuffle  idx %[[X0H]], %[[OWNER0]], %c32_i32 : f32
// SHUFFLE:         math.fma %[[A0]], %{{.+}}, %[[ACC0]] : f32
// Each step's accumulators pass through an empty asm that the next step
// reads them from, so that LLVM's code generation computes a step before
// the next one's shuffles and loads (it emitted all of them first, and
// ptxas spilled).
// SHUFFLE:         %[[PINNED:.+]] = llvm.inline_asm "", "=f,=f,=f,=f,0,1,2,3" %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : (f32, f32, f32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// SHUFFLE:         %[[ACC1:.+]] = llvm.extractvalue %[[PINNED]][0]
// k = 1: the same lane's [0, 1] and [0, 3]; k = 2: lane 4 g + 1's [0, 0].
// SHUFFLE:         %[[X1:.+]] = memref.load %[[P]][%c0, %c1]
// SHUFFLE:         gpu.shuffle  idx %[[X1]], %[[OWNER0]], %c32_i32 : f32
// SHUFFLE:         %[[X1H:.+]] = memref.load %[[P]][%c0, %c3]
// SHUFFLE:         gpu.shuffle  idx %[[X1H]], %[[OWNER0]], %c32_i32 : f32
// SHUFFLE:         math.fma %{{.+}}, %{{.+}}, %[[ACC1]] : f32
// SHUFFLE:         %[[QUAD1:.+]] = arith.addi %[[QUAD]], %c1 : index
// SHUFFLE:         %[[OWNER1:.+]] = arith.index_cast %[[QUAD1]] : index to i32
// SHUFFLE:         gpu.shuffle  idx %[[X0]], %[[OWNER1]], %c32_i32 : f32
// 64 shuffles in all: 2 for each of the 32 steps.
// SHUFFLE-COUNT-59: gpu.shuffle  idx
// SHUFFLE-NOT:     gpu.shuffle
// SHUFFLE-NOT:     llvm.inline_asm
// SHUFFLE:         memref.store %{{.+}}, %[[O]][%c0, %c3]
// SHUFFLE-NOT:     nvvm.mma.sync

// On the CPU a lane cannot shuffle: its own fragments are not enough.
func.func @pv_own_fragments(%p: memref<4x4xf32>, %v: memref<32x8xbf16>, %o: memref<1x4xf32>, %row: index, %lane: index) {
  // expected-error @+1 {{'lhs' (fragments) must be a warp's view of a register buffer (memref.subview of a memref.alloca {attn.registers}) in the thread loop that holds the op}}
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(8) k(32) {acc_fragment, accumulate, lhs_fragment} : memref<4x4xf32>, memref<32x8xbf16>, memref<1x4xf32>
  return
}

// -----

// f32 (rhs f32) on sm_80 and newer: three tf32 mma.sync per step of 8 k
// (WarpMma.cpp, lowerToTf32MmaSync). The lane's k slots hold k 2t and
// 2t + 1, so that A of step s is the lane's own [s, 0], [s, 2], [s, 1],
// [s, 3] (rows g, g + 8 at k 2t, then at 2t + 1): no shuffle. B: v's rows
// 2t and 2t + 1 at column g.
// MMA-LABEL: func.func @pv_own_fragments_f32
// MMA-SAME:    %[[P:[a-z0-9]+]]: memref<2x4xf32>, %[[V:[a-z0-9]+]]: memref<16x8xf32>
// MMA-NOT:     gpu.shuffle
// MMA:         memref.load %[[P]][%c0, %c0] : memref<2x4xf32>
// MMA-NEXT:    memref.load %[[P]][%c0, %c2] : memref<2x4xf32>
// MMA-NEXT:    memref.load %[[P]][%c0, %c1] : memref<2x4xf32>
// MMA-NEXT:    memref.load %[[P]][%c0, %c3] : memref<2x4xf32>
// MMA:         memref.load %[[V]][%[[T2:.+]], %[[G:.+]]] : memref<16x8xf32>
// MMA:         memref.load %[[V]][%{{.+}}, %[[G]]] : memref<16x8xf32>
// MMA-COUNT-3: nvvm.mma.sync {{.+}} shape = #nvvm.shape<m = 16, n = 8, k = 8>
// MMA:         memref.load %[[P]][%c1, %c0] : memref<2x4xf32>
// MMA-NEXT:    memref.load %[[P]][%c1, %c2] : memref<2x4xf32>
// MMA-NEXT:    memref.load %[[P]][%c1, %c1] : memref<2x4xf32>
// MMA-NEXT:    memref.load %[[P]][%c1, %c3] : memref<2x4xf32>
// MMA-COUNT-3: nvvm.mma.sync
// MMA-NOT:     nvvm.mma.sync
// MMA-NOT:     gpu.shuffle
// MMA:         return
func.func @pv_own_fragments_f32(%p: memref<2x4xf32>, %v: memref<16x8xf32>, %o: memref<1x4xf32>, %row: index, %lane: index) {
  // expected-error @+1 {{'lhs' (fragments) must be a warp's view of a register buffer (memref.subview of a memref.alloca {attn.registers}) in the thread loop that holds the op}}
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(8) k(16) {acc_fragment, accumulate, lhs_fragment} : memref<2x4xf32>, memref<16x8xf32>, memref<1x4xf32>
  return
}

// -----

// The CPU reads the warp's register buffer: A[g + 8 h, k] from the view's
// row 4 g + (k % 8) / 2 (the lane that holds it), [k / 8, 2 h + k % 2], in
// a loop over k that carries the lane's accumulators.
// LOOPS-LABEL: func.func @pv_warp_fragments
// LOOPS:         %[[P:.+]] = memref.alloca() {attn.registers} : memref<64x2x4xf32>
// LOOPS:         scf.parallel (%[[T:.+]]) =
// LOOPS:           %[[LANE:.+]] = arith.remui %[[T]], %c32
// LOOPS:           %[[WARP:.+]] = memref.subview %[[P]][%{{.+}}, 0, 0] [32, 2, 4] [1, 1, 1]
// LOOPS:           %[[G:.+]] = arith.divui %[[LANE]], %c4
// LOOPS:           scf.for %[[K:.+]] = %c0 to %c16 step %c1 iter_args(
// LOOPS-DAG:         %[[KIN8:.+]] = arith.remui %[[K]], %c8
// LOOPS-DAG:         %[[PAIR:.+]] = arith.divui %[[KIN8]], %c2
// LOOPS-DAG:         %[[QUAD:.+]] = arith.muli %[[G]], %c4
// LOOPS-DAG:         %[[OWNER:.+]] = arith.addi %[[QUAD]], %[[PAIR]]
// LOOPS-DAG:         %[[BLOCK:.+]] = arith.divui %[[K]], %c8
// LOOPS-DAG:         %[[EL:.+]] = arith.remui %[[K]], %c2
// LOOPS:             %[[A:.+]] = memref.load %[[WARP]][%[[OWNER]], %[[BLOCK]], %[[EL]]]
// LOOPS:             math.fma %[[A]], %{{.+}}, %{{.+}} : f32
// LOOPS-NOT:       gpu.shuffle
func.func @pv_warp_fragments(%v: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %p = memref.alloca() {attn.registers} : memref<64x2x4xf32>
  %o = memref.alloca() {attn.registers} : memref<64x1x4xf32>
  scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
    %lane = arith.remui %t, %c32 : index
    %w = arith.divui %t, %c32 : index
    %first = arith.muli %w, %c32 : index
    %warp = memref.subview %p[%first, 0, 0] [32, 2, 4] [1, 1, 1] : memref<64x2x4xf32> to memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>
    %own = memref.subview %o[%t, 0, 0] [1, 1, 4] [1, 1, 1] : memref<64x1x4xf32> to memref<1x4xf32, strided<[4, 1], offset: ?>>
    attn_kernel.warp_mma %warp, %v, %own rows(%c0) lane(%lane) n(8) k(16) {acc_fragment, lhs_fragment} : memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>, memref<16x8xf32>, memref<1x4xf32, strided<[4, 1], offset: ?>>
    scf.reduce
  } {attn.threads}
  return
}

// -----

// The lanes run one after another on the CPU: a lane that wrote its
// fragments in the loop would change what the lanes before it have read.
func.func @fragments_written_in_loop(%v: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %p = memref.alloca() {attn.registers} : memref<32x2x4xf32>
  %o = memref.alloca() {attn.registers} : memref<32x1x4xf32>
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    %lane = arith.remui %t, %c32 : index
    %w = arith.divui %t, %c32 : index
    %first = arith.muli %w, %c32 : index
    %mine = memref.subview %p[%t, 0, 0] [1, 2, 4] [1, 1, 1] : memref<32x2x4xf32> to memref<2x4xf32, strided<[4, 1], offset: ?>>
    // expected-note @+1 {{written here}}
    memref.store %zero, %mine[%c0, %c0] : memref<2x4xf32, strided<[4, 1], offset: ?>>
    %warp = memref.subview %p[%first, 0, 0] [32, 2, 4] [1, 1, 1] : memref<32x2x4xf32> to memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>
    %own = memref.subview %o[%t, 0, 0] [1, 1, 4] [1, 1, 1] : memref<32x1x4xf32> to memref<1x4xf32, strided<[4, 1], offset: ?>>
    // expected-error @+1 {{'lhs' (the warp's fragments) is written in the same thread loop, where lanes would read fragments that other lanes have already changed}}
    attn_kernel.warp_mma %warp, %v, %own rows(%c0) lane(%lane) n(8) k(16) {acc_fragment, lhs_fragment} : memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>, memref<16x8xf32>, memref<1x4xf32, strided<[4, 1], offset: ?>>
    scf.reduce
  } {attn.threads}
  return
}

// -----

// The view must start at the warp's first thread.
func.func @fragments_not_the_warps(%v: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %p = memref.alloca() {attn.registers} : memref<64x2x4xf32>
  %o = memref.alloca() {attn.registers} : memref<64x1x4xf32>
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    %lane = arith.remui %t, %c32 : index
    %warp = memref.subview %p[%lane, 0, 0] [32, 2, 4] [1, 1, 1] : memref<64x2x4xf32> to memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>
    %own = memref.subview %o[%t, 0, 0] [1, 1, 4] [1, 1, 1] : memref<64x1x4xf32> to memref<1x4xf32, strided<[4, 1], offset: ?>>
    // expected-error @+1 {{'lhs' (fragments) must view the registers of the warp of the loop's thread: offsets [(thread / 32) * 32, 0, ...], strides 1}}
    attn_kernel.warp_mma %warp, %v, %own rows(%c0) lane(%lane) n(8) k(16) {acc_fragment, lhs_fragment} : memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>, memref<16x8xf32>, memref<1x4xf32, strided<[4, 1], offset: ?>>
    scf.reduce
  } {attn.threads}
  return
}

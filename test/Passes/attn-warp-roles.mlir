// DEFINE: %{lower} = mlir-opt -convert-vector-to-scf -convert-scf-to-cf -convert-vector-to-llvm \
// DEFINE:     -expand-strided-metadata -finalize-memref-to-llvm \
// DEFINE:     -convert-arith-to-llvm -convert-func-to-llvm -convert-cf-to-llvm \
// DEFINE:     -reconcile-unrealized-casts
// DEFINE: %{run} = mlir-runner -entry-point-result=void \
// DEFINE:     -shared-libs=%mlir_c_runner_utils
// RUN: attn-opt %s -attn-gpu-outline-kernels | FileCheck %s --check-prefix=GPU
// RUN: attn-opt %s -attn-async-copy-to-loops | %{lower} | %{run} -e main | FileCheck %s --check-prefix=CPU
// RUN: attn-opt %s -attn-defer-async-copies -attn-async-copy-to-loops -attn-reorder-thread-loops -attn-poison-kernel-buffers | %{lower} | %{run} -e main | FileCheck %s --check-prefix=CPU
// RUN: attn-opt %s -attn-defer-async-copies -attn-async-copy-to-loops -attn-reorder-thread-loops | FileCheck %s --check-prefix=STRESSED

// A region split by roles (SimtEmitter::byRoles): a producer warp (threads
// 0-31) stages six tiles of 32 floats into two slots, and a consumer warp
// (threads 32-63) hands each tile on to the output in two loops, the
// roles synchronized by a `full` and an `empty` mbarrier per slot alone.
//
// On the CPU the region runs as it is, the roles' loops interleaved in
// each tile as the CPU form of mbarriers asks (the producer's loop before
// the consumer's). Stressed, the copies land at the producer's arrival and
// the consumer's two warp-synced loops run warp by warp over its own
// threads (32-63), reversed in even blocks: the output is the tiles either
// way (no element differs).
// CPU: 0

// STRESSED-LABEL: func.func private @handoff
// STRESSED:         scf.execute_region no_inline {
// STRESSED:           scf.for
// STRESSED:             scf.parallel (%{{.+}}) = (%c0{{.*}}) to (%c32{{.*}})
// STRESSED:             scf.for %{{.+}} = %c0{{.*}} to %c1{{.*}} step %c1
// STRESSED:               %[[WARP:.+]] = arith.muli %{{.+}}, %c32
// STRESSED:               %[[BEGIN:.+]] = arith.addi %c32{{.*}}, %[[WARP]]
// STRESSED:               %[[END:.+]] = arith.addi %[[BEGIN]], %c32
// STRESSED:               scf.parallel (%{{.+}}) = (%[[BEGIN]]) to (%[[END]])
// STRESSED:               scf.parallel (%{{.+}}) = (%[[BEGIN]]) to (%[[END]])
// STRESSED:         } {attn.by_roles}

// On the GPU each role runs its own copy of the region, holding its loops
// alone, under the condition that the thread is one of the role's: the
// producer's loop of tiles runs ahead of the consumer's as far as the
// `empty` barriers let it. What the region computes outside thread loops
// (the slot and phases of a tile) each copy computes itself. The barrier
// init, a loop over all the threads, still ends with a block-wide barrier.
// GPU-LABEL: gpu.func @handoff
// GPU:         attn_kernel.mbarrier_init
// GPU:         gpu.barrier
// GPU:         %[[TID0:.+]] = gpu.thread_id x
// GPU:         %[[FROM0:.+]] = arith.cmpi uge, %[[TID0]], %c0
// GPU:         %[[TO0:.+]] = arith.cmpi ult, %[[TID0]], %c32
// GPU:         %[[PRODUCER:.+]] = arith.andi %[[FROM0]], %[[TO0]]
// GPU:         scf.if %[[PRODUCER]] {
// GPU:           scf.for
// GPU:             arith.remui
// GPU:             attn_kernel.mbarrier_wait %{{.+}} parity
// GPU:             attn_kernel.async_copy
// GPU:             attn_kernel.mbarrier_arrive %{{.+}} after_copies
// GPU-NOT:         nvvm.barrier
// GPU-NOT:         gpu.barrier
// GPU-NOT:         memref.store
// GPU:           }
// GPU:         }
// GPU:         %[[TID1:.+]] = gpu.thread_id x
// GPU:         %[[FROM1:.+]] = arith.cmpi uge, %[[TID1]], %c32
// GPU:         %[[TO1:.+]] = arith.cmpi ult, %[[TID1]], %c64
// GPU:         %[[CONSUMER:.+]] = arith.andi %[[FROM1]], %[[TO1]]
// GPU:         scf.if %[[CONSUMER]] {
// GPU:           scf.for
// GPU-NOT:         attn_kernel.async_copy
// GPU:             attn_kernel.mbarrier_wait
// GPU:             nvvm.bar.warp.sync
// GPU:             memref.store
// GPU:             nvvm.bar.warp.sync
// GPU:           }
// GPU:         }
// GPU-NOT:     scf.execute_region
// GPU:         gpu.return
func.func private @handoff(%tiles: memref<6x32xf32>, %out: memref<6x32xf32>,
                           %workgroup: index)
    attributes {attn.kernel = "handoff", attn.block_kernel,
                attn.tiling = {block_threads = 64 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c6 = arith.constant 6 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %stages = memref.alloca() {attn.shared} : memref<2x32xf32>
  %full = memref.alloca() {attn.shared} : memref<2xi64>
  %empty = memref.alloca() {attn.shared} : memref<2xi64>
  %held = memref.alloca() {attn.registers} : memref<64x1xf32>
  scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      scf.for %s = %c0 to %c2 step %c1 {
        attn_kernel.mbarrier_init %full[%s] arrivals(32) : memref<2xi64>
        attn_kernel.mbarrier_init %empty[%s] arrivals(32) : memref<2xi64>
      }
    }
    scf.reduce
  } {attn.threads}
  scf.execute_region no_inline {
    scf.for %j = %c0 to %c6 step %c1 {
      %s = arith.remui %j, %c2 : index
      %round = arith.divui %j, %c2 : index
      %before = arith.addi %round, %c1 : index
      scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
        attn_kernel.mbarrier_wait %empty[%s] parity(%before) : memref<2xi64>
        %true = arith.constant true
        attn_kernel.async_copy %tiles[%j, %t], %stages[%s, %t] if(%true)
            elements(1) : memref<6x32xf32>, memref<2x32xf32>
        attn_kernel.mbarrier_arrive %full[%s] after_copies : memref<2xi64>
        scf.reduce
      } {attn.threads, attn.mbarrier_sync}
      scf.parallel (%t) = (%c32) to (%c64) step (%c1) {
        %lane = arith.subi %t, %c32 : index
        attn_kernel.mbarrier_wait %full[%s] parity(%round) : memref<2xi64>
        %x = memref.load %stages[%s, %lane] : memref<2x32xf32>
        %mine = memref.subview %held[%t, 0] [1, 1] [1, 1]
            : memref<64x1xf32> to memref<1xf32, strided<[1], offset: ?>>
        memref.store %x, %mine[%c0] : memref<1xf32, strided<[1], offset: ?>>
        attn_kernel.mbarrier_arrive %empty[%s] : memref<2xi64>
        scf.reduce
      } {attn.threads, attn.warp_sync}
      scf.parallel (%t) = (%c32) to (%c64) step (%c1) {
        %lane = arith.subi %t, %c32 : index
        %mine = memref.subview %held[%t, 0] [1, 1] [1, 1]
            : memref<64x1xf32> to memref<1xf32, strided<[1], offset: ?>>
        %x = memref.load %mine[%c0] : memref<1xf32, strided<[1], offset: ?>>
        memref.store %x, %out[%j, %lane] : memref<6x32xf32>
        scf.reduce
      } {attn.threads, attn.warp_sync}
    }
    scf.yield
  } {attn.by_roles}
  return
}

// A thread loop over some warps outside a region split by roles: its body
// under the condition that the thread is one of them, and the barrier
// after it met by every thread.
// GPU-LABEL: gpu.func @some_warps
// GPU:         %[[TID:.+]] = gpu.thread_id x
// GPU:         %[[FROM:.+]] = arith.cmpi uge, %[[TID]], %c32
// GPU:         %[[TO:.+]] = arith.cmpi ult, %[[TID]], %c64
// GPU:         %[[MINE:.+]] = arith.andi %[[FROM]], %[[TO]]
// GPU:         scf.if %[[MINE]] {
// GPU-NEXT:      memref.store %{{.+}}, %{{.+}}[%[[TID]]]
// GPU-NEXT:    }
// GPU-NEXT:    gpu.barrier
func.func private @some_warps(%a: memref<64xf32>, %workgroup: index)
    attributes {attn.kernel = "some_warps", attn.block_kernel,
                attn.tiling = {block_threads = 64 : i64}} {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %x = arith.constant 1.0 : f32
  scf.parallel (%t) = (%c32) to (%c64) step (%c1) {
    memref.store %x, %a[%t] : memref<64xf32>
    scf.reduce
  } {attn.threads}
  return
}

// The CPU's driver (a host: the GPU's outliner drops it): tile j's element
// e is 100 j + e; prints how many output elements differ from the tiles.
func.func @main() attributes {attn.entry} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %c32 = arith.constant 32 : index
  %tiles = memref.alloca() : memref<6x32xf32>
  %out = memref.alloca() : memref<6x32xf32>
  scf.for %j = %c0 to %c6 step %c1 {
    scf.for %e = %c0 to %c32 step %c1 {
      %c100 = arith.constant 100 : index
      %row = arith.muli %j, %c100 : index
      %v = arith.addi %row, %e : index
      %i = arith.index_cast %v : index to i32
      %x = arith.sitofp %i : i32 to f32
      memref.store %x, %tiles[%j, %e] : memref<6x32xf32>
    }
  }
  func.call @handoff(%tiles, %out, %c0)
      : (memref<6x32xf32>, memref<6x32xf32>, index) -> ()
  %differ = scf.for %j = %c0 to %c6 step %c1 iter_args(%n = %c0) -> index {
    %row = scf.for %e = %c0 to %c32 step %c1 iter_args(%m = %n) -> index {
      %x = memref.load %tiles[%j, %e] : memref<6x32xf32>
      %y = memref.load %out[%j, %e] : memref<6x32xf32>
      %same = arith.cmpf oeq, %x, %y : f32
      %next = arith.addi %m, %c1 : index
      %count = arith.select %same, %m, %next : index
      scf.yield %count : index
    }
    scf.yield %row : index
  }
  vector.print %differ : index
  return
}

// RUN: attn-opt %s -attn-gpu-outline-kernels -attn-async-copy-to-nvvm=chip=sm_90a | FileCheck %s --check-prefix=NVVM
// RUN: attn-opt %s -attn-gpu-lower-to-nvvm=chip=sm_90a \
// RUN:   | mlir-opt -gpu-module-to-binary=format=isa | FileCheck %s --check-prefix=PTX
// RUN: not attn-opt %s -attn-gpu-outline-kernels -attn-async-copy-to-nvvm=chip=sm_80 -o /dev/null 2>&1 | FileCheck %s --check-prefix=SM80

// mbarriers on the GPU (on the CPU: attn-mbarrier.mlir). A block of 64
// threads: warp 0 stages tiles of 32 values for warp 1 through two stages,
// each with a `full` and an `empty` barrier of 32 arrivals; the warps go
// through the tiles in thread loops that no barrier ends (the producer's
// before the consumer's in each tile, the CPU form's order), each waiting
// only for the other's arrivals.

// The barriers' words in dynamic shared memory like any shared buffer;
// one barrier after the loop that initializes them, none after the
// mbarrier-synced loop of each tile.
// NVVM-LABEL: gpu.func @pipeline
// NVVM:         %[[FULL:.+]] = memref.view %{{.+}}[%{{.+}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<2xi64, #gpu.address_space<workgroup>>
// NVVM:         memref.extract_aligned_pointer_as_index %[[FULL]]
// NVVM:         llvm.inttoptr %{{.+}} : i64 to !llvm.ptr<3>
// NVVM:         nvvm.mbarrier.init %{{.+}}, %{{.+}} : !llvm.ptr<3>, i32
// NVVM:         gpu.barrier
// NVVM:         scf.for
// NVVM:           nvvm.mbarrier.try_wait.parity
// NVVM:           nvgpu.device_async_copy
// NVVM:           nvvm.cp.async.mbarrier.arrive %{{.+}} {noinc = true} : !llvm.ptr<3>
// NVVM:           nvvm.mbarrier.try_wait.parity
// NVVM:           nvvm.mbarrier.arrive %{{.+}} : !llvm.ptr<3> -> i64
// NVVM-NOT:       gpu.barrier
// NVVM:         gpu.return

// PTX:       mbarrier.init.shared.b64
// PTX:       bar.sync
// PTX:       mbarrier.try_wait.parity.shared.b64
// PTX:       cp.async.ca.shared.global
// PTX:       cp.async.mbarrier.arrive.noinc.shared.b64
// PTX:       mbarrier.try_wait.parity.shared.b64
// PTX:       mbarrier.arrive.shared.b64

// sm_80 has mbarriers but not try_wait, which LLVM's NVPTX back end
// selects only from sm_90 on.
// SM80: error: 'attn_kernel.mbarrier_init' op needs mbarrier.try_wait, which begins at sm_90 (got sm_80)
func.func private @pipeline(%tiles: memref<?x32xf32>, %out: memref<?x32xf32>,
                            %workgroup: index)
    attributes {attn.kernel = "pipeline", attn.block_kernel,
                attn.tiling = {block_threads = 64 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %count = memref.dim %tiles, %c0 : memref<?x32xf32>
  %stages = memref.alloca() {attn.shared} : memref<2x32xf32>
  %full = memref.alloca() {attn.shared} : memref<2xi64>
  %empty = memref.alloca() {attn.shared} : memref<2xi64>
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
  scf.for %j = %c0 to %count step %c1 {
    %s = arith.remui %j, %c2 : index
    %round = arith.divui %j, %c2 : index
    %before = arith.addi %round, %c1 : index
    scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
      %producer = arith.cmpi ult, %t, %c32 : index
      scf.if %producer {
        attn_kernel.mbarrier_wait %empty[%s] parity(%before) : memref<2xi64>
        %true = arith.constant true
        attn_kernel.async_copy %tiles[%j, %t], %stages[%s, %t] if(%true)
            elements(1) : memref<?x32xf32>, memref<2x32xf32>
        attn_kernel.mbarrier_arrive %full[%s] after_copies : memref<2xi64>
      }
      scf.reduce
    } {attn.threads, attn.mbarrier_sync}
    scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
      %consumer = arith.cmpi uge, %t, %c32 : index
      scf.if %consumer {
        %lane = arith.subi %t, %c32 : index
        attn_kernel.mbarrier_wait %full[%s] parity(%round) : memref<2xi64>
        %x = memref.load %stages[%s, %lane] : memref<2x32xf32>
        memref.store %x, %out[%j, %lane] : memref<?x32xf32>
        attn_kernel.mbarrier_arrive %empty[%s] : memref<2xi64>
      }
      scf.reduce
    } {attn.threads, attn.mbarrier_sync}
  }
  return
}

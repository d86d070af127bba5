// RUN: attn-opt %s -attn-gpu-outline-kernels -attn-async-copy-to-nvvm=chip=sm_90a | FileCheck %s --check-prefix=NVVM
// RUN: attn-opt %s -attn-gpu-lower-to-nvvm=chip=sm_90a \
// RUN:   | mlir-opt -gpu-module-to-binary=format=isa | FileCheck %s --check-prefix=PTX
// RUN: %if cuda-toolkit %{ attn-opt %s -attn-gpu-lower-to-nvvm=chip=sm_90a \
// RUN:   | mlir-opt -gpu-module-to-binary=format=isa \
// RUN:   | %python %S/Inputs/gpu-binary-ptx.py > %t.ptx %}
// RUN: %if cuda-toolkit %{ %cuda_path/bin/ptxas -arch=sm_90a %t.ptx -o /dev/null %}
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

// PTX-LABEL: .entry pipeline
// PTX:       mbarrier.init.shared.b64
// PTX:       bar.sync
// PTX:       mbarrier.try_wait.parity.shared.b64
// PTX:       cp.async.ca.shared.global
// PTX:       cp.async.mbarrier.arrive.noinc.shared.b64
// PTX:       mbarrier.try_wait.parity.shared.b64
// PTX:       mbarrier.arrive.shared.b64

// sm_80 has mbarriers but not try_wait, which LLVM's NVPTX back end
// selects only from sm_90 on, nor bulk copies.
// SM80: error: 'attn_kernel.mbarrier_init' op needs sm_90's mbarrier.try_wait and bulk copies (got sm_80)
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

// A bulk copy per tile: thread 0 announces the row's 128 bytes on `full`
// and copies it with one instruction (into the cluster's window of the
// block's shared memory: the shared::cta form needs PTX 8.6).
// NVVM-LABEL: gpu.func @bulk_rows
// NVVM:         nvvm.mbarrier.arrive.expect_tx %{{.+}}, %{{.+}} : !llvm.ptr<3>, i32 -> i64
// NVVM:         %[[TARGET:.+]] = llvm.addrspacecast %{{.+}} : !llvm.ptr<3> to !llvm.ptr<7>
// NVVM:         %[[SOURCE:.+]] = llvm.addrspacecast %{{.+}} : !llvm.ptr to !llvm.ptr<1>
// NVVM:         nvvm.cp.async.bulk.shared.cluster.global %[[TARGET]], %[[SOURCE]], %{{.+}}, %{{.+}} : !llvm.ptr<7>, {{.*}}<1>
// PTX-LABEL: .entry bulk_rows
// PTX:       mbarrier.arrive.expect_tx.shared.b64
// PTX:       cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX:       mbarrier.try_wait.parity.shared.b64
func.func private @bulk_rows(%tiles: memref<?x32xf32>, %out: memref<?x32xf32>,
                             %workgroup: index)
    attributes {attn.kernel = "bulk_rows", attn.block_kernel,
                attn.tiling = {block_threads = 64 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %count = memref.dim %tiles, %c0 : memref<?x32xf32>
  %stages = memref.alloca() {attn.shared} : memref<2x32xf32>
  %full = memref.alloca() {attn.shared} : memref<2xi64>
  %empty = memref.alloca() {attn.shared} : memref<2xi64>
  scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      scf.for %s = %c0 to %c2 step %c1 {
        attn_kernel.mbarrier_init %full[%s] arrivals(1) : memref<2xi64>
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
      %producer = arith.cmpi eq, %t, %c0 : index
      scf.if %producer {
        attn_kernel.mbarrier_wait %empty[%s] parity(%before) : memref<2xi64>
        attn_kernel.mbarrier_arrive %full[%s] expect_bytes(%c128)
            : memref<2xi64>
        attn_kernel.bulk_copy %tiles[%j, %c0], %stages[%s, %c0] elements(32)
            on(%full[%s]) : memref<?x32xf32>, memref<2x32xf32>, memref<2xi64>
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

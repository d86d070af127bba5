// RUN: attn-opt %s -attn-gpu-dispatch -attn-gpu-outline-kernels | FileCheck %s --check-prefix=OUTLINE
// RUN: attn-opt %s -attn-gpu-dispatch -attn-gpu-lower-to-nvvm | FileCheck %s --check-prefix=NVVM

// A block kernel (the chunked recurrence) on its way to NVVM. A workgroup is
// a block, so the body runs under `blockIdx.x < count` (uniform over the
// block); the shared buffers become views into dynamic shared memory at
// 16-byte aligned offsets (beside the chunk's products on warp_mma it runs
// decode steps, so its buffers are a step's: 1 x 33 floats, 132 bytes, then
// 144, ...); each thread loop becomes its body for threadIdx.x followed by
// a barrier.
// OUTLINE:       gpu.func @gdn__chunked0({{.*}}, %[[COUNT:[a-z0-9]+]]: index) kernel
// OUTLINE-SAME:    known_block_size = array<i32: 32, 1, 1>
// OUTLINE:         %[[SMEM:.+]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %[[SMEM]][%c0{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<1x33xf32, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %[[SMEM]][%c144{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<1x33xf32, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %[[SMEM]][%c336{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<1x32xf32, #gpu.address_space<workgroup>>
// OUTLINE:         %[[BLOCK:.+]] = gpu.block_id x
// OUTLINE:         %[[IN:.+]] = arith.cmpi ult, %[[BLOCK]], %[[COUNT]]
// OUTLINE:         scf.if %[[IN]] {
// OUTLINE-NOT:       scf.parallel
// OUTLINE-NOT:       memref.alloca
// OUTLINE:           %[[TID:.+]] = gpu.thread_id x
// OUTLINE:           arith.cmpi ult, %[[TID]], %c24
// OUTLINE:           gpu.barrier
// OUTLINE:           scf.for
// OUTLINE:             %[[TID2:.+]] = gpu.thread_id x
// OUTLINE:             scf.for %{{.+}} = %[[TID2]] to %{{.+}} step %c32
// OUTLINE:             gpu.barrier
// OUTLINE-COUNT-3:     gpu.barrier
// OUTLINE:         gpu.return
// The gate is a block kernel too (a block per 16 rows): its rows' indices
// (batch, head, step), its rows of o and z (16 x (24 + 16) floats, copied
// as stored, padded so that the partial sums' lanes meet different banks),
// the weights, the rows' partial sums of squares (8 a row, padded to 9) and
// their scales in shared memory, a barrier after each of its five thread
// loops.
// OUTLINE:       gpu.func @gdn__gate5
// OUTLINE:         memref.view %{{.+}}[%c0{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16x3xi64, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %{{.+}}[%c384{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16x40xf32, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %{{.+}}[%c2944{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16x40xf32, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %{{.+}}[%c5504{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<1x24xf32, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %{{.+}}[%c5600{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16x9xf32, #gpu.address_space<workgroup>>
// OUTLINE:         memref.view %{{.+}}[%c6176{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16xf32, #gpu.address_space<workgroup>>
// OUTLINE-COUNT-5: gpu.barrier
// OUTLINE-NOT:     gpu.barrier
// OUTLINE:         gpu.return

// After the NVVM lowering, the dynamic shared memory is an external
// zero-length array of the shared address space (`.extern .shared ... []` in the PTX), the barrier
// bar.sync 0, threadIdx.x known to lie in [0, 32).
// NVVM:          llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
// NVVM:          llvm.func @gdn__chunked0(
// NVVM-SAME:       nvvm.maxntid = array<i32: 32, 1, 1>
// NVVM:            llvm.mlir.addressof @__dynamic_shmem__0 : !llvm.ptr<3>
// NVVM:            nvvm.read.ptx.sreg.ctaid.x
// NVVM:            nvvm.read.ptx.sreg.tid.x range <i32, 0, 32>
// NVVM:            nvvm.barrier0
// NVVM:            llvm.load %{{.+}} : !llvm.ptr<3> -> f32
func.func @gdn(%q: tensor<?x2x?x32xf32>, %k: tensor<?x2x?x32xf32>,
               %v: tensor<?x4x?x24xf32>, %g: tensor<?x4x?xf32>,
               %beta: tensor<?x4x?xf32>, %s0: tensor<?x4x32x24xf32>,
               %z: tensor<?x4x?x24xf32>, %w: tensor<24xf32>)
    -> (tensor<?x4x?x24xf32>, tensor<?x4x32x24xf32>) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x4x?xf32>) beta(%beta : tensor<?x4x?xf32>)
      state(%s0 : tensor<?x4x32x24xf32>)
      output_gate(%z, %w : tensor<?x4x?x24xf32>, tensor<24xf32>)
      {chunk_size = 16, qk_l2norm}
      : tensor<?x2x?x32xf32>, tensor<?x2x?x32xf32>, tensor<?x4x?x24xf32>
  return %o, %s : tensor<?x4x?x24xf32>, tensor<?x4x32x24xf32>
}

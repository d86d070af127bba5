// RUN: attn-opt %s -attn-gpu-dispatch -attn-gpu-outline-kernels | FileCheck %s --check-prefix=OUTLINE
// RUN: attn-opt %s -attn-gpu-dispatch -attn-gpu-lower-to-nvvm='chip=sm_80 features=+ptx80' | FileCheck %s --check-prefix=NVVM

// Outlining: the kernels move into a gpu.module with the NVVM target; the
// host functions (already in the binary) are dropped. A block kernel (the
// flash kernel) runs for block blockIdx.x when it is below the count: its
// shared buffers become views into dynamic shared memory, its register
// buffers one array per thread in the entry block (a lane's score and
// output fragments, its rows' max and sum) that its threads' slices become,
// its thread loops bodies for threadIdx.x each followed by a barrier, and
// its warp_mma ops stay in the uniform code every thread runs.
// OUTLINE:       module attributes {gpu.container_module}
// OUTLINE-NOT:   attn.entry
// OUTLINE:       gpu.module @attn_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">]
// OUTLINE:         gpu.func @layer__flash0(%{{.+}}: memref<?x4x?x32xf32>, %{{.+}}: memref<?x4x?x32xf32>, %{{.+}}: memref<?x4x?x32xf32>, %{{.+}}: memref<?x4x?x32xf32>, %[[BLOCKS:.+]]: index) kernel
// OUTLINE-SAME:      attn.kernel = "flash"
// OUTLINE-SAME:      known_block_size = array<i32: 128, 1, 1>
// OUTLINE-NEXT:      %[[SCORES:.+]] = memref.alloca() {alignment = 16 : i64} : memref<8x4xf32>
// OUTLINE-NEXT:      %[[OUT:.+]] = memref.alloca() {alignment = 16 : i64} : memref<4x4xf32>
// OUTLINE-NEXT:      memref.alloca() {alignment = 16 : i64} : memref<2xf32>
// OUTLINE-NEXT:      memref.alloca() {alignment = 16 : i64} : memref<2xf32>
// OUTLINE-NOT:       attn.registers
// OUTLINE:           %[[SHARED:.+]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// OUTLINE:           memref.view %[[SHARED]][%c0{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x36xf32, #gpu.address_space<workgroup>>
// OUTLINE:           %[[BLOCK:.+]] = gpu.block_id x
// OUTLINE:           %[[IN_GRID:.+]] = arith.cmpi ult, %[[BLOCK]], %[[BLOCKS]]
// OUTLINE:           scf.if %[[IN_GRID]] {
// OUTLINE:             gpu.thread_id x
// OUTLINE:             gpu.barrier
// OUTLINE:             scf.for
// OUTLINE:               %[[LANE:.+]] = arith.remui %thread_id_x{{.*}}, %c32
// OUTLINE:               %[[S:.+]] = memref.cast %[[SCORES]] : memref<8x4xf32> to memref<8x4xf32, strided<[4, 1], offset: ?>>
// OUTLINE-NEXT:          attn_kernel.warp_mma %{{.+}}, %{{.+}}, %[[S]] rows(%{{.+}}) lane(%[[LANE]]) n(64) k(32) {acc_fragment, rhs_transposed} : memref<64x36xf32, #gpu.address_space<workgroup>>
// The scores' loop (attn.warp_sync) waits for the warp only.
// OUTLINE-NOT:           gpu.barrier
// OUTLINE:               %[[ALL:.+]] = arith.constant -1 : i32
// OUTLINE-NEXT:          nvvm.bar.warp.sync %[[ALL]] : i32
// OUTLINE-NOT:           gpu.barrier
// OUTLINE:               attn_kernel.async_copy
// OUTLINE:               attn_kernel.async_wait
// OUTLINE-NEXT:          gpu.barrier
// P v reads P from the warp's score fragments: on the GPU the lane's own
// array (the lowering shuffles or packs it).
// OUTLINE:               %[[O:.+]] = memref.cast %[[OUT]] : memref<4x4xf32> to memref<4x4xf32, strided<[4, 1], offset: ?>>
// OUTLINE-NOT:           memref.subview
// OUTLINE:               attn_kernel.warp_mma %[[SCORES]], %{{.+}}, %[[O]] rows(%{{.+}}) lane(%{{.+}}) n(32) k(64) {acc_fragment, accumulate, lhs_fragment} : memref<8x4xf32>
// OUTLINE-NEXT:          attn_kernel.async_wait
// OUTLINE-NEXT:          gpu.barrier
// OUTLINE:           gpu.return
// Decode's flash kernel over key splits: a block kernel of one warp (the
// kv group is one head, times 8 rows).
// OUTLINE:         gpu.func @layer__flash_decode1(
// OUTLINE-SAME:      attn.kernel = "flash_decode"
// OUTLINE-SAME:      known_block_size = array<i32: 32, 1, 1>
// OUTLINE:           gpu.block_id x
// OUTLINE:           gpu.barrier
// OUTLINE:           gpu.return
// A thread kernel (the zeroing of decode's split counters) runs under
// `thread < count`, thread = blockIdx.x * blockDim.x + threadIdx.x.
// OUTLINE:         gpu.func @layer__zero2({{.*}}, %[[COUNT:[a-z0-9]+]]: index) kernel
// OUTLINE-DAG:       %[[CTAID:.+]] = gpu.block_id x
// OUTLINE-DAG:       %[[NTID:.+]] = gpu.block_dim x
// OUTLINE-DAG:       %[[TID:.+]] = gpu.thread_id x
// OUTLINE:           %[[BASE:.+]] = arith.muli %[[CTAID]], %[[NTID]]
// OUTLINE:           %[[THREAD:.+]] = arith.addi %[[BASE]], %[[TID]]
// OUTLINE:           %[[IN:.+]] = arith.cmpi ult, %[[THREAD]], %[[COUNT]]
// OUTLINE:           scf.if %[[IN]] {
// OUTLINE:             memref.store %{{.+}}, %{{.+}}[%[[THREAD]]]
// OUTLINE:           gpu.return

// After the NVVM lowering: the kernels in the LLVM dialect, each memref an
// expanded descriptor (2 pointers, offset, 4 sizes, 4 strides), the
// workgroup count last; math through libdevice (the flash kernels' softmax
// exponentials as exp2); f32 products are three tf32 mma.sync a step
// (attn-warp-mma.mlir has their operands), and P v takes P from the lane's
// own fragments, with no warp shuffle.
// NVVM:          gpu.module @attn_kernels [#nvvm.target<O = 3, chip = "sm_80", features = "+ptx80">]
// NVVM-DAG:        llvm.func @__nv_exp2f(f32) -> f32
// NVVM:            llvm.func @layer__flash0(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr,
// NVVM-SAME:         %[[COUNT:[a-z0-9]+]]: i64)
// NVVM-SAME:         nvvm.kernel
// NVVM-SAME:         nvvm.maxntid = array<i32: 128, 1, 1>
// NVVM:              nvvm.read.ptx.sreg.ctaid.x
// NVVM:              llvm.icmp "ult" %{{.+}}, %[[COUNT]] : i64
// NVVM:              nvvm.read.ptx.sreg.tid.x
// NVVM:              nvvm.barrier
// NVVM:              nvvm.convert.float.to.tf32 %{{.+}} {rnd = #nvvm.fp_rnd_mode<rna>}
// NVVM:              nvvm.mma.sync {{.+}} multiplicandAPtxType = #nvvm.mma_type<tf32>, multiplicandBPtxType = #nvvm.mma_type<tf32>, shape = #nvvm.shape<m = 16, n = 8, k = 8>
// NVVM:              llvm.call @__nv_exp2f
// NVVM:              nvvm.mma.sync {{.+}} multiplicandAPtxType = #nvvm.mma_type<tf32>
// NVVM-NOT:          nvvm.shfl.sync
// NVVM:              llvm.func
// NVVM-NOT:      func.func
func.func @layer(%q: tensor<?x4x?x32xf32>, %k: tensor<?x4x?x32xf32>,
                 %v: tensor<?x4x?x32xf32>) -> tensor<?x4x?x32xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window = 16>}
      : tensor<?x4x?x32xf32>, tensor<?x4x?x32xf32>, tensor<?x4x?x32xf32>
  return %o : tensor<?x4x?x32xf32>
}

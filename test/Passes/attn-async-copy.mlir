// RUN: attn-opt %s -split-input-file -attn-async-copy-to-nvvm=chip=sm_90a | FileCheck %s --check-prefix=CPASYNC
// RUN: attn-opt %s -split-input-file -attn-async-copy-to-nvvm=chip=sm_90a -convert-nvgpu-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: attn-opt %s -split-input-file -attn-async-copy-to-nvvm=chip=sm_75 | FileCheck %s --check-prefix=COPY
// RUN: attn-opt %s -split-input-file -attn-async-copy-to-loops | FileCheck %s --check-prefix=COPY

// A thread's staging copies of 16 bytes (8 bf16) into a shared row, and of
// 4 bytes (one f32), then its wait.

// From sm_80 on: cp.async, the source size the whole copy where it is
// valid and 0 (zeros into the target, nothing read) where it is not; .cg
// (L2 only) for 16 bytes. The wait commits the thread's copies as a group
// and waits for all of them.
// CPASYNC-LABEL: func.func @stage
// CPASYNC-SAME:    %[[K:[a-z0-9]+]]: memref<?x128xbf16>, %[[KS:[a-z0-9]+]]: memref<64x136xbf16, #gpu.address_space<workgroup>>, %[[X:[a-z0-9]+]]: memref<?xf32>, %[[XS:[a-z0-9]+]]: memref<4xf32, #gpu.address_space<workgroup>>, %[[I:[a-z0-9]+]]: index, %[[J:[a-z0-9]+]]: index, %[[VALID:[a-z0-9]+]]: i1
// CPASYNC:         %[[N:.+]] = arith.select %[[VALID]], %c8, %c0 : index
// CPASYNC:         nvgpu.device_async_copy %[[K]][%[[I]], %[[J]]], %[[KS]][%[[J]], %[[J]]], 8, %[[N]] {bypassL1} : memref<?x128xbf16> to memref<64x136xbf16, #gpu.address_space<workgroup>>
// CPASYNC:         %[[N1:.+]] = arith.select %[[VALID]], %c1, %c0
// CPASYNC:         nvgpu.device_async_copy %[[X]][%[[I]]], %[[XS]][%[[J]]], 1, %[[N1]] : memref<?xf32> to memref<4xf32, #gpu.address_space<workgroup>>
// CPASYNC-NEXT:    nvvm.cp.async.commit.group
// CPASYNC-NEXT:    nvvm.cp.async.wait.group 0
// CPASYNC-NOT:     attn.async
// NVVM-LABEL: func.func @stage
// NVVM:         nvvm.cp.async.shared.global %{{.+}}, %{{.+}}, 16, cache = cg, %{{.+}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// NVVM:         nvvm.cp.async.shared.global %{{.+}}, %{{.+}}, 4, cache = ca, %{{.+}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// NVVM:         nvvm.cp.async.commit.group
// NVVM-NEXT:    nvvm.cp.async.wait.group 0

// Below sm_80, and on the CPU: the copy at once, a vector load and store
// where it is valid, zeros an element at a time where it is not; no wait.
// COPY-LABEL: func.func @stage
// COPY-SAME:    %[[K:[a-z0-9]+]]: memref<?x128xbf16>, %[[KS:[a-z0-9]+]]: memref<64x136xbf16, #gpu.address_space<workgroup>>, %[[X:[a-z0-9]+]]: memref<?xf32>, %[[XS:[a-z0-9]+]]: memref<4xf32, #gpu.address_space<workgroup>>, %[[I:[a-z0-9]+]]: index, %[[J:[a-z0-9]+]]: index, %[[VALID:[a-z0-9]+]]: i1
// COPY:         scf.if %[[VALID]] {
// COPY-NEXT:      %[[PIECE:.+]] = vector.load %[[K]][%[[I]], %[[J]]] {alignment = 16 : i64} : memref<?x128xbf16>, vector<8xbf16>
// COPY-NEXT:      vector.store %[[PIECE]], %[[KS]][%[[J]], %[[J]]] {alignment = 16 : i64} : memref<64x136xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// COPY-NEXT:    } else {
// COPY-NEXT:      %[[ZERO:.+]] = arith.constant 0.000000e+00 : bf16
// COPY-NEXT:      memref.store %[[ZERO]], %[[KS]][%[[J]], %[[J]]]
// COPY-COUNT-7:   memref.store %[[ZERO]], %[[KS]][%[[J]], %{{.+}}]
// COPY-NEXT:    }
// COPY:         scf.if %[[VALID]] {
// COPY-NEXT:      vector.load %[[X]][%[[I]]] {alignment = 4 : i64} : memref<?xf32>, vector<1xf32>
// COPY-NOT:     attn.async
// COPY:         return
func.func @stage(%k: memref<?x128xbf16>,
                 %ks: memref<64x136xbf16, #gpu.address_space<workgroup>>,
                 %x: memref<?xf32>,
                 %xs: memref<4xf32, #gpu.address_space<workgroup>>,
                 %i: index, %j: index, %valid: i1) {
  attn_kernel.async_copy %k[%i, %j], %ks[%j, %j] if(%valid) elements(8)
      : memref<?x128xbf16>, memref<64x136xbf16, #gpu.address_space<workgroup>>
  attn_kernel.async_copy %x[%i], %xs[%j] if(%valid) elements(1)
      : memref<?xf32>, memref<4xf32, #gpu.address_space<workgroup>>
  attn_kernel.async_wait
  return
}

// -----

// A wait for warpgroup products: after the copies complete, the thread's
// shared writes are made visible to the async proxy that wgmma reads
// through. sm_75 and the CPU have no wgmma: nothing is left.
// CPASYNC-LABEL: func.func @stage_for_wgmma
// CPASYNC:         nvvm.cp.async.commit.group
// CPASYNC-NEXT:    nvvm.cp.async.wait.group 0
// CPASYNC-NEXT:    nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// COPY-LABEL: func.func @stage_for_wgmma
// COPY-NOT:     fence
// COPY-NOT:     async_wait
// COPY:         return
func.func @stage_for_wgmma(%k: memref<?x128xbf16>,
                           %ks: memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>,
                           %i: index, %j: index, %valid: i1) {
  attn_kernel.async_copy %k[%i, %j], %ks[%j, %j, %j, %j] if(%valid) elements(8)
      : memref<?x128xbf16>, memref<8x16x8x8xbf16, #gpu.address_space<workgroup>>
  attn_kernel.async_wait {async_proxy}
  return
}

// -----

// A device-wide fence between a block's partials and its count of them
// (and between reading the count and the others' partials): membar.gl on
// the GPU, whatever the chip; the CPU runs a block on one thread, whose
// atomics order the rest, and drops it.
// CPASYNC-LABEL: func.func @count_partials
// CPASYNC:         nvvm.memory.barrier <gpu>
// CPASYNC-NEXT:    memref.atomic_rmw
// CPASYNC-NEXT:    nvvm.memory.barrier <gpu>
// COPY-LABEL: func.func @count_partials
// COPY-NOT:     device_fence
// COPY:         memref.atomic_rmw
// COPY-NOT:     device_fence
// COPY:         return
func.func @count_partials(%counters: memref<?xi32>, %i: index) -> i32 {
  %one = arith.constant 1 : i32
  attn_kernel.device_fence
  %done = memref.atomic_rmw addi %one, %counters[%i] : (i32, memref<?xi32>) -> i32
  attn_kernel.device_fence
  return %done : i32
}

// RUN: attn-opt %s -attn-defer-async-copies | FileCheck %s --check-prefix=IR
// RUN: attn-opt %s -attn-defer-async-copies -attn-async-copy-to-loops \
// RUN:   | mlir-opt -convert-scf-to-cf -convert-vector-to-llvm \
// RUN:       -finalize-memref-to-llvm -convert-arith-to-llvm \
// RUN:       -convert-func-to-llvm -convert-cf-to-llvm \
// RUN:       -reconcile-unrealized-casts \
// RUN:   | mlir-runner -e main -entry-point-result=void \
// RUN:       -shared-libs=%mlir_c_runner_utils \
// RUN:   | FileCheck %s

// A block kernel's copies land as late as their waits allow: each thread
// queues its copies and completes them at the wait that does not leave
// their group pending. Two threads each copy src[t] (group 0) and src[2 +
// t] (group 1), wait with one group pending, read both targets, wait for
// all, read the second again. The shared buffer starts as -1; a copy's
// target holds NaN from the copy until it lands.

// IR-LABEL: func.func private @stage__complete_copies
// IR-SAME:    (%[[T:.+]]: index, %[[BOUND:.+]]: index, %[[MOST:.+]]: index, %[[REC:.+]]: memref<2x64x5xindex>, %[[HEADS:.+]]: memref<2xindex>, %[[TAILS:.+]]: memref<2xindex>, %[[SRC:.+]]: memref<4xf32>, %[[DST:.+]]: memref<4xf32>)
// IR:         scf.while
// IR:           %[[GROUP:.+]] = memref.load %[[REC]][%[[T]], %{{.+}}, %c0{{.*}}]
// IR:           arith.cmpi slt, %[[GROUP]], %[[BOUND]]
// IR:           scf.condition
// IR:           scf.index_switch
// IR:           case 0 {
// IR:             attn_kernel.async_copy %[[SRC]][%{{.+}}], %[[DST]][%{{.+}}] if(%{{.+}}) elements(1)
// IR:           case 1 {
// IR:             attn_kernel.async_copy %[[SRC]][%{{.+}}], %[[DST]][%{{.+}}] if(%{{.+}}) elements(1)
// IR-LABEL: func.func @stage
// IR:         %[[RECORDS:.+]] = memref.alloca() : memref<2x64x5xindex>
// IR-NEXT:    %[[HEADS:.+]] = memref.alloca() : memref<2xindex>
// IR-NEXT:    %[[TAILS:.+]] = memref.alloca() : memref<2xindex>
// IR-NEXT:    %[[GROUPS:.+]] = memref.alloca() : memref<2xindex>
// IR:         %[[SHARED:.+]] = memref.alloca() {attn.shared} : memref<4xf32>
// IR:         scf.parallel (%[[TH:.+]]) =
// IR-NOT:       attn_kernel.async_copy
// IR:           %[[GROUP:.+]] = memref.load %[[GROUPS]][%[[TH]]]
// IR:           memref.store %[[GROUP]], %[[RECORDS]][%[[TH]], %{{.+}}, %c0{{.*}}]
// IR:           %[[NAN:.+]] = arith.constant 0x7FC00000 : f32
// IR:           memref.store %[[NAN]], %[[SHARED]][%{{.+}}] : memref<4xf32>
// IR:           memref.store %[[G:.+]], %[[GROUPS]][%[[TH]]]
// IR:           %[[B:.+]] = arith.subi %[[G]], %{{.+}} : index
// IR:           call @stage__complete_copies(%[[TH]], %[[B]], %{{.+}}, %[[RECORDS]], %[[HEADS]], %[[TAILS]], %arg0, %[[SHARED]])
// IR-NOT:       attn_kernel.async_wait
// IR:         } {attn.threads}

// After the wait with one group pending, group 0 is there, group 1 not.
// CHECK:      10
// CHECK-NEXT: nan
// CHECK-NEXT: 11
// CHECK-NEXT: nan
// After the wait for all: group 1 too.
// CHECK-NEXT: 12
// CHECK-NEXT: 13
func.func @stage(%src: memref<4xf32>, %out: memref<6xf32>, %block: index)
    attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %true = arith.constant true
  %minus = arith.constant -1.0 : f32
  %dst = memref.alloca() {attn.shared} : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    memref.store %minus, %dst[%i] : memref<4xf32>
  }
  scf.parallel (%t) = (%c0) to (%c2) step (%c1) {
    %second = arith.addi %t, %c2 : index
    attn_kernel.async_copy %src[%t], %dst[%t] if(%true) elements(1)
        : memref<4xf32>, memref<4xf32>
    attn_kernel.async_wait
    attn_kernel.async_copy %src[%second], %dst[%second] if(%true) elements(1)
        : memref<4xf32>, memref<4xf32>
    attn_kernel.async_wait {pending = 1}
    %a = memref.load %dst[%t] : memref<4xf32>
    %b = memref.load %dst[%second] : memref<4xf32>
    vector.print %a : f32
    vector.print %b : f32
    scf.reduce
  } {attn.threads}
  scf.parallel (%t) = (%c0) to (%c2) step (%c1) {
    %second = arith.addi %t, %c2 : index
    attn_kernel.async_wait
    %b = memref.load %dst[%second] : memref<4xf32>
    vector.print %b : f32
    scf.reduce
  } {attn.threads}
  return
}

// Zeros land late too (a copy that is not valid writes its zeros at the
// wait); with more than 64 copies queued, the oldest completes early.
// CHECK-NEXT: nan
// CHECK-NEXT: 0
// Of 66 copies without a wait, the first two have landed, the third not.
// CHECK-NEXT: 10
// CHECK-NEXT: 11
// CHECK-NEXT: nan
func.func @late_zeros_and_full_queue(%src: memref<4xf32>, %block: index)
    attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c66 = arith.constant 66 : index
  %false = arith.constant false
  %true = arith.constant true
  %minus = arith.constant -1.0 : f32
  %dst = memref.alloca() {attn.shared} : memref<1xf32>
  %many = memref.alloca() {attn.shared} : memref<66xf32>
  memref.store %minus, %dst[%c0] : memref<1xf32>
  scf.for %i = %c0 to %c66 step %c1 {
    memref.store %minus, %many[%i] : memref<66xf32>
  }
  scf.parallel (%t) = (%c0) to (%c1) step (%c1) {
    attn_kernel.async_copy %src[%c0], %dst[%c0] if(%false) elements(1)
        : memref<4xf32>, memref<1xf32>
    %before = memref.load %dst[%c0] : memref<1xf32>
    vector.print %before : f32
    attn_kernel.async_wait
    %after = memref.load %dst[%c0] : memref<1xf32>
    vector.print %after : f32
    scf.for %i = %c0 to %c66 step %c1 {
      %from = arith.remui %i, %c3 : index
      attn_kernel.async_copy %src[%from], %many[%i] if(%true) elements(1)
          : memref<4xf32>, memref<66xf32>
    }
    %c2 = arith.constant 2 : index
    %x0 = memref.load %many[%c0] : memref<66xf32>
    %x1 = memref.load %many[%c1] : memref<66xf32>
    %x2 = memref.load %many[%c2] : memref<66xf32>
    vector.print %x0 : f32
    vector.print %x1 : f32
    vector.print %x2 : f32
    scf.reduce
  } {attn.threads}
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %src = memref.alloca() : memref<4xf32>
  %out = memref.alloca() : memref<6xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %x = arith.index_cast %i : index to i64
    %f = arith.uitofp %x : i64 to f32
    %ten = arith.constant 10.0 : f32
    %v = arith.addf %f, %ten : f32
    memref.store %v, %src[%i] : memref<4xf32>
  }
  call @stage(%src, %out, %c0) : (memref<4xf32>, memref<6xf32>, index) -> ()
  call @late_zeros_and_full_queue(%src, %c0) : (memref<4xf32>, index) -> ()
  return
}

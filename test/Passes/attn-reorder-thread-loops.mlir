// RUN: attn-opt %s -split-input-file -attn-reorder-thread-loops | FileCheck %s

// A thread loop (scf.parallel {attn.threads}) takes thread
// begin + end - 1 - t where it took t; other parallel loops are left as
// they are.
// CHECK-LABEL: func.func @reversed
// CHECK-SAME:    %[[BUF:[a-z0-9]+]]: memref<128xf32>
// CHECK:         scf.parallel (%[[T:.+]]) = (%c0) to (%c128) step (%c1)
// CHECK-NEXT:      %[[BOUNDS:.+]] = arith.addi %c0, %c128 : index
// CHECK:           %[[LAST:.+]] = arith.subi %[[BOUNDS]], %{{.+}} : index
// CHECK-NEXT:      %[[REV:.+]] = arith.subi %[[LAST]], %[[T]]
// CHECK-NEXT:      %[[X:.+]] = arith.index_cast %[[REV]] : index to i64
// CHECK:           memref.store %{{.+}}, %[[BUF]][%[[REV]]]
// CHECK:         } {attn.threads}
// CHECK:         scf.parallel (%[[I:.+]]) = (%c0) to (%c128) step (%c1)
// CHECK-NEXT:      memref.store %{{.+}}, %[[BUF]][%[[I]]]
func.func @reversed(%buf: memref<128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    %x = arith.index_cast %t : index to i64
    %f = arith.uitofp %x : i64 to f32
    memref.store %f, %buf[%t] : memref<128xf32>
    scf.reduce
  } {attn.threads}
  scf.parallel (%i) = (%c0) to (%c128) step (%c1) {
    memref.store %one, %buf[%i] : memref<128xf32>
    scf.reduce
  }
  return
}

// -----

// Two loops that wait for their warps alone, then one that waits for the
// block: the three go warp by warp, last warp (3) first, each warp through
// all three over its 32 threads; the loop after them stays whole.
// CHECK-LABEL: func.func @warps
// CHECK:         scf.for %[[I:.+]] = %c0{{.*}} to %c4{{.*}} step %c1
// CHECK-NEXT:      %[[WARP:.+]] = arith.subi %c3{{.*}}, %[[I]] : index
// CHECK-NEXT:      %[[BEGIN:.+]] = arith.muli %[[WARP]], %c32{{.*}} : index
// CHECK-NEXT:      %[[END:.+]] = arith.addi %[[BEGIN]], %c32{{.*}} : index
// CHECK-NEXT:      scf.parallel (%{{.+}}) = (%[[BEGIN]]) to (%[[END]]) step (%c1)
// CHECK:             memref.store %cst, %arg0
// CHECK:           } {attn.threads, attn.warp_sync}
// CHECK-NEXT:      scf.parallel (%{{.+}}) = (%[[BEGIN]]) to (%[[END]]) step (%c1)
// CHECK:             memref.store %cst_0, %arg0
// CHECK:           } {attn.threads, attn.warp_sync}
// CHECK-NEXT:      scf.parallel (%{{.+}}) = (%[[BEGIN]]) to (%[[END]]) step (%c1)
// CHECK:             memref.store %cst_1, %arg0
// CHECK:           } {attn.threads}
// CHECK-NEXT:    }
// CHECK-NEXT:    scf.parallel (%{{.+}}) = (%c0) to (%c128) step (%c1)
// CHECK:           memref.store %cst_2, %arg0
// CHECK:         } {attn.threads}
func.func @warps(%buf: memref<128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %a = arith.constant 1.0 : f32
  %b = arith.constant 2.0 : f32
  %c = arith.constant 3.0 : f32
  %d = arith.constant 4.0 : f32
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    memref.store %a, %buf[%t] : memref<128xf32>
    scf.reduce
  } {attn.threads, attn.warp_sync}
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    memref.store %b, %buf[%t] : memref<128xf32>
    scf.reduce
  } {attn.threads, attn.warp_sync}
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    memref.store %c, %buf[%t] : memref<128xf32>
    scf.reduce
  } {attn.threads}
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    memref.store %d, %buf[%t] : memref<128xf32>
    scf.reduce
  } {attn.threads}
  return
}

// -----

// In a block kernel (its last argument the block), the even blocks reverse
// and the odd ones keep the usual order: a race reads what the other
// thread has not written yet in one of them.
// CHECK-LABEL: func.func @block_kernel
// CHECK-SAME:    %[[BUF:[a-z0-9]+]]: memref<128xf32>, %[[BLOCK:[a-z0-9]+]]: index
// CHECK:         scf.parallel (%[[T:.+]]) = (%c0) to (%c128) step (%c1)
// CHECK:           %[[REV:.+]] = arith.subi %{{.+}}, %[[T]] : index
// CHECK:           %[[PARITY:.+]] = arith.andi %[[BLOCK]], %{{.+}} : index
// CHECK:           %[[EVEN:.+]] = arith.cmpi eq, %[[PARITY]], %{{.+}} : index
// CHECK-NEXT:      %[[THREAD:.+]] = arith.select %[[EVEN]], %[[REV]], %[[T]] : index
// CHECK:           memref.store %{{.+}}, %[[BUF]][%[[THREAD]]]
// CHECK:         } {attn.threads}
func.func @block_kernel(%buf: memref<128xf32>, %block: index)
    attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%t) = (%c0) to (%c128) step (%c1) {
    memref.store %one, %buf[%t] : memref<128xf32>
    scf.reduce
  } {attn.threads}
  return
}

// RUN: attn-opt %s -attn-poison-kernel-buffers | FileCheck %s

// Shared and register buffers start as NaN (floats) or -1 (integers), each
// filled as one row of its elements right after its allocation; other
// allocations are left as they are.
// CHECK-LABEL: func.func @buffers
// CHECK:         %[[S:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<4x8xbf16>
// CHECK-NEXT:    %[[SF:.+]] = memref.collapse_shape %[[S]] {{\[}}[0, 1]] : memref<4x8xbf16> into memref<32xbf16>
// CHECK-NEXT:    %[[NAN:.+]] = arith.constant 0x7FC0 : bf16
// CHECK:         scf.for %[[I:.+]] = %{{.+}} to %c32{{.*}} step
// CHECK-NEXT:      memref.store %[[NAN]], %[[SF]][%[[I]]] : memref<32xbf16>
// CHECK:         %[[M:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16xi8>
// CHECK-NEXT:    %[[ONES:.+]] = arith.constant -1 : i8
// CHECK:         memref.store %[[ONES]], %[[M]][%{{.+}}] : memref<16xi8>
// CHECK:         %[[R:.+]] = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<64x2x4xf32>
// CHECK-NEXT:    %[[RF:.+]] = memref.collapse_shape %[[R]]
// CHECK-NEXT:    %[[FNAN:.+]] = arith.constant 0x7FC00000 : f32
// CHECK:         memref.store %[[FNAN]], %[[RF]]
// CHECK:         %[[P:.+]] = memref.alloca() : memref<8xf32>
// CHECK-NOT:     memref.store
// CHECK:         return
func.func @buffers() {
  %s = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<4x8xbf16>
  %m = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16xi8>
  %r = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<64x2x4xf32>
  %p = memref.alloca() : memref<8xf32>
  return
}
